"""Chaos: a local sweep's controller dies mid-sweep. The sweep reports it at the next read, and ``recover`` (what
a waiting task's poll calls) resumes it from its record: the running trials are adopted and judged, the rest
start, and it ends as an undisturbed sweep does. Real processes, bounded."""

from __future__ import annotations

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
    # The same outcome as the undisturbed sweep: the best trial, every trial run once on its own curve, and each
    # stop at an interval where the policy applies. (Which intervals, exactly, can vary with CPU contention even
    # undisturbed, as trials reach an interval at different times: the scripted-runner test in
    # tests/mlrunway/sweep/test_controller.py proves decision-for-decision equality where timing is fixed.)
    stopped, best, _ = decisions(jobs, "storm")
    assert best == decisions(jobs, "calm")[1] == "good"
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
    import json

    return json.loads((jobs.workspace.job_dir(name) / "status.json").read_text())["supervisor_pid"]
