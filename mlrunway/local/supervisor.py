"""The detached process that runs one local job: ``python -S -c <run main> <job_dir>`` (:func:`command`), or, for a
sweep's trials, a fork of a server that has already imported this module (:func:`serve`).

It owns the job's state file from launch to end: creates the MLflow run, starts the job's processes in a
process group of their own, enforces the timeout, honours cancel requests (SIGTERM to the group, SIGKILL
after a grace period) and records the outcome with the exit code, or the signal that killed the job, and the
tail of stderr.

Its processes cannot outlive it unsupervised: each dies with it (PR_SET_PDEATHSIG), and every process of the
job, torchrun's workers and mpirun's ranks included, carries the job's token, by which a reader that finds the
supervisor dead stops what is left (:meth:`mlrunway.local.jobs.LocalJobs.get`), and by which the supervisor stops
the ranks of an MPI job, each in a process group of its own, that outlive mpirun.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mlrunway.local import formats, tracking
from mlrunway.local.files import full_filesystem, write_json
from mlrunway.local.processes import (
    CANCEL_LOOK_S,
    JOB_TOKEN_ENV,
    NUDGE,
    POLL_S,
    Identity,
    ProcessLaunch,
    die_with_parent,
    kill_marked,
    signal_name,
    stat_fields,
    terminate_group,
)
from mlrunway.local.records import DamagedRecord, read
from mlrunway.local.workspace import Workspace
from mlrunway.locks import locked

STDERR_TAIL_LINES = 20
OUTCOME_BYTES = 4096  # reserved when the job starts, so its outcome can be written with the disk full
# JobStatus's terminal values (a test holds them equal): this process starts before every job's script, and
# imports neither the specs nor the backend's types (about 40 ms of a 60 ms start) unless the job is distributed.
TERMINAL = frozenset({"Completed", "Failed", "Canceled"})
_ENTRY = "import sys; sys.path[:0] = path = {path!r}; import mlrunway.local.supervisor as supervisor; supervisor.{call}"
ROLE_TAG = "mlrunway.role"  # mlrunway.specs.job.ROLE_TAG, not imported here either (a test holds them equal)
# What a failed job's error calls its process, by the job's role (:func:`_role`; a team's job's is its "trainer"), and
# what a SIGKILL of it most likely was where "out of memory?" says too little.
_PROCESSES = {"sweep": "sweep controller", "export": "export", "reference": "reference job"}
_SIGKILL_HINTS = {"export": "out of memory? an export holds the model and its ONNX graph at once"}


class JobState:
    """The job folder's files: job.json (what to run), status.json (what happened), logs and outputs."""

    def __init__(self, job_dir: Path) -> None:
        self.dir = job_dir
        self.fix = f"restore it or delete {job_dir}"
        self.last: dict[str, Any] = {}  # the status this object last read or wrote whole

    @property
    def status_file(self) -> Path:
        return self.dir / "status.json"

    @property
    def cancel_file(self) -> Path:
        return self.dir / "cancel_requested.json"

    @property
    def cancel_seen_file(self) -> Path:
        return self.dir / "cancel_seen"

    @property
    def outcome_file(self) -> Path:
        return self.dir / "outcome.json"

    def job(self) -> dict[str, Any]:
        """What to run (:class:`~mlrunway.local.records.DamagedRecord` when it cannot be used)."""
        return read(self.dir / "job.json", self.fix)

    def reserve_outcome(self) -> None:
        """Allocate the outcome's file now, while there is room: written later in place, it needs no new block,
        so a job's outcome is kept even when status.json can no longer be written (a full disk)."""
        self.outcome_file.write_bytes(b" " * OUTCOME_BYTES)

    def record_outcome(self, outcome: dict[str, Any]) -> None:
        """Write ``outcome`` over the reserved file, in place (one write within its allocated bytes)."""
        outcome = formats.stamped(outcome)
        data = json.dumps(outcome).encode()
        error = outcome.get("error") or ""
        while len(data) > OUTCOME_BYTES and error:  # a long stderr tail: the status keeps it whole, this its end
            error = error[len(data) - OUTCOME_BYTES + 16:]
            data = json.dumps({**outcome, "error": "..." + error}).encode()
        fd = os.open(self.outcome_file, os.O_WRONLY)
        try:
            os.pwrite(fd, data.ljust(OUTCOME_BYTES), 0)
        finally:
            os.close(fd)

    def outcome(self) -> dict[str, Any] | None:
        """The outcome the supervisor recorded before it exited, if it did (None: it died before knowing one);
        :class:`~mlrunway.local.records.DamagedRecord` for a file that holds something else."""
        try:
            if not self.outcome_file.read_bytes().strip():
                return None
        except OSError:  # none reserved (an older job)
            return None
        return read(self.outcome_file, "the job's outcome is lost: its end is recorded as Failed")

    def status(self) -> dict[str, Any]:
        """What happened so far (:class:`~mlrunway.local.records.DamagedRecord` when it cannot be used)."""
        self.last = read(self.status_file, self.fix)
        return self.last

    def known(self) -> dict[str, Any]:
        """The status to write over: as read, or, when the file is damaged, as this object last knew it whole (a
        supervisor's, so the outcome it writes wins over a file it cannot read)."""
        try:
            return self.status()
        except DamagedRecord as exc:
            _log().warning("%s; it is written anew over what this process last knew", exc)
            return dict(self.last)

    def update(self, **fields: Any) -> dict[str, Any]:
        with locked(self.dir / ".status.lock"):
            merged = {**self.known(), **fields}
            write_json(self.status_file, merged)
        self.last = merged
        return merged

    def update_unless_ended(self, **fields: Any) -> bool:
        """Write ``fields`` unless the job has already ended (a reader reconciled it); say whether it did."""
        with locked(self.dir / ".status.lock"):
            current = self.known()
            if current.get("status") in TERMINAL:
                return False
            write_json(self.status_file, {**current, **fields})
        self.last = {**current, **fields}
        return True

    def cancel_reason(self) -> str | None:
        if not self.cancel_file.exists():
            return None
        try:
            return str(read(self.cancel_file, "the cancel stands").get("reason", "canceled"))
        except DamagedRecord as exc:  # asked for all the same: its reason is what cannot be read
            return f"canceled ({exc})"

    def written(self) -> list[Path]:
        """Where the job writes: its folder, its outputs and each folder in them (a named output's; a model's folder
        may be another filesystem, mounted there or linked)."""
        outputs = self.dir / "outputs"
        try:
            return [self.dir, outputs, *sorted(p for p in outputs.iterdir() if p.is_dir())]
        except OSError:
            return [self.dir]

    def stderr_tail(self) -> str:
        path = self.dir / "logs" / "stderr.log"
        if not path.exists():
            return ""
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 16384))
            lines = handle.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-STDERR_TAIL_LINES:])


def _start(launches: list[ProcessLaunch], cwd: Path, logs: Path) -> list[subprocess.Popen[bytes]]:
    """Start every process in one new process group, the first one leading it."""
    procs: list[subprocess.Popen[bytes]] = []
    with open(logs / "stdout.log", "ab") as out, open(logs / "stderr.log", "ab") as err:
        for launch in launches:
            # A group of their own (led by the first), inside the supervisor's session: killpg stops them all.
            group = procs[0].pid if procs else 0
            procs.append(
                subprocess.Popen(die_with_parent(launch.argv), cwd=cwd, env=launch.env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=err, process_group=group)
            )
    return procs


@contextlib.contextmanager
def _exits(procs: list[subprocess.Popen[bytes]], look_s: float) -> Iterator[Callable[[list[subprocess.Popen[bytes]], float | None], None]]:
    """``wait_any(running, left)``: sleep until one of ``running`` exits, a signal arrives (SIGTERM, or NUDGE: a
    cancel request was written), ``left`` seconds pass (the job's timeout), or it is time for another look at the
    cancel request. On a pidfd per process (Linux 5.3+), a sleep the kernel ends, with a look every ``look_s``;
    where there is none, ``Popen.wait``'s own polling (every 50 ms) and a look every POLL_S."""
    fds: dict[int, int] = {}
    try:
        for proc in procs:
            fds[proc.pid] = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here, or a process already reaped (it then polls as exited)
        for fd in fds.values():
            os.close(fd)
        fds.clear()
    woken, waker = os.pipe()
    os.set_blocking(woken, False)
    os.set_blocking(waker, False)
    previous = signal.set_wakeup_fd(waker, warn_on_full_buffer=False)

    def wait_any(running: list[subprocess.Popen[bytes]], left: float | None) -> None:
        look = look_s if fds else POLL_S
        seconds = look if left is None else max(0.0, min(look, left))
        if fds:
            ready, _, _ = select.select([woken, *(fds[p.pid] for p in running)], [], [], seconds)
            if woken in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(woken, 512)
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            running[0].wait(timeout=seconds)

    try:
        yield wait_any
    finally:
        signal.set_wakeup_fd(previous)
        for fd in [*fds.values(), woken, waker]:
            os.close(fd)


def _wait(state: JobState, procs: list[subprocess.Popen[bytes]], timeout: float | None,
          grace_s: float, interrupted: list[str], role: str | None, look_s: float) -> tuple[str, str | None, bool]:
    """Wait for the processes; return (status, reason, timed_out)."""
    started = time.monotonic()
    pgid = procs[0].pid
    with _exits(procs, look_s) as wait_any:
        while running := [p for p in procs if p.poll() is None]:
            reason = interrupted[0] if interrupted else state.cancel_reason()
            if reason is not None:
                with contextlib.suppress(OSError):  # the canceller waits for this, not for the whole grace period
                    state.cancel_seen_file.touch()
                terminate_group(pgid, procs, grace_s)
                return "Canceled", reason, False
            left = None if timeout is None else started + timeout - time.monotonic()
            if left is not None and left < 0:
                terminate_group(pgid, procs, grace_s)
                return "Canceled", f"timed out after {timeout:g} s (timeout)", True
            wait_any(running, left)
    terminate_group(pgid, procs, 0)  # reap strays the job left behind in its group
    failed = next((p for p in procs if p.returncode), None)
    if failed is None:
        return "Completed", None, False
    killed_by = signal_name(failed.returncode)
    if killed_by is None:
        return "Failed", f"exit code {failed.returncode}", False
    return "Failed", _killed(role, failed.pid, killed_by), False


def _role(job: dict[str, Any]) -> str | None:
    """What the job is to mlrunway ("sweep", "export", "reference"; None: a team's own job), which names its
    process in its error."""
    return "sweep" if job["kind"] == "sweep" else (job["spec"].get("tags") or {}).get(ROLE_TAG)


def _killed(role: str | None, pid: int, killed_by: str) -> str:
    """"<process> (pid N) killed by <signal>", the process named by its job's role, and a SIGKILL by what it most
    likely was: an export, which takes more memory than the training it follows, says why."""
    hint = f" ({_SIGKILL_HINTS.get(role or '', 'out of memory?')})" if killed_by == "SIGKILL" else ""
    return f"{_PROCESSES.get(role or '', 'trainer')} (pid {pid}) killed by {killed_by}{hint}"


def _plan(spec: dict[str, Any], argv: list[str], env: dict[str, str]) -> tuple[list[ProcessLaunch], int]:
    """The job's processes: its command, as is, unless it is distributed (:func:`mlrunway.local.launch.plan`); and
    how many of them run its code, what its cost counts (:func:`mlrunway.specs.command.process_count`)."""
    if spec.get("distribution") is None:
        return [ProcessLaunch(argv, env)], 1
    from mlrunway.local.launch import plan
    from mlrunway.specs.command import process_count
    from mlrunway.specs.job import CommandJobSpec

    distributed = CommandJobSpec.from_dict(spec)
    return plan(distributed, argv, env), process_count(distributed)


def _cpu_seconds() -> float:
    """CPU time (user and system) of this process's children that have ended, and of the children they waited
    for: the job's processes, once it has ended (a supervisor runs one job)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(usage.ru_utime + usage.ru_stime, 3)


def run(job_dir: Path) -> str:
    state = JobState(job_dir)
    job = state.job()
    workspace = Workspace(Path(job["workspace"]))
    interrupted: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: interrupted.append("supervisor received SIGTERM"))
    signal.signal(NUDGE, lambda *_: None)  # a canceller's: it only wakes the wait (set before the PID is recorded)
    me = Identity.of(os.getpid())
    # cancel_signal: a canceller may wake this process with it (a supervisor of 0.2.0 records none: SIGUSR1 kills it)
    if not state.update_unless_ended(supervisor_pid=me.pid, supervisor_started=me.started, cancel_signal=NUDGE.name):
        return state.status()["status"]  # a reader found the submit incomplete and failed the job: run nothing
    state.reserve_outcome()
    spec = job["spec"]  # as CommandJobSpec.to_dict wrote it at submit
    if (resumed := state.known().get("mlflow_run_id")) is not None:  # recovered: the job's run goes on
        experiment_id, run_id = tracking.resume_run(workspace, resumed)
    elif job.get("mlflow_run"):  # created by the submitter (a sweep's controller): no MLflow import on this path
        experiment_id, run_id = job["mlflow_run"]
    else:
        experiment_id, run_id = tracking.start_run(workspace, job["name"], spec["experiment_name"],
                                                   job.get("parent_run_id"))
    env = {
        **os.environ,
        **spec["environment_variables"],
        "MLFLOW_TRACKING_URI": workspace.tracking_uri,
        "MLFLOW_RUN_ID": run_id,
        "MLFLOW_EXPERIMENT_ID": experiment_id,
        "AZUREML_RUN_ID": job["name"],
        "MLRUNWAY_WORKSPACE": str(workspace.root),
        "PYTHONUNBUFFERED": "1",
        JOB_TOKEN_ENV: job["token"],
    }
    launches, processes = _plan(spec, job["argv"], env)
    procs = _start(launches, job_dir / "code", job_dir / "logs")
    leader = Identity.of(procs[0].pid)
    # A recovered sweep keeps its first start: its duration is the sweep's, outages included.
    state.update(status="Running", started=state.known().get("started") or time.time(), mlflow_run_id=run_id,
                 pgid=leader.pid, pgid_started=leader.started, usage={"processes": processes})
    status, reason, timed_out = _wait(state, procs, spec["timeout"], job.get("kill_grace_s", 10.0), interrupted,
                                      _role(job),
                                      job.get("cancel_look_s", CANCEL_LOOK_S))
    if (spec.get("distribution") or {}).get("type") == "mpi":
        # mpirun starts each rank in a process group of its own, which the group's end reaches only through mpirun;
        # an mpirun killed by a signal (SIGKILL, a crash) leaves them running. They carry the token.
        kill_marked(job["token"], sparing=me.pid)
    killed = any((p.returncode or 0) < 0 for p in procs) and status == "Failed"  # by a signal: recover may resume a sweep
    exit_code = next((p.returncode for p in procs if p.returncode), 0)  # -9: killed by SIGKILL
    error = None
    if status == "Failed":
        tail = state.stderr_tail()
        error = f"{reason}{full_filesystem(state.written(), tail)}; stderr tail:\n{tail}"
    elif status == "Canceled":
        error = reason
    outcome = {"status": status, "ended": time.time(), "exit_code": exit_code, "error": error, "timed_out": timed_out,
               "killed": killed, "usage": {"processes": processes, "cpu_seconds": _cpu_seconds()}}
    state.record_outcome(outcome)  # first: what is known now survives whatever fails below
    try:
        state.update(**outcome, run_open=True)  # readers see the end now (a sweep refills the slot)
    except OSError as exc:  # the outcome stays in outcome.json; the next read records it from there
        _log().error("the job's outcome (%s) could not be written to its status: %s; it is kept in %s", status, exc,
                     state.outcome_file)
    try:
        tracking.end_run_quickly(workspace, run_id, status)
        state.update(run_open=False)
    except Exception as exc:  # noqa: BLE001 - the store (a full disk): a reader ends the run when it can
        _log().warning("the job's MLflow run %s could not be ended %s: %s", run_id, status, exc)
    return status


def _log() -> Any:
    import logging

    return logging.getLogger(__name__)


def main(job_dir: Path | None = None) -> None:
    job_dir = Path(sys.argv[1]) if job_dir is None else job_dir
    try:
        run(job_dir)
    except Exception as exc:  # noqa: BLE001 - anything that breaks here must reach the job's status
        JobState(job_dir).update(status="Failed", ended=time.time(), error=f"supervisor: {type(exc).__name__}: {exc}")
        raise


# -- the fork server: a sweep's trials' supervisors, forked from one process that has imported this module ----------

def command(path: list[str], last: str, *, serve: bool = False) -> list[str]:
    """``python -S -c <import this module on path, call main or serve> <last>``: a supervisor started without
    ``site`` (-S: no .pth files, no editable install's finder, a fifth of its start) on ``path``."""
    call = "serve(path)" if serve else "main()"
    return [sys.executable, "-S", "-c", _ENTRY.format(path=path, call=call), last]


def serve(path: list[str]) -> None:
    """Fork a supervisor for each request read from stdin (``<job_dir> TAB <token>``, one a line) and answer each
    with its PID and start time (``<pid> <started>``); exit at the end of stdin.

    A sweep's controller starts one (:class:`mlrunway.local.jobs.SupervisorForks`): a trial's supervisor is then a
    fork of a process that has already started and imported this module, where a fresh one spends about 30 ms of
    CPU on both, in front of every trial, beside the scripts of the trials already running. This process holds
    nothing a child must not inherit: no thread, no database, no file but its pipes and stderr. It has the
    controller's environment, the sweep's job token included, and dies with the controller (PR_SET_PDEATHSIG); each
    child writes its own job's token over the sweep's (:func:`_mark`), so a trial's processes are found by its token
    as any job's are, and stopping what is left of a dead sweep never stops its trials."""
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 1.0)
        _reap()
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            job_dir, token = line.decode().split("\t")
            pid = os.fork()
            if pid == 0:
                _forked(Path(job_dir), token, path)  # never returns
            started = Identity.of(pid).started  # not reaped before this: _reap runs between requests only
            os.write(1, f"{pid} {started!r}\n".encode())


def _reap() -> None:
    """Collect the server's children that have exited (they recorded their job's end before)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _forked(job_dir: Path, token: str, path: list[str]) -> None:
    """The child: a session of its own, stdin from /dev/null, stdout and stderr to the job's supervisor.log (as a
    fresh supervisor is started), marked with its job's token; then :func:`main`, and exit."""
    code = 1
    try:
        os.setsid()
        log = os.open(job_dir / "logs" / "supervisor.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 65536)  # the server's pipes and whatever else it held
        os.chdir(job_dir)
        os.environ[JOB_TOKEN_ENV] = token
        if not _mark(token):  # not rewritable in place: this child becomes a fresh supervisor, token in its env
            os.execv(sys.executable, command(path, str(job_dir)))
        main(job_dir)
        code = 0
    except BaseException:  # noqa: BLE001 - whatever it was, the log gets it and the process exits here
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _mark(token: str) -> bool:
    """Write ``token`` over the job token in this process's original environment block, which is what
    ``/proc/<pid>/environ`` shows and :func:`mlrunway.local.processes.marked` reads: a forked child shows its
    parent's until it does. Tokens are all 32 hex digits; False where the block has none of that length (then
    nothing is written), or this is not Linux."""
    import ctypes

    try:
        env_start = int(stat_fields("self")[50 - 3])  # field 50: env_start
        with open("/proc/self/environ", "rb") as environ:
            block = environ.read()
    except (OSError, IndexError, ValueError):
        return False
    key, new = f"{JOB_TOKEN_ENV}=".encode(), token.encode()
    at = 0 if block.startswith(key) else block.find(b"\0" + key) + 1
    if (at == 0 and not block.startswith(key)) or len(block[at:].split(b"\0")[0]) != len(key) + len(new):
        return False  # no such variable, or a value of another length
    address = env_start + at + len(key)
    if ctypes.string_at(address, len(new)) != block[at + len(key):at + len(key) + len(new)]:
        return False  # the block is not where /proc/self/stat says: write nothing
    ctypes.memmove(address, new, len(new))
    return True


if __name__ == "__main__":
    main()
