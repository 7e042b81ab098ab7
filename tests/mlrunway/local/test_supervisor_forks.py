"""A sweep's trials' supervisors forked from one pre-imported server (SupervisorForks): each runs its job as a fresh
supervisor would, is found by its own job's token (not the sweep's), and a server that breaks never runs a job twice."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from mlrunway.backend.types import JobStatus
from mlrunway.local.jobs import LocalJobs, SupervisorForks
from mlrunway.local.processes import JOB_TOKEN_ENV, marked
from mlrunway.local.supervisor import JobState
from mlrunway.specs import CommandJobSpec
from tests.conftest import write_script

pytestmark = pytest.mark.slow

SWEEP_TOKEN = "5" * 32  # what a controller's environment carries: its sweep's token
WAITS = """
import os, pathlib, time
print(os.environ["MLRUNWAY_JOB_TOKEN"], flush=True)
while not pathlib.Path("go").exists():
    time.sleep(0.02)
"""


@pytest.fixture
def forked(jobs: LocalJobs, tmp_path, monkeypatch):
    monkeypatch.setenv(JOB_TOKEN_ENV, SWEEP_TOKEN)
    jobs.forks = SupervisorForks(tmp_path / "sweep")
    yield jobs
    jobs.forks.close()
    for info in jobs.list():  # a test that failed midway leaves no job waiting for its file
        if not info.status.is_terminal():
            jobs.cancel(info.name)


def spec(tmp_path) -> CommandJobSpec:
    return CommandJobSpec(code=str(write_script(tmp_path / "code", WAITS)), command="python script.py",
                          experiment_name="forks")


def supervisor_of(jobs: LocalJobs, name: str) -> psutil.Process:
    return psutil.Process(JobState(jobs.workspace.job_dir(name)).status()["supervisor_pid"])


def running(jobs: LocalJobs, name: str) -> None:
    deadline = time.monotonic() + 30
    log = jobs.workspace.job_dir(name) / "logs" / "stdout.log"
    while not (log.exists() and log.read_text().strip()):
        assert time.monotonic() < deadline, jobs.get(name)
        time.sleep(0.05)


def finish(jobs: LocalJobs, name: str) -> JobStatus:
    (jobs.workspace.job_dir(name) / "code" / "go").touch()
    return jobs.wait(name, poll_s=0.1).status


def test_a_forked_supervisor_runs_its_job_and_is_marked_with_its_own_token_not_the_sweeps(forked, tmp_path):
    forked.submit("first", spec(tmp_path))
    running(forked, "first")
    server, supervisor = forked.forks.proc, supervisor_of(forked, "first")
    token = JobState(forked.workspace.job_dir("first")).job()["token"]
    assert supervisor.ppid() == server.pid  # forked, not started afresh
    assert "mlrunway.local.supervisor" in " ".join(supervisor.cmdline())  # as the workspace's processes are found
    job_pids = {p.pid for p in marked(token)}
    script = next(p for p in supervisor.children() if p.pid in job_pids)
    assert supervisor.pid in job_pids and script.pid in job_pids  # a dead supervisor's leftovers are found by it
    assert {p.pid for p in marked(SWEEP_TOKEN)} & job_pids == set()  # stopping a dead sweep's leftovers spares it
    assert server.pid in {p.pid for p in marked(SWEEP_TOKEN)}
    assert (forked.workspace.job_dir("first") / "logs" / "stdout.log").read_text().strip() == token
    assert finish(forked, "first") is JobStatus.COMPLETED
    assert forked.get("first").exit_code == 0
    forked.submit("second", spec(tmp_path))  # the same server again
    running(forked, "second")
    assert supervisor_of(forked, "second").ppid() == server.pid
    assert finish(forked, "second") is JobStatus.COMPLETED
    forked.forks.close()
    assert server.poll() is not None  # it ends with its client; its forks had ended before


def test_a_server_that_cannot_take_a_request_leaves_the_job_to_a_fresh_supervisor(forked, tmp_path):
    # Alive but no longer reading: the request cannot be written, so nothing was forked.
    forked.forks.proc = deaf = subprocess.Popen(["sh", "-c", "exec 0<&-; sleep 60"], stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE)
    time.sleep(0.2)
    forked.submit("fresh", spec(tmp_path))
    running(forked, "fresh")
    supervisor = supervisor_of(forked, "fresh")
    assert "main()" in " ".join(supervisor.cmdline()) and supervisor.ppid() != deaf.pid
    assert deaf.poll() is not None and forked.forks.proc is None  # the broken one was stopped
    assert finish(forked, "fresh") is JobStatus.COMPLETED


def test_a_server_that_takes_a_request_and_gives_no_answer_is_killed_and_the_job_failed_not_run_twice(
        forked, tmp_path, monkeypatch):
    monkeypatch.setattr(SupervisorForks, "ANSWER_S", 0.5)
    forked.forks.start()
    server = forked.forks.proc
    os.kill(server.pid, signal.SIGSTOP)  # frozen: it may or may not have forked
    forked.submit("frozen", spec(tmp_path))
    info = forked.get("frozen")
    assert info.status is JobStatus.FAILED and "its supervisor could not be started" in info.error
    assert "no answer" in info.error
    assert server.poll() == -signal.SIGKILL  # killed, and reaped
    token = JobState(forked.workspace.job_dir("frozen")).job()["token"]
    assert marked(token) == []
    forked.submit("after", spec(tmp_path))  # a new server takes the next one
    running(forked, "after")
    assert supervisor_of(forked, "after").ppid() == forked.forks.proc.pid != server.pid
    assert finish(forked, "after") is JobStatus.COMPLETED
