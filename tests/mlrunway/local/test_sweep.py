"""Real sweeps over a script with known metric curves: the policy stops exactly what the reference says."""

from __future__ import annotations

import time

import psutil
import pytest

from mlrunway.backend.types import JobStatus
from mlrunway.early_termination import evaluate
from mlrunway.local import tracking
from mlrunway.specs import BanditPolicy, Choice, CommandJobSpec, Objective, SweepLimits, SweepSpec
from tests.conftest import write_script

pytestmark = pytest.mark.slow

CURVES = {
    "good": [0.5, 0.7, 0.8, 0.9, 0.92, 0.93, 0.94, 0.95],
    "fine": [0.45, 0.65, 0.75, 0.85, 0.88, 0.9, 0.91, 0.92],
    "slow": [0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55],
    "fade": [0.5, 0.65, 0.66, 0.66, 0.66, 0.66, 0.66, 0.66],
}
CURVE_SCRIPT = """
import argparse, time, mlflow
p = argparse.ArgumentParser(); p.add_argument("--curve"); p.add_argument("--pause", type=float)
a = p.parse_args()
for step, value in enumerate(float(v) for v in a.curve.split(",")):
    if value < 0:
        raise SystemExit(f"curve asked for a crash at step {step}")
    mlflow.log_metric("val_acc", value, step=step)
    mlflow.log_metric("best_val_acc", value, step=step)
    time.sleep(a.pause)
"""
POLICY = BanditPolicy(slack_factor=0.2, evaluation_interval=1, delay_evaluation=2)


def curve_sweep(code, curves, *, pause=1.0, policy=POLICY):
    trial = CommandJobSpec(code=str(code), command="python script.py --curve ${{inputs.curve}} --pause ${{inputs.pause}}",
                           inputs={"curve": "0", "pause": pause}, experiment_name="curves")
    return SweepSpec(trial=trial, search_space={"curve": Choice(values=[",".join(map(str, c)) for c in curves])},
                     sampling_algorithm="grid", objective=Objective(primary_metric="best_val_acc"),
                     early_termination=policy, limits=SweepLimits(max_total_trials=len(curves)))


def test_sweep_stops_exactly_the_trials_the_reference_computation_stops(jobs, tmp_path):
    code = write_script(tmp_path / "code", CURVE_SCRIPT)
    names = list(CURVES)
    jobs.submit_sweep("curves", curve_sweep(code, [CURVES[n] for n in names]), poll_s=0.3)
    info = jobs.wait("curves", poll_s=0.5)
    assert info.status is JobStatus.COMPLETED, info.error
    result = jobs.sweep_result("curves")
    trials = {names[int(t.name.rsplit("_", 1)[1])]: t for t in result.trials}

    reference = {name: stop.interval for name, stop in evaluate(POLICY, CURVES, "maximize").items()}
    assert reference == {"slow": 2, "fade": 3}
    stopped = {name: t.early_termination["interval"] for name, t in trials.items() if t.early_termination}
    assert stopped == reference
    for name, trial in trials.items():
        assert trial.history == tuple(CURVES[name][: len(trial.history)])  # each trial got its own curve
        expected = JobStatus.CANCELED if name in reference else JobStatus.COMPLETED
        assert jobs.get(trial.name).status is expected
    assert "early termination at interval 2" in jobs.get(trials["slow"].name).error
    assert result.best_trial == trials["good"].name

    store = tracking.client(jobs.workspace)
    parent = info.mlflow_run_id
    for trial in trials.values():
        run = store.get_run(jobs.get(trial.name).mlflow_run_id)
        assert run.data.tags["mlflow.parentRunId"] == parent


def test_all_trials_failing_fails_the_sweep_with_their_errors(jobs, tmp_path):
    code = write_script(tmp_path / "code", CURVE_SCRIPT)
    jobs.submit_sweep("broken", curve_sweep(code, [[0.5, -1], [-1]], pause=0.1, policy=None), poll_s=0.3)
    info = jobs.wait("broken", poll_s=0.5)
    assert info.status is JobStatus.FAILED
    assert "no trial produced the primary metric" in info.error or "curve asked for a crash" in info.error
    result = jobs.sweep_result("broken")
    assert [t.status for t in result.trials] == [JobStatus.FAILED, JobStatus.FAILED]
    assert "curve asked for a crash at step 1" in result.error


def test_a_sweep_result_has_its_objective_and_status_before_the_controller_first_writes(jobs, tmp_path):
    """The report page reads it in the sweep's first second: no KeyError, the same fields as later."""
    code = write_script(tmp_path / "code", CURVE_SCRIPT)
    jobs.submit_sweep("early", curve_sweep(code, [CURVES["good"]], pause=0.1, policy=None), poll_s=0.3)
    (jobs.workspace.job_dir("early") / "outputs" / "sweep.json").unlink(missing_ok=True)  # as before the first write
    result = jobs.sweep_result("early")
    assert result.objective.primary_metric == "best_val_acc" and result.status in (JobStatus.QUEUED, JobStatus.RUNNING)
    assert isinstance(result.trials, tuple) and result.best_trial is None
    assert jobs.wait("early", poll_s=0.3).status is JobStatus.COMPLETED


def test_canceling_a_sweep_cancels_its_trials_and_leaves_no_process(jobs, tmp_path):
    code = write_script(tmp_path / "code", CURVE_SCRIPT)
    jobs.submit_sweep("stopme", curve_sweep(code, [CURVES["good"], CURVES["fine"]], pause=5, policy=None), poll_s=0.3)
    deadline = time.monotonic() + 60
    while len(jobs.sweep_result("stopme").trials) < 2 or any(
        jobs.get(t.name).status is not JobStatus.RUNNING for t in jobs.sweep_result("stopme").trials
    ):
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert jobs.cancel("stopme").status is JobStatus.CANCELED
    trials = jobs.sweep_result("stopme").trials
    for trial in trials:
        info = jobs.wait(trial.name, timeout=30, poll_s=0.2)
        assert info.status is JobStatus.CANCELED and info.error == "the sweep was canceled"
    assert_no_process_mentions(str(jobs.workspace.root))


def assert_no_process_mentions(text, within_s=10.0):
    """Every process whose command line names ``text`` is gone within ``within_s`` (supervisors exit last)."""
    deadline = time.monotonic() + within_s
    while True:
        left = [" ".join(p.info["cmdline"]) for p in psutil.process_iter(["cmdline"]) if text in " ".join(p.info["cmdline"] or [])]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == []
