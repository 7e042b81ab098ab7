"""The README's team DAG (also docs/how-to/install.md's) end to end on the local backend: a team's own regressor in 30 lines over the builder
(DDP on two processes, its own flags and data, val_rmse minimized with median stopping, a named output, its own
parity inputs and smoke request, whose answer is checked), then what it left behind."""

from __future__ import annotations

import json

import pytest

from mlrunway.local.backend import LocalBackend
from tests.e2e.stack import run_shipped_dag

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def export_name(results: dict) -> str:
    return f"{results['export_onnx']['model_name']}:{results['export_onnx']['model_version']}"


def test_a_regressor_of_its_own_trains_with_ddp_sweeps_minimizing_exports_and_deploys(airflow_db, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    run, results = run_shipped_dag("demand_forecast", {"epochs": 6, "max_trials": 2})  # one wave of two trials
    assert str(run.state) == "success", results
    backend = LocalBackend.at(tmp_path / "ws")

    train = results["train"]["job_name"]
    assert int(backend.jobs.params(train)["world_size"]) == 2  # DDP: two processes, rank 0 logged
    assert backend.jobs.metrics(train)["val_rmse"] < 1.5
    swept = backend.jobs.sweep_result(results["sweep"]["sweep_name"])
    assert swept.objective.goal == "minimize" and len(swept.trials) == 2
    assert {type(t.params["hidden_units"]) for t in swept.trials} == {int}  # the integer choice stays an integer
    assert all(set(t.params) >= {"hidden_units", "lr", "weight_decay"} for t in swept.trials)
    finished = [t for t in swept.trials if t.history]
    best = results["pick_best"]
    assert best["value"] == min(min(t.history) for t in finished)  # minimized: the lowest val_rmse wins

    parity = results["export_onnx"]["parity"]
    assert parity["inputs"] == "inputs from sample_inputs.npy" and parity["top1_agreement"] is None
    assert parity["passed"] and parity["tolerance_used"] <= 1 and parity["rtol"] > 0  # scaled to the outputs
    deployed = results["deploy_blue"]
    assert deployed["smoke_request"] == "sample_request.json"
    answer = deployed["smoke_answer"]  # XCom hands back the JSON the task returned as text, parsed
    answer = json.loads(answer) if isinstance(answer, str) else answer
    assert len(answer["predictions"]) == 2 and all(isinstance(p, float) for p in answer["predictions"])
    # The answer was checked against score.py's own, run in the worker on the deployed version, not only parsed.
    assert deployed["smoke_matched"].startswith(f"as expected (score.py run on {export_name(results)} in job ")  # its reference job
    assert results["cleanup"]["endpoint_deleted"] is True
    assert backend.endpoints.list() == [] and backend.leftovers() == []
