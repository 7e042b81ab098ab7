"""Chaos: a local sweep's controller dies mid-sweep. The sweep reports it at the next read, and ``recover`` (what
a waiting task's poll calls) resumes it from its record: the running trials are adopted and judged, the rest
start, and it ends as an undisturbed sweep does. Real processes, bounded."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest

from mlrunway.backend.types import JobStatus
from mlrunway.early_termination import applies_at
from mlrunway.local import tracking
from mlrunway.local.backend import LocalBackend
from mlrunway.local.processes import marked
from tests.conftest import REPO, write_script
from tests.mlrunway.local.test_sweep import CURVE_SCRIPT, CURVES, curve_sweep

pytestmark = [pytest.mark.slow, pytest.mark.chaos]


def decisions(jobs, name: str) -> tuple[dict[str, int], str | None, dict[str, JobStatus]]:
    result = jobs.sweep_result(name)
    curve = {t.name: list(CURVES)[int(t.name.rsplit("_", 1)[1])] for t in result.trials}
    stopped = {curve[t.name]: t.early_termination["interval"] for t in result.trials if t.early_termination}
    statuses = {curve[t.name]: t.status for t in result.trials}
    return stopped, curve.get(result.best_trial or ""), statuses


def controller_of(jobs, name: str) -> psutil.Process:
    folder = str(jobs.workspace.job_dir(name))
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "mlrunway.local.sweep_controller" in cmd and cmd.endswith(folder):
            return proc
    raise AssertionError(f"no controller of {name} runs")


def test_a_killed_controller_is_resumed_and_decides_as_an_undisturbed_sweep(jobs, tmp_path):
    code = write_script(tmp_path / "code", CURVE_SCRIPT)
    spec = curve_sweep(code, list(CURVES.values()), pause=0.6)  # every trial at once: timing decides nothing
    jobs.submit_sweep("calm", spec, poll_s=0.3)
    jobs.submit_sweep("storm", spec, poll_s=0.3)
    deadline = time.monotonic() + 60
    while len(jobs.sweep_result("storm").trials) < len(CURVES):  # all started, none ended
        assert time.monotonic() < deadline
        time.sleep(0.2)
    controller_of(jobs, "storm").kill()
    deadline = time.monotonic() + 15  # the supervisor sees its controller die at its next poll and records it
    while not (died := jobs.get("storm")).status.is_terminal():
        assert time.monotonic() < deadline, died
        time.sleep(0.1)
    assert died.status is JobStatus.FAILED and died.error.startswith("sweep controller (pid")
    assert "killed by SIGKILL" in died.error
    # The trials are jobs of their own: they go on (unjudged) until a controller adopts them.
    assert not any(jobs.get(t.name).status.is_terminal() for t in jobs.sweep_result("storm").trials)
    resumed = jobs.recover("storm")
    assert resumed.status in (JobStatus.QUEUED, JobStatus.RUNNING)
    assert jobs.wait("storm", timeout=120, poll_s=0.3).status is JobStatus.COMPLETED
    assert jobs.wait("calm", timeout=120, poll_s=0.3).status is JobStatus.COMPLETED
    # The same outcome as the undisturbed sweep, decision for decision (issue 28, 4: a trial is judged against
    # the trials that started before it once they reach the interval, so timing decides nothing), but for a
    # judgement made at the wait's bound (partial, recorded), and the best trial; every trial run once on its
    # own curve.
    stopped, best, _ = decisions(jobs, "storm")
    calm_stopped, calm_best, _ = decisions(jobs, "calm")
    partial = {list(CURVES)[int(p["trial"].rsplit("_", 1)[1])] for sweep in ("calm", "storm")
               for p in json.loads((jobs.workspace.job_dir(sweep) / "outputs" / "sweep.json").read_text())
               ["partial_judgements"]}
    def exact(found: dict[str, int]) -> dict[str, int]:
        return {k: v for k, v in found.items() if k not in partial}

    assert exact(stopped) == exact(calm_stopped) == exact({"slow": 2, "fade": 3})
    assert best == calm_best == "good"
    result = jobs.sweep_result("storm")
    assert sorted(t.name for t in result.trials) == [f"storm_trial_{i}" for i in range(len(CURVES))]
    for trial in result.trials:
        assert trial.history == tuple(list(CURVES.values())[int(trial.name.rsplit("_", 1)[1])][: len(trial.history)])
    assert stopped and all(applies_at(1, 2, interval) for interval in stopped.values())
    run = tracking.client(jobs.workspace).get_run(jobs.get("storm").mlflow_run_id)
    assert run.info.status == "FINISHED"  # the sweep's run went on, and ended as the sweep did
    token = (jobs.workspace.job_dir("storm") / "job.json").read_text().split('"token": "')[1].split('"')[0]
    deadline = time.monotonic() + 15  # the supervisor records the end, then exits: nothing of the sweep is left
    while marked(token):
        assert time.monotonic() < deadline, f"still running: {marked(token)}"
        time.sleep(0.1)


def test_recover_command_resumes_every_dead_controller_of_the_workspace(jobs, tmp_path):
    code = write_script(tmp_path / "code", CURVE_SCRIPT)
    jobs.submit_sweep("boot", curve_sweep(code, [CURVES["good"], CURVES["fine"]], pause=0.4, policy=None), poll_s=0.3)
    deadline = time.monotonic() + 60
    while len(jobs.sweep_result("boot").trials) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    supervisor = psutil.Process(_supervisor(jobs, "boot"))
    supervisor.kill()  # the controller dies with it
    supervisor.wait(10)
    assert jobs.get("boot").status is JobStatus.FAILED
    out = subprocess.run([sys.executable, "-m", "mlrunway.local", "recover", "--workspace", str(jobs.workspace.root)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "sweep boot: resumed" in out.stdout, out.stderr
    assert LocalBackend.at(jobs.workspace.root).jobs.wait("boot", timeout=120, poll_s=0.3).status is JobStatus.COMPLETED
    assert len(jobs.sweep_result("boot").trials) == 2


def _supervisor(jobs, name: str) -> int:
    return json.loads((jobs.workspace.job_dir(name) / "status.json").read_text())["supervisor_pid"]


def _dead_sweep(jobs, tmp_path, name: str) -> list[str]:
    """A sweep of two long trials whose controller was killed; its trials' names."""
    code = write_script(tmp_path / f"code-{name}", CURVE_SCRIPT)
    jobs.submit_sweep(name, curve_sweep(code, [CURVES["good"], CURVES["fine"]], pause=5, policy=None), poll_s=0.3)
    deadline = time.monotonic() + 60
    while len(trials := jobs.sweep_result(name).trials) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    controller_of(jobs, name).kill()
    deadline = time.monotonic() + 15
    while jobs.get(name).status is not JobStatus.FAILED:
        assert time.monotonic() < deadline, jobs.get(name)
        time.sleep(0.1)
    return [t.name for t in trials]


def test_a_canceled_sweep_whose_controller_had_died_is_never_resumed(jobs, tmp_path):
    """Issue 27, 1: before, cancel() wrote no request for a sweep whose controller was dead and returned Failed;
    recover (the CLI, an Airflow retry) then resumed it, and it ran new trials to Completed."""
    trials = _dead_sweep(jobs, tmp_path, "undead")
    canceled = jobs.cancel("undead", reason="stop it")
    assert canceled.status is JobStatus.CANCELED and "stop it" in canceled.error and "controller" in canceled.error
    from mlrunway.local import tracking  # issue 59, 2: its MLflow run said FAILED while the sweep read Canceled

    assert tracking.client(jobs.workspace).get_run(canceled.mlflow_run_id).info.status == "KILLED"
    assert all(jobs.get(t).status is JobStatus.CANCELED for t in trials)
    assert jobs.recover("undead").status is JobStatus.CANCELED
    out = subprocess.run([sys.executable, "-m", "mlrunway.local", "recover", "--workspace", str(jobs.workspace.root)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "undead" not in out.stdout, out.stdout
    time.sleep(1)  # time enough for a resumed controller to start a trial
    assert jobs.get("undead").status is JobStatus.CANCELED
    assert sorted(t.name for t in jobs.sweep_result("undead").trials) == sorted(trials)


def test_a_trial_that_completed_while_its_controller_was_down_reads_as_its_job_and_mlflow_run_do(jobs, tmp_path):
    """Issue 27, 8: a trial that finished during a controller outage read Canceled at the policy's interval in the
    sweep's record, but Completed with every epoch in its job and its MLflow run."""
    code = write_script(tmp_path / "code", CURVE_SCRIPT)
    jobs.submit_sweep("late", curve_sweep(code, [CURVES["good"], CURVES["slow"]], pause=0.6), poll_s=0.3)
    deadline = time.monotonic() + 60
    while len(trials := jobs.sweep_result("late").trials) < 2 or any(not t.history for t in trials):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    controller_of(jobs, "late").kill()  # before interval 2, where the policy stops "slow"
    names = [t.name for t in trials]
    deadline = time.monotonic() + 60
    while not all(jobs.get(n).status.is_terminal() for n in names):  # the trials run on, unjudged, to their end
        assert time.monotonic() < deadline
        time.sleep(0.2)
    jobs.recover("late")
    assert jobs.wait("late", timeout=60, poll_s=0.3).status is JobStatus.COMPLETED
    store = tracking.client(jobs.workspace)
    for trial in jobs.sweep_result("late").trials:
        job = jobs.get(trial.name)
        logged = store.get_metric_history(job.mlflow_run_id, "best_val_acc")
        assert trial.status is job.status is JobStatus.COMPLETED, trial
        assert store.get_run(job.mlflow_run_id).info.status == "FINISHED"
        assert len(trial.history) == len(logged) == len(CURVES["good"]), trial
    slow = jobs.sweep_result("late").trials[1]
    assert slow.early_termination["interval"] == 2 and slow.early_termination["applied"] is False, slow
    assert not slow.stopped_early


def test_of_two_racing_recovers_only_the_one_that_resumed_says_so(jobs, tmp_path):
    """Issue 27, 10: the second of two racing `recover` runs reported "resumed" though it did nothing."""
    _dead_sweep(jobs, tmp_path, "raced")
    started = jobs.get("raced").started
    command = [sys.executable, "-m", "mlrunway.local", "recover", "--workspace", str(jobs.workspace.root)]
    racing = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    said = [proc.communicate(timeout=60)[0] for proc in racing]
    assert sum("sweep raced: resumed" in out for out in said) == 1, said
    assert jobs.resume("raced") is False  # running again: nothing to resume
    deadline = time.monotonic() + 30
    while jobs.get("raced").status is not JobStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert jobs.get("raced").started == started  # issue 27, 8: the sweep's start is not overwritten by recover
    jobs.cancel("raced")


def test_after_a_reboot_mid_sweep_the_lost_trials_run_again_and_the_sweep_completes_its_budget(jobs, tmp_path):
    """Issue 27, 4: every process of the sweep killed at once (a reboot), then `recover`: the trials that were
    running are run again as new attempts (before: adopted as Failed, the sweep Completed on 2 of its 4 trials)."""
    code = write_script(tmp_path / "code", CURVE_SCRIPT)
    jobs.submit_sweep("boot", curve_sweep(code, [CURVES["good"], CURVES["fine"]], pause=0.5, policy=None), poll_s=0.3)
    deadline = time.monotonic() + 60
    while len(trials := jobs.sweep_result("boot").trials) < 2 or any(not t.history for t in trials):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    tokens = [json.loads((jobs.workspace.job_dir(n) / "job.json").read_text())["token"]
              for n in ("boot", *(t.name for t in trials))]
    deadline = time.monotonic() + 15
    while procs := [p for token in tokens for p in marked(token)]:  # the power goes: everything at once
        assert time.monotonic() < deadline
        for proc in procs:
            proc.kill()
        # gone, not only unmarked: an exiting process no longer shows its environment before it is a zombie,
        # and a reader that saw it then would rightly call it alive
        assert not psutil.wait_procs(procs, timeout=10)[1]
    backend = LocalBackend.at(jobs.workspace.root)  # after the reboot: a fresh reader
    assert backend.jobs.get("boot").status is JobStatus.FAILED
    backend.jobs.recover("boot")
    assert backend.jobs.wait("boot", timeout=120, poll_s=0.3).status is JobStatus.COMPLETED
    result = backend.jobs.sweep_result("boot")
    completed = sorted(t.name for t in result.trials if t.status is JobStatus.COMPLETED)
    assert completed == ["boot_trial_0-a2", "boot_trial_1-a2"], [(t.name, t.status, t.error) for t in result.trials]
    assert all("run again as" in t.error for t in result.trials if t.status is JobStatus.FAILED)
    assert result.best_trial == "boot_trial_0-a2"  # the good curve, run to its end
