"""A real local sweep held to its budget by its controller: the trials running at the cap are canceled, each
keeping its best model so far, the sweep ends Completed with the decision recorded, pick_best still picks, and a
retried task re-attaches to it instead of spending again."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mlrunway.backend.attempts import Action, submit_or_reattach
from mlrunway.backend.types import JobStatus
from mlrunway.local.backend import LocalBackend
from mlrunway.pipeline import pick_best
from mlrunway.specs import Choice, CommandJobSpec, Objective, SweepLimits, SweepSpec
from mlrunway.specs.sweep import SweepBudget
from tests.conftest import write_script

pytestmark = pytest.mark.slow

SCRIPT = """
import argparse, os, signal, time, mlflow
p = argparse.ArgumentParser(); p.add_argument("--curve")
a = p.parse_args()
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))  # a cancel lands between epochs, as a trainer's does
best = None
for step, value in enumerate(float(v) for v in a.curve.split(",")):
    if stop:
        break
    if best is None or value > best:  # the best model so far, as a trainer keeps it
        best = value
        os.makedirs("outputs/model", exist_ok=True)
        with open("outputs/model/best.txt", "w") as f:
            f.write(str(value))
    mlflow.log_metric("acc", value, step=step)
    time.sleep(0.5)
"""


def test_a_sweep_stops_at_its_budget_keeps_its_best_so_far_and_a_retry_reattaches(workspace, tmp_path):
    backend = LocalBackend(workspace)
    code = write_script(tmp_path / "code", SCRIPT)
    curves = [[0.1 * i + 0.01 * k for i in range(1, 40)] for k in range(4)]  # 20 s each: longer than the budget
    trial = CommandJobSpec(code=str(code), command="python script.py --curve ${{inputs.curve}}",
                           inputs={"curve": "0"}, experiment_name="budget")
    spec = SweepSpec(trial=trial, search_space={"curve": Choice(values=[",".join(map(str, c)) for c in curves])},
                     sampling_algorithm="grid", objective=Objective(primary_metric="acc"),
                     limits=SweepLimits(max_total_trials=4, max_concurrent_trials=2))
    # 20 process-seconds: two trials running side by side spend it in about 10 s, their start-up (Python and
    # MLflow's import, seconds on a loaded machine) included: enough for each to log epochs first.
    budget = SweepBudget(limit=20 / 3600, measure="hours", basis="a test's")
    backend.jobs.submit_sweep("bsw", replace(spec, budget=budget), poll_s=0.25)
    info = backend.jobs.wait("bsw", poll_s=0.25, timeout=120)
    assert info.status is JobStatus.COMPLETED, info.error  # it ended with what it had: not a failure

    result = backend.jobs.sweep_result("bsw")
    assert result.stopped_because.startswith("stopped by budget: spent 0.00")
    assert "of 0.005556 compute-hours (a test's); 2 running trials canceled" in result.stopped_because
    assert [t.name for t in result.trials] == ["bsw_trial_0", "bsw_trial_1"]  # the other two never started
    for trial in result.trials:
        assert trial.status is JobStatus.CANCELED and trial.history, trial
        assert backend.jobs.get(trial.name).status is JobStatus.CANCELED
    # The sweep's record says what it spent once its canceled trials had ended: what their own records say. Past
    # the budget: a poll (0.25 s) and each trial's exit after its SIGTERM (its supervisor records the end when its
    # processes are gone), a second or so here, more on a loaded machine: the record holds the figure.
    spent = sum((u.ended - u.started) * u.processes for u in backend.jobs.trial_usage("bsw").values()) / 3600
    record = json.loads((workspace.job_dir("bsw") / "outputs" / "sweep.json").read_text())["budget"]
    assert record["spent"] == pytest.approx(spent) and spent >= 20 / 3600
    assert record["stopped"] == result.stopped_because and record["limit"] == 20 / 3600

    picked = pick_best(backend, "bsw", "budget-model")
    best = max(result.trials, key=lambda t: max(t.history))  # canceled at the cap: each on its best so far
    assert (picked["trial"], picked["value"]) == (best.name, max(best.history))
    kept = float((Path(backend.models.get("budget-model", picked["model_version"]).path) / "best.txt").read_text())
    assert kept == picked["value"]  # the metric it is registered with is its model's: all it logged was read

    again = submit_or_reattach(backend.jobs, "bsw", lambda name: pytest.fail(f"a retry submitted {name}"))
    assert again.action is Action.REATTACHED and again.job.name == "bsw"
