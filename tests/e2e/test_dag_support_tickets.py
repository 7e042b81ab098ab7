"""The docs' non-image example (docs/tutorials/your-own-model.md) end to end on the local backend: a text classifier of a team's own
(examples/support_tickets) in 30 lines over the builder: int64 token ids of any length, a tokenizer module its
score.py imports, val_f1 maximized with Bandit, its own parity inputs, exported with a dynamic text length and
deployed; then its endpoint answers tickets it never saw, and nothing is left behind."""

from __future__ import annotations

import json

import pytest

from mlrunway.errors import EndpointError
from mlrunway.local.backend import LocalBackend
from tests.e2e.stack import run_shipped_dag

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FRESH = {"data": ["hi, the refund for my double payment never came back to my card",
                  "tracking has said out for delivery for a week and the package is lost",
                  "every time I sync, the app freezes and shows an error",
                  "password"]}


def test_a_text_classifier_of_its_own_sweeps_exports_with_dynamic_length_and_answers_fresh_tickets(
        airflow_db, tmp_path, monkeypatch):
    import onnx

    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    # one wave of two concurrent trials; the endpoint kept to be asked afterwards
    run, results = run_shipped_dag("support_tickets", {"epochs": 4, "max_trials": 2, "tickets": 600,
                                                       "keep_endpoint": True})
    assert str(run.state) == "success", results
    backend = LocalBackend.at(tmp_path / "ws")

    assert backend.jobs.metrics(results["train"]["job_name"])["val_f1"] > 0.6
    swept = backend.jobs.sweep_result(results["sweep"]["sweep_name"])
    assert swept.objective.goal == "maximize" and len(swept.trials) == 2
    best = results["pick_best"]
    assert best["metric"] == "val_f1" and best["value"] == max(max(t.history) for t in swept.trials if t.history)

    parity = results["export_onnx"]["parity"]
    assert parity["inputs"] == "inputs from sample_inputs.npy" and parity["passed"]
    assert parity["top1_agreement"] == 1.0  # a classifier: its classes are in the signature
    exported = backend.models.get(results["export_onnx"]["model_name"], results["export_onnx"]["model_version"])
    (tokens,) = onnx.load(f"{exported.path}/model.onnx").graph.input
    assert tokens.name == "tokens" and tokens.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert all(d.dim_param for d in tokens.type.tensor_type.shape.dim)  # any batch, any text length

    deployed = results["deploy_blue"]
    assert deployed["smoke_matched"].startswith("as expected (score.py run on ") and "-reference:" in deployed["smoke_matched"]
    endpoint = deployed["endpoint"]
    try:
        answer = json.loads(backend.endpoints.invoke(endpoint, payload=FRESH))
        labels = [p["label"] for p in answer["predictions"]]
        assert labels[:3] == ["billing", "delivery", "technical"]  # texts of other lengths than it was exported on
        assert labels[3] in ("billing", "delivery", "technical") and all(
            abs(sum(p["probabilities"]) - 1) < 1e-5 for p in answer["predictions"])
        with pytest.raises(EndpointError, match="HTTP 424: .*data must be a non-empty list of ticket texts"):
            backend.endpoints.invoke(endpoint, payload={"data": [3]})  # score.py's 400, through the scoring URI
        assert results["cleanup"]["endpoint_kept"] is True
    finally:
        backend.endpoints.delete(endpoint)
    assert backend.endpoints.list() == [] and backend.leftovers() == []
