"""Chaos: the local backend's own processes die (kill -9, a reboot, an unwritable folder) and a reader still gets
the truth at its next poll, nothing is left running, MLflow tells the same story, and a resubmit recovers.

Real processes on this machine only; each test is bounded (seconds). "One poll" is one ``get()``: the first read
after the death is the truth.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mlrunway.backend.attempts import Action, submit_or_reattach
from mlrunway.backend.types import JobStatus
from mlrunway.local import tracking
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.processes import JOB_TOKEN_ENV, marked, wait_gone
from mlrunway.specs import CommandJobSpec
from tests.conftest import REPO, write_script

pytestmark = [pytest.mark.slow, pytest.mark.chaos]

TRAINS = """
import os, pathlib, sys, time
import mlflow
pathlib.Path("outputs/pid").write_text(str(os.getpid()))
for epoch in range(int(sys.argv[1])):
    mlflow.log_metric("loss", 1 / (epoch + 1), step=epoch)
    time.sleep(0.2)
pathlib.Path("outputs/model").write_text("done")
"""


def wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def gone(pid: int) -> bool:
    """Exited, its last thread included (``wait_gone``'s test, not a zombie main thread's)."""
    try:
        return not wait_gone([psutil.Process(pid)], 0.0)
    except psutil.NoSuchProcess:
        return True


def running_job(jobs: LocalJobs, tmp_path: Path, name: str, epochs: int = 300) -> tuple[dict, int]:
    """A job whose trainer runs and has logged to MLflow; its status file and trainer's PID."""
    jobs.submit(name, CommandJobSpec(code=str(write_script(tmp_path / name, TRAINS)), command=f"python script.py {epochs}"))
    pid_file = jobs.workspace.job_dir(name) / "outputs" / "pid"
    wait_for(pid_file.exists)
    status = json.loads((jobs.workspace.job_dir(name) / "status.json").read_text())
    return status, int(pid_file.read_text())


def mlflow_status(jobs: LocalJobs, run_id: str) -> str:
    return tracking.client(jobs.workspace).get_run(run_id).info.status


def test_supervisor_killed_its_trainer_dies_too_and_the_next_read_says_so(jobs, tmp_path):
    status, trainer = running_job(jobs, tmp_path, "sup-kill")
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: gone(status["supervisor_pid"]), 5)
    killed_at = time.monotonic()
    info = jobs.get("sup-kill")  # the first read after the death
    assert info.status is JobStatus.FAILED
    assert f"supervisor (pid {status['supervisor_pid']}) died without recording an outcome" in info.error
    assert time.monotonic() - killed_at < 5  # reading never waits on a cleanup
    wait_for(lambda: gone(trainer), 5)  # the trainer died with its supervisor: nothing trains unsupervised
    assert marked(json.loads((jobs.workspace.job_dir("sup-kill") / "job.json").read_text())["token"]) == []
    assert mlflow_status(jobs, info.mlflow_run_id) == "FAILED"
    assert not (jobs.workspace.job_dir("sup-kill") / "outputs" / "model").exists()  # it never finished unsupervised


def test_supervisor_and_trainer_killed_together_end_the_mlflow_run_too(jobs, tmp_path):
    """What a reboot does: every process gone at once, the files left as they were."""
    status, trainer = running_job(jobs, tmp_path, "reboot")
    for pid in (trainer, status["supervisor_pid"]):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: gone(status["supervisor_pid"]) and gone(trainer), 5)
    info = LocalJobs(jobs.workspace).get("reboot")  # a new reader, as after the reboot
    assert info.status is JobStatus.FAILED and "died without recording an outcome" in info.error
    assert mlflow_status(jobs, info.mlflow_run_id) == "FAILED"
    attempt = submit_or_reattach(jobs, "reboot", lambda n: jobs.submit(n, jobs_spec(tmp_path, "reboot", epochs=2)))
    assert attempt.action is Action.RETRIED and attempt.job.name == "reboot-a2"
    assert jobs.wait("reboot-a2", timeout=60, poll_s=0.2).status is JobStatus.COMPLETED


def jobs_spec(tmp_path: Path, name: str, epochs: int) -> CommandJobSpec:
    return CommandJobSpec(code=str(tmp_path / name), command=f"python script.py {epochs}")


def test_a_reused_process_group_id_is_never_signalled(jobs, tmp_path):
    """After a reboot the stored process group id may lead another program's group: it must survive."""
    status, trainer = running_job(jobs, tmp_path, "reused")
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        for pid in (trainer, status["supervisor_pid"]):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: gone(status["supervisor_pid"]) and gone(trainer), 5)
        state_file = jobs.workspace.job_dir("reused") / "status.json"
        state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "pgid": stranger.pid}))
        assert jobs.get("reused").status is JobStatus.FAILED
        time.sleep(0.3)
        assert stranger.poll() is None  # the other program's group was not touched
    finally:
        stranger.kill()
        stranger.wait()


SUBMIT_THEN_DIE = """
import os, sys
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.workspace import Workspace
from mlrunway.specs import CommandJobSpec

jobs = LocalJobs(Workspace.at(sys.argv[1]))
# The fault: this process dies after the job's folder is in place, before its supervisor is recorded.
jobs._spawn_supervisor = lambda job_dir, token: os._exit(3)
jobs.submit("half", CommandJobSpec(code=sys.argv[2], command="python script.py 1"))
"""


def test_a_submit_that_died_halfway_is_failed_at_the_next_read_and_a_retry_submits_anew(jobs, tmp_path):
    code = write_script(tmp_path / "half", TRAINS)
    died = subprocess.run([sys.executable, "-c", SUBMIT_THEN_DIE, str(jobs.workspace.root), str(code)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert died.returncode == 3, died.stderr
    started = time.monotonic()
    info = jobs.get("half")
    assert info.status is JobStatus.FAILED and info.error.startswith("submit did not complete")
    assert jobs.cancel("half").status is JobStatus.FAILED and time.monotonic() - started < 5  # no 40 s wait
    attempt = submit_or_reattach(jobs, "half", lambda n: jobs.submit(n, jobs_spec(tmp_path, "half", epochs=1)))
    assert attempt.job.name == "half-a2"
    assert jobs.wait("half-a2", timeout=60, poll_s=0.2).status is JobStatus.COMPLETED


def test_a_trainer_killed_by_a_signal_is_reported_with_the_signal(jobs, tmp_path):
    _, trainer = running_job(jobs, tmp_path, "oom")
    os.kill(trainer, signal.SIGKILL)
    info = jobs.wait("oom", timeout=30, poll_s=0.1)
    assert info.status is JobStatus.FAILED and info.exit_code == -9
    assert info.error.startswith(f"trainer (pid {trainer}) killed by SIGKILL (out of memory?)")
    assert mlflow_status(jobs, info.mlflow_run_id) == "FAILED"


def test_an_export_killed_by_sigkill_is_named_by_its_role_and_its_hint_fits_an_export(jobs, tmp_path):
    """Issue 76: an export job's process read "trainer (pid N) killed by SIGKILL (out of memory?)"."""
    from mlrunway.specs.job import ROLE_TAG

    jobs.submit("export", CommandJobSpec(code=str(write_script(tmp_path / "export", TRAINS)),
                                         command="python script.py 300", tags={ROLE_TAG: "export"}))
    pid_file = jobs.workspace.job_dir("export") / "outputs" / "pid"
    wait_for(pid_file.exists)
    exporter = int(pid_file.read_text())
    os.kill(exporter, signal.SIGKILL)
    info = jobs.wait("export", timeout=30, poll_s=0.1)
    assert info.status is JobStatus.FAILED and info.exit_code == -9
    assert info.error.startswith(f"export (pid {exporter}) killed by SIGKILL (out of memory? an export holds the "
                                 "model and its ONNX graph at once)"), info.error


def test_an_unwritable_job_folder_still_reads_as_the_jobs_true_outcome(jobs, tmp_path):
    """Issue 27, 5: the supervisor cannot write status.json into an immutable folder; before, the job then read
    as "killed" (or a folder error). The outcome it recorded in place, in outcome.json, is what the next read
    reports."""
    status, trainer = running_job(jobs, tmp_path, "readonly")
    folder = jobs.workspace.job_dir("readonly")
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here (needs root and an ext4-like filesystem)")
    try:
        os.kill(trainer, signal.SIGKILL)  # the supervisor cannot write its status: its folder is immutable
        wait_for(lambda: gone(status["supervisor_pid"]), 15)
        info = jobs.get("readonly")
        assert info.status is JobStatus.FAILED and info.exit_code == -9
        assert info.error.startswith(f"trainer (pid {trainer}) killed by SIGKILL (out of memory?)"), info.error
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_a_corrupt_status_file_is_a_failed_status_with_its_cause(jobs, tmp_path):
    status, trainer = running_job(jobs, tmp_path, "corrupt", epochs=3)
    jobs.wait("corrupt", timeout=30, poll_s=0.2)
    (jobs.workspace.job_dir("corrupt") / "status.json").write_text('{"status": "Runn')
    info = jobs.get("corrupt")
    assert info.status is JobStatus.FAILED and "JSONDecodeError" in info.error


def test_every_process_of_a_job_carries_its_token(jobs, tmp_path):
    """What lets a reader find and stop a job's processes without trusting a stored PID or group id."""
    status, trainer = running_job(jobs, tmp_path, "tokens")
    token = json.loads((jobs.workspace.job_dir("tokens") / "job.json").read_text())["token"]
    assert psutil.Process(trainer).environ()[JOB_TOKEN_ENV] == token
    assert {p.pid for p in marked(token)} >= {trainer, status["supervisor_pid"]}
    jobs.cancel("tokens")


FINISHES_WHEN_TOLD = """
import pathlib, sys, time
pathlib.Path("outputs/model").write_text("done")
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.05)
"""


def test_a_full_disk_at_the_end_keeps_the_jobs_true_outcome(tmp_path):
    """Issue 27, 5: the supervisor knew the job Completed but could not write status.json (a full disk); it died,
    and the job read "killed: SIGKILL, the OOM killer or a reboot", MLflow FAILED. The outcome is now kept in a
    file reserved at the start and written in place, before anything that can fail."""
    from mlrunway.local.workspace import Workspace
    from tests.chaos.disk import fill, tmpfs

    go = tmp_path / "go"
    with tmpfs(tmp_path / "ws", "64m") as root:
        jobs = LocalJobs(Workspace.at(root), kill_grace_s=2.0)
        code = write_script(tmp_path / "code", FINISHES_WHEN_TOLD)
        jobs.submit("full", CommandJobSpec(code=str(code), command=f"python script.py {go}"))
        folder = jobs.workspace.job_dir("full")
        filler = None
        try:
            wait_for(lambda: (folder / "outputs" / "model").exists(), 60)
            supervisor = psutil.Process(json.loads((folder / "status.json").read_text())["supervisor_pid"])
            filler = fill(root)
            go.touch()
            supervisor.wait(30)
            info = jobs.get("full")  # the disk still full: the truth, written or not
            assert info.status is JobStatus.COMPLETED and info.error is None, info.error
            assert not [p.name for p in folder.iterdir() if p.name.startswith(".status.json.")]  # no temporary left
            # (Whether status.json could be written depends on what the failed writes freed meanwhile, MLflow's
            # rolled-back journal among them; the immutable-folder test makes it fail for certain.)
            filler.unlink()
            assert jobs.get("full").status is JobStatus.COMPLETED
            assert json.loads((folder / "status.json").read_text())["status"] == "Completed"  # recorded now
            assert (folder / "outputs" / "model").read_text() == "done"
            run = tracking.client(jobs.workspace).get_run(jobs.get("full").mlflow_run_id)
            assert run.info.status == "FINISHED"
        finally:  # whatever failed above, nothing of the job outlives the test
            go.touch()
            if filler is not None:
                filler.unlink(missing_ok=True)
            jobs.cancel("full")


ABORTS_WHEN_TOLD = """
import os, pathlib, sys, time
pathlib.Path("outputs/model").write_text("started")
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.05)
os.abort()  # as a trainer's native code dies on a full disk: SIGABRT, nothing on stderr
"""


def test_a_job_that_fails_on_a_full_disk_says_the_disk_was_full(tmp_path):
    """Issue 59, 3: a trainer that died while the workspace's filesystem was full read "killed by SIGABRT" with an
    empty stderr tail, naming no cause."""
    from mlrunway.local.workspace import Workspace
    from tests.chaos.disk import fill, tmpfs

    go = tmp_path / "go"
    with tmpfs(tmp_path / "ws", "64m") as root:
        jobs = LocalJobs(Workspace.at(root), kill_grace_s=2.0)
        jobs.submit("aborts", CommandJobSpec(code=str(write_script(tmp_path / "code", ABORTS_WHEN_TOLD)),
                                             command=f"python script.py {go}"))
        folder = jobs.workspace.job_dir("aborts")
        filler = None
        try:
            wait_for(lambda: (folder / "outputs" / "model").exists(), 60)
            filler = fill(root)
            go.touch()
            wait_for(lambda: jobs.get("aborts").status.is_terminal(), 60)
            info = jobs.get("aborts")
            assert info.status is JobStatus.FAILED and "killed by SIGABRT" in info.error, info.error
            assert f"the filesystem of {folder} was full at the job's end" in info.error, info.error
        finally:
            go.touch()
            if filler is not None:
                filler.unlink(missing_ok=True)
            jobs.cancel("aborts")


SAVES_WHEN_TOLD = """
import os, pathlib, sys, time
pathlib.Path("outputs/ready").write_text("ready")
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.05)
try:
    pathlib.Path(sys.argv[2], "model.pt").write_bytes(b"x" * 2**20)
except OSError:
    os.abort()  # as torch.save dies on a full disk: SIGABRT in native code, or "unexpected pos", naming no cause
"""


@pytest.mark.parametrize(("exhaust", "how"), [("full_disk", "no space left"), ("no_inodes", "no inode left")],
                         ids=["full", "no-inode"])
def test_a_model_saved_onto_another_full_filesystem_names_that_filesystem(tmp_path, exhaust, how):
    """Issue 76: only the job folder's filesystem was checked, so a model whose output folder is another, full
    filesystem failed "killed by SIGABRT" naming no cause."""
    from mlrunway.local.workspace import Workspace
    from mlrunway.specs import Output
    from tests.chaos import disk
    from tests.chaos.disk import tmpfs

    go = tmp_path / "go"
    with tmpfs(tmp_path / "ws", "64m") as root:
        jobs = LocalJobs(Workspace.at(root), kill_grace_s=2.0)
        jobs.submit("saves", CommandJobSpec(code=str(write_script(tmp_path / "code", SAVES_WHEN_TOLD)),
                                            command=f"python script.py {go} ${{{{outputs.model}}}}",
                                            outputs={"model": Output()}))
        folder = jobs.workspace.job_dir("saves")
        model = folder / "outputs" / "model"
        try:
            wait_for(lambda: (folder / "outputs" / "ready").exists(), 60)
            with getattr(disk, exhaust)(model):  # a second tmpfs, mounted on the model's folder
                go.touch()
                wait_for(lambda: jobs.get("saves").status.is_terminal(), 60)
            info = jobs.get("saves")
            assert info.status is JobStatus.FAILED and "killed by SIGABRT" in info.error, info.error
            assert f"the filesystem of {model} was full at the job's end: {how}, " in info.error, info.error
            assert f"the filesystem of {folder} was full" not in info.error  # the job folder's has room
            assert "free space there and run it again" in info.error
        finally:
            go.touch()
            jobs.cancel("saves")


def test_a_submit_that_finds_no_inode_leaves_no_staging_folder(tmp_path):
    """Issue 59, 3: inode exhaustion left a jobs/.<name>.* staging folder behind."""
    import errno

    from mlrunway.local.workspace import Workspace
    from tests.chaos.disk import tmpfs

    with tmpfs(tmp_path / "ws", "64m,nr_inodes=200") as root:
        jobs = LocalJobs(Workspace.at(root), kill_grace_s=2.0)
        jobs.workspace.jobs.mkdir(parents=True, exist_ok=True)
        taken = []
        with pytest.raises(OSError) as full:
            while True:  # every inode but none
                taken.append(root / f"inode-{len(taken)}")
                taken[-1].touch()
        assert full.value.errno == errno.ENOSPC
        taken.pop().unlink(missing_ok=True)  # one free: the staging folder is made, nothing inside it
        with pytest.raises(OSError):
            jobs.submit("no-inode", CommandJobSpec(code=str(write_script(tmp_path / "code", "print(1)\n")),
                                                   command="python script.py"))
        assert [p.name for p in jobs.workspace.jobs.iterdir()] == []


def test_write_json_on_a_full_disk_names_the_path_and_leaves_no_temporary_file(tmp_path):
    from mlrunway.local.files import write_json
    from tests.chaos.disk import full_disk

    with full_disk(tmp_path / "full") as filler:
        target = filler.parent / "status.json"
        with pytest.raises(OSError, match="could not write .*status.json: No space left on device"):
            write_json(target, {"big": "x" * 100_000})
        assert sorted(p.name for p in filler.parent.iterdir()) == ["filler"]


def test_cancel_of_a_job_whose_supervisor_is_frozen_returns_within_a_bound_and_says_why(jobs, tmp_path):
    """Issue 27, 9: a frozen (SIGSTOP) supervisor blocked cancel for the whole freeze. Now cancel waits for the
    supervisor to see the request, and when it does not within CANCEL_ANSWER_S, kills the job's processes."""
    from mlrunway.local.jobs import CANCEL_ANSWER_S

    status, trainer = running_job(jobs, tmp_path, "frozen")
    token = json.loads((jobs.workspace.job_dir("frozen") / "job.json").read_text())["token"]
    os.kill(status["supervisor_pid"], signal.SIGSTOP)
    try:
        started = time.monotonic()
        info = jobs.cancel("frozen", reason="stop it")
        took = time.monotonic() - started
        assert info.status is JobStatus.CANCELED and "stop it" in info.error and "did not answer" in info.error
        assert CANCEL_ANSWER_S <= took < CANCEL_ANSWER_S + 5, took
        wait_for(lambda: gone(trainer) and gone(status["supervisor_pid"]), 5)
        assert marked(token) == []
        assert mlflow_status(jobs, info.mlflow_run_id) == "KILLED"  # issue 59, 2: it stayed RUNNING forever
    finally:  # whatever failed above, no stopped process outlives the test
        for proc in marked(token):
            proc.kill()


def test_cancel_of_a_job_whose_supervisor_answers_is_graceful(jobs, tmp_path):
    status, _ = running_job(jobs, tmp_path, "calm")
    info = jobs.cancel("calm", reason="stop it")
    assert info.status is JobStatus.CANCELED and info.error == "stop it"  # SIGTERM through the supervisor
