"""Named local jobs: submit, get, list, cancel, logs, wait. State lives on disk under the workspace.

A job folder is built aside and renamed into place, so a name is taken exactly once: submitting again under
an existing name returns that job. The job runs under a detached supervisor (its own session), so it outlives
the process that submitted it and is found again by name.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import logging
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.protocol import Jobs
from mlrunway.backend.snapshot import check_size, copy_snapshot, snapshot_files
from mlrunway.backend.types import JobInfo, JobStatus, SweepResult, Usage
from mlrunway.errors import MlrunwayError, NotFound, SpecError
from mlrunway.local.files import stamp, write_json
from mlrunway.local.launch import check_runnable
from mlrunway.local.processes import CANCEL_LOOK_S, JOB_TOKEN_ENV, Identity, die_with_parent, kill_marked, marked
from mlrunway.local.reconcile import SUBMIT_LOCK, close_run, reconcile
from mlrunway.local.records import DamagedRecord, read
from mlrunway.local.supervisor import JobState
from mlrunway.local.supervisor import command as supervisor_command
from mlrunway.local.workspace import Workspace
from mlrunway.specs.command import process_count, resolve_command
from mlrunway.specs.job import CommandJobSpec, Input
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep import record

log = logging.getLogger(__name__)
SWEEP_TIMEOUT_MARGIN_S = 120.0
# A supervisor sees a cancel at once (woken by a signal) or within CANCEL_LOOK_S; one that has not within this is
# stopped or frozen.
CANCEL_ANSWER_S = 10.0
TOKEN_FILE = "token"  # a copy of job.json's token
WAIT_WATCH_S = 0.02
SUPERVISOR_EXIT_S = 5.0


def supervisor_argv(job_dir: Path, *, serve: bool = False) -> list[str]:
    """``python -S -c <start the supervisor> <job_dir>`` (:func:`mlrunway.local.supervisor.command`), on the import
    path this process has (its first entry, the script's own folder, left out, as ``python -m`` would) and with
    mlrunway's folder first; with ``serve``, a fork server of supervisors (the folder only names it)."""
    import mlrunway

    path = [str(Path(mlrunway.__file__).resolve().parent.parent), *(p for p in sys.path[1:] if os.path.isabs(p))]
    return supervisor_command(path, str(job_dir), serve=serve)


class SupervisorForks:
    """The client of a fork server of supervisors (:func:`mlrunway.local.supervisor.serve`), started on the first
    request: a sweep's controller has each trial's supervisor forked from it instead of started afresh (about 30 ms
    of CPU less a trial, beside the running trials' scripts). The server dies with this process.

    :meth:`spawn` answers the new supervisor's identity, or None where the server cannot be asked (it could not
    start, or died before the request was written: the caller starts a fresh supervisor). A server that took the
    request and then gave no answer within ANSWER_S is killed and the request is failed (``OSError``): it may have
    forked a supervisor already, which then runs the job, so another one must not be started."""

    ANSWER_S = 30.0

    def __init__(self, folder: Path) -> None:
        self.folder = folder  # named on the server's command line, as the workspace's processes are
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server now, so that it has started by the first request (else :meth:`spawn` starts it)."""
        with contextlib.suppress(OSError):
            self._server()

    def spawn(self, job_dir: Path, token: str) -> Identity | None:
        if "\t" in str(job_dir) or "\n" in str(job_dir):
            return None
        try:
            proc = self._server()
            assert proc.stdin is not None
            proc.stdin.write(f"{job_dir}\t{token}\n".encode())
            proc.stdin.flush()
        except OSError:  # it died before the request was written: nothing was forked
            self.close(kill=True)
            return None
        try:
            pid, started = self._answer(proc)
        except (OSError, ValueError) as exc:
            self.close(kill=True)
            raise OSError(f"the supervisor fork server gave no answer for {job_dir.name}: {exc}") from exc
        return Identity(pid, started)

    def _server(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            # With this process's environment, its job's token (the sweep's) included: the server is the sweep's,
            # and each fork writes its own job's token over it.
            self.proc = subprocess.Popen(die_with_parent(supervisor_argv(self.folder, serve=True)),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return self.proc

    def _answer(self, proc: subprocess.Popen[bytes]) -> tuple[int, float]:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], self.ANSWER_S)
        line = os.read(fd, 256) if ready else b""  # one answer a request: nothing else is in the pipe
        if not line.endswith(b"\n"):
            raise OSError("no answer" if not ready else f"answered {line!r}")
        pid, started = line.split()
        return int(pid), float(started)

    def close(self, *, kill: bool = False) -> None:
        """End the server (its end of stdin), or kill it if it does not end within 2 s, or at once with ``kill`` (a
        server that failed a request); its forks run on."""
        if (proc := self.proc) is None:
            return
        self.proc = None
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=0 if kill else 2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


class LocalJobs(Jobs):
    """The local job service; ``kill_grace_s`` is how long SIGTERM gets before SIGKILL."""

    def __init__(self, workspace: Workspace, *, kill_grace_s: float = 10.0) -> None:
        self.workspace = workspace
        self.kill_grace_s = kill_grace_s
        self.forks: SupervisorForks | None = None  # a sweep's controller starts its trials' supervisors by fork

    # -- submit -----------------------------------------------------------------------------------
    def validate(self, spec: CommandJobSpec) -> None:
        """What ``submit`` would refuse, before any job: a distribution or node count this machine cannot run,
        a missing code folder or one whose snapshot is over the size limit, a missing input path."""
        check_runnable(spec)
        code = _existing_folder("command_job.code", spec.code)
        check_size("command_job.code", code, snapshot_files(code, exclude=[self.workspace.root]))
        _absolute_inputs(spec)

    def submit(self, name: str, spec: CommandJobSpec, *, parent_run_id: str | None = None,
               mlflow_run: tuple[str, str] | None = None) -> JobInfo:
        """Start ``spec`` as job ``name``, or return the job already under that name. ``mlflow_run``, the
        (experiment id, run id) of a run created for it beforehand (a sweep's trial: its controller has MLflow
        loaded), spares the supervisor importing MLflow before the script starts."""
        check.job_name("job.name", name)
        if (existing := self._find(name)) is not None:
            return existing
        check_runnable(spec)
        code = _existing_folder("command_job.code", spec.code)
        spec = replace(spec, code=str(code), inputs=_absolute_inputs(spec))
        return self._create(name, "command", spec, {"parent_run_id": parent_run_id, "mlflow_run": mlflow_run}, code)

    def submit_sweep(self, name: str, sweep: SweepSpec, *, poll_s: float = 1.0) -> JobInfo:
        """Start a sweep: a parent job whose controller process runs and judges the trials every ``poll_s``."""
        check.job_name("sweep.name", name)
        if (existing := self._find(name)) is not None:
            return existing
        check_runnable(sweep.trial)
        code = _existing_folder("sweep.trial.code", sweep.trial.code)
        sweep = replace(sweep, trial=replace(sweep.trial, code=str(code), inputs=_absolute_inputs(sweep.trial)))
        # The controller ends the sweep at limits.timeout itself (Completed, best so far kept); the supervisor's
        # limit is only a safety net behind it.
        net = sweep.limits.timeout + SWEEP_TIMEOUT_MARGIN_S if sweep.limits.timeout else None
        controller = CommandJobSpec(
            code=str(code), command="python -m mlrunway.local.sweep_controller", experiment_name=sweep.trial.experiment_name,
            timeout=net,
        )
        return self._create(name, "sweep", controller, {"sweep": sweep.to_dict(), "poll_s": poll_s}, None)

    def _create(self, name: str, kind: str, spec: CommandJobSpec, extra: dict[str, Any], code: Path | None) -> JobInfo:
        """Build the job folder aside, rename it into place, start its supervisor. The submit lock, held from
        before the rename until the supervisor is recorded, tells a reader that the submit is under way; a reader
        that finds it free and no supervisor fails the job (:mod:`mlrunway.local.reconcile`)."""
        self.workspace.jobs.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=self.workspace.jobs, prefix=f".{name}."))
        try:
            with open(staging / SUBMIT_LOCK, "w") as submit_lock:
                fcntl.flock(submit_lock, fcntl.LOCK_EX)
                return self._create_locked(name, kind, spec, extra, code, staging)
        finally:  # renamed into place, or not: nothing of it stays (a full disk or no inode left it behind)
            shutil.rmtree(staging, ignore_errors=True)

    def _create_locked(self, name: str, kind: str, spec: CommandJobSpec, extra: dict[str, Any], code: Path | None,
                       staging: Path) -> JobInfo:
        final = self.workspace.job_dir(name)
        for sub in ("logs", "outputs"):
            (staging / sub).mkdir()
        if code is not None:  # never the workspace itself, when the code folder holds it
            copy_snapshot("command_job.code", code, staging / "code", exclude=[self.workspace.root])
        else:
            (staging / "code").mkdir()
        (staging / "code" / "outputs").symlink_to("../outputs")
        outputs = {out: final / "outputs" / out for out in spec.outputs}
        argv = resolve_command(spec.command, spec.inputs, outputs)
        if kind == "sweep":
            argv.append(str(final))
        job = {"name": name, "kind": kind, "workspace": str(self.workspace.root), "spec": spec.to_dict(),
               "argv": argv, "kill_grace_s": self.kill_grace_s, "cancel_look_s": CANCEL_LOOK_S,
               "token": secrets.token_hex(16), **extra}
        write_json(staging / "job.json", job)
        # A copy of the token in a file of its own: a cancel finds the job's processes by it even when job.json is
        # damaged (a trial's supervisor, forked from the fork server, has no command line that names its job).
        token_copy = staging / TOKEN_FILE
        token_copy.write_text(job["token"])
        token_copy.chmod(0o600)
        write_json(staging / "status.json", {"status": "Queued", "created": time.time()})
        try:
            staging.rename(final)
        except OSError:  # another submitter took the name first
            shutil.rmtree(staging, ignore_errors=True)
            return self.get(name)
        for out in outputs.values():
            out.mkdir(parents=True, exist_ok=True)
        self._spawn_supervisor(final, job["token"])
        return self.get(name)

    def _spawn_supervisor(self, job_dir: Path, token: str) -> None:
        supervisor = None
        if self.forks is not None:
            try:
                supervisor = self.forks.spawn(job_dir, token)
            except OSError as exc:  # it took the request and did not answer; it was killed
                kill_marked(token)  # a supervisor it had forked, by then marked with the job's token
                JobState(job_dir).update_unless_ended(status="Failed", ended=time.time(),
                                                      error=f"its supervisor could not be started: {exc}")
                return
        if supervisor is None:
            with open(job_dir / "logs" / "supervisor.log", "ab") as log:
                proc = subprocess.Popen(
                    supervisor_argv(job_dir), env={**os.environ, JOB_TOKEN_ENV: token},
                    cwd=job_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                )
            supervisor = Identity.of(proc.pid)
        JobState(job_dir).update_unless_ended(supervisor_pid=supervisor.pid, supervisor_started=supervisor.started)

    # -- read -------------------------------------------------------------------------------------
    def get(self, name: str) -> JobInfo:
        info = self._find(name)
        if info is None:
            raise NotFound(f"job {name!r} does not exist in workspace {self.workspace.root}")
        return info

    # -- usage (Metered) ---------------------------------------------------------------------------
    def usage(self, name: str) -> Usage | None:
        """Its wall time, processes and CPU time, as its supervisor recorded them (:mod:`mlrunway.ledger.cost`)."""
        state = JobState(self.workspace.job_dir(name))
        try:
            return _usage(state.status()) if state.status_file.exists() else None
        except (DamagedRecord, OSError, ValueError):  # a damaged record has no usage to read: not priced
            return None

    def trial_usage(self, name: str) -> dict[str, Usage]:
        return {trial.name: usage for trial in self.list(f"{name}_trial_")
                if (usage := self.usage(trial.name)) is not None}

    def planned_usage(self, spec: CommandJobSpec) -> Usage:
        """This machine's cores, as many as the job runs processes of its own code."""
        return Usage(processes=process_count(spec))

    def list(self, prefix: str = "") -> builtins.list[JobInfo]:
        """The workspace's jobs whose names start with ``prefix`` (all of them by default)."""
        if not self.workspace.jobs.exists():
            return []
        names = sorted(p.name for p in self.workspace.jobs.iterdir()
                       if p.name.startswith(prefix) and (p / "status.json").exists())
        return [self.get(n) for n in names]

    def _find(self, name: str) -> JobInfo | None:
        state = JobState(self.workspace.job_dir(name))
        if not state.status_file.exists():
            return None
        if (why := self.workspace.outside(state.dir)) is not None:  # never read (a read may write) nor acted on
            return JobInfo(name=name, kind="command", status=JobStatus.FAILED, outputs=str(state.dir / "outputs"),
                           damaged=True, error=f"job folder not followed: {why}; remove it (submit makes a job's folder)")
        try:
            try:  # checked before anything acts on it (reconcile)
                state.job()
                state.status()
            except DamagedRecord as exc:  # a running job's supervisor writes its outcome over a damaged status
                return JobInfo(name=name, kind="command", status=JobStatus.FAILED, outputs=str(state.dir / "outputs"),
                               damaged=True, error=str(exc))
            status = reconcile(state, self.workspace)
            job = state.job()
        except (OSError, ValueError, KeyError) as exc:  # unwritable, full disk, corrupt: a report, not a crash
            return JobInfo(name=name, kind="command", status=JobStatus.FAILED, outputs=str(state.dir / "outputs"),
                           error=f"job folder {state.dir} cannot be read or written: {type(exc).__name__}: {exc}")
        return JobInfo(
            name=name, kind=job["kind"], status=JobStatus(status["status"]), exit_code=status.get("exit_code"),
            error=status.get("error"), timed_out=status.get("timed_out", False), outputs=str(state.dir / "outputs"),
            mlflow_run_id=status.get("mlflow_run_id"), created=status.get("created"), started=status.get("started"),
            ended=status.get("ended"), properties={k: v for k, v in job.items() if k in ("parent_run_id",)},
        )

    # -- act --------------------------------------------------------------------------------------
    def cancel(self, name: str, reason: str = "canceled by user") -> JobInfo:
        """Ask the job to stop (SIGTERM to its group, then SIGKILL) and wait until its processes are gone.

        A sweep's controller asks its trials to stop; the trials are waited for as well.
        """
        info = self._stop(name, reason)
        if info.kind == "sweep":
            for trial in self.list(f"{name}_trial_"):
                self._stop(trial.name, reason)
        return info

    def _stop(self, name: str, reason: str) -> JobInfo:
        state = JobState(self.workspace.job_dir(name))
        deadline = time.monotonic() + self.kill_grace_s + 30
        info = self.get(name)
        if info.damaged:  # its record cannot say how it stands: its processes are stopped, and it reads as get() does
            if self.workspace.outside(state.dir) is None:  # a link out of the workspace is not followed
                self._stop_damaged(state)
            return info
        if info.kind == "sweep" and info.status is JobStatus.FAILED:
            self._cancel_resumable(state, reason)
        if not info.status.is_terminal():
            self.request_cancel(name, reason)
            info = await_answer(lambda: self.get(name), state.cancel_seen_file.exists, deadline,
                                time.monotonic() + CANCEL_ANSWER_S)
            if not info.status.is_terminal():  # the supervisor did not answer: stop the job's processes ourselves
                answered = state.cancel_seen_file.exists()
                kill_marked(state.job()["token"])
                why = "" if answered else (f"; its supervisor did not answer the cancel within {CANCEL_ANSWER_S:g} s "
                                           "(stopped or frozen), so the job's processes were killed")
                state.update_unless_ended(status="Canceled", ended=time.time(), error=f"{reason}{why}")
                close_run(state, self.workspace, state.status())  # its supervisor, which would have, cannot
        # The supervisor records the status, then exits: wait for it to be gone too.
        if info.damaged:  # nothing to act on: it answers as get() does
            return info
        status = state.known()
        supervisor = Identity.recorded(status.get("supervisor_pid"), status.get("supervisor_started"))
        while supervisor is not None and supervisor.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.get(name)

    @staticmethod
    def _stop_damaged(state: JobState) -> None:
        """Stop what runs of a job whose record is damaged: found by the copy of its token (:data:`TOKEN_FILE`);
        a job submitted before the copy was kept has nothing to find its processes by."""
        if (token := _token(state)) is not None and (stopped := kill_marked(token)):
            log.warning("Job %s: its record is damaged; its %d process(es) were stopped", state.dir.name, stopped)

    def processes(self, name: str) -> int:
        """How many processes of job ``name`` run now (a sweep's trials' too): what :meth:`cancel` stops, found by
        the copy of its token, so counted whether or not its record can be read."""
        info = self.get(name)
        names = [name, *(t.name for t in self.list(f"{name}_trial_"))] if info.kind == "sweep" else [name]
        folders = [self.workspace.job_dir(job) for job in names]
        tokens = [token for folder in folders
                  if self.workspace.outside(folder) is None and (token := _token(JobState(folder))) is not None]
        return sum(len(marked(token)) for token in tokens)

    def _cancel_resumable(self, state: JobState, reason: str) -> None:
        """A sweep whose controller died is Failed but resumable: ``recover`` (the CLI, any retry) would start a
        new controller. A cancel ends that for good: the request is written (recover refuses a canceled sweep)
        and the sweep reads Canceled, naming the controller's death, under the lock recover takes."""
        with open(state.dir / SUBMIT_LOCK, "a") as submit_lock:
            fcntl.flock(submit_lock, fcntl.LOCK_EX)
            status = state.status()
            if status["status"] != JobStatus.FAILED.value or not status.get("killed"):
                return  # it failed on its own (nothing to resume), or a recover got here first
            self.request_cancel(state.dir.name, reason)
            state.update(status=JobStatus.CANCELED.value, killed=False,
                         error=f"{reason}; its controller had died: {status.get('error')}")
            close_run(state, self.workspace, state.status())  # its MLflow run said FAILED: the two agree

    def recover(self, name: str) -> JobInfo:
        """Resume a sweep whose controller died (killed, the OOM killer, a reboot): a new supervisor and
        controller take it on from its record (:mod:`mlrunway.local.sweep_controller`). Any other job is
        returned as it is: a command job that died is retried as a new attempt. Reads never call this."""
        self.resume(name)
        return self.get(name)

    def resume(self, name: str) -> bool:
        """:meth:`recover`, saying whether this call resumed the sweep (False: nothing to resume, it was
        canceled, or another recover got there first)."""
        info = self.get(name)
        state = JobState(self.workspace.job_dir(name))
        if info.kind != "sweep" or info.status is not JobStatus.FAILED or state.cancel_reason() is not None:
            return False
        with open(state.dir / SUBMIT_LOCK, "a") as submit_lock:  # readers see a submit under way, not a dead one
            fcntl.flock(submit_lock, fcntl.LOCK_EX)
            status = state.status()
            if (status["status"] != JobStatus.FAILED.value or not status.get("killed")
                    or state.cancel_reason() is not None):
                return False  # it failed on its own, was canceled, or another recover got here first
            state.update(status="Queued", error=None, ended=None, killed=False, supervisor_pid=None,
                         supervisor_started=None, recovered=int(status.get("recovered", 0)) + 1,
                         recovered_from=status.get("error"))
            self._spawn_supervisor(state.dir, state.job()["token"])
        return True

    def request_cancel(self, name: str, reason: str) -> JobState:
        """Ask the job's supervisor to stop it, without waiting; the first reason given stands."""
        state = JobState(self.workspace.job_dir(name))
        if not state.cancel_file.exists():
            write_json(state.cancel_file, {"reason": reason, "at": time.time()})
        # Wake its supervisor to read it now; one that was not woken (it had not recorded its PID yet, or is of a
        # release that sleeps in short polls) reads it within CANCEL_LOOK_S.
        with contextlib.suppress(OSError, ValueError, KeyError):
            status = state.status()
            supervisor = Identity.recorded(status.get("supervisor_pid"), status.get("supervisor_started"))
            if supervisor is not None and status.get("cancel_signal") in signal.Signals.__members__:
                supervisor.send(signal.Signals[status["cancel_signal"]])
        return state

    def wait(self, name: str, *, timeout: float | None = None, poll_s: float | None = None,
             on_poll: Callable[[JobInfo], None] | None = None, outage_s: float = 0.0,
             backend: str = "local") -> JobInfo:
        """:meth:`Jobs.wait`, and then the job's supervisors' exit: when it returns, nothing of the job runs."""
        info = super().wait(name, timeout=timeout, poll_s=poll_s, on_poll=on_poll, outage_s=outage_s, backend=backend)
        self._await_supervisors(name, info.kind == "sweep")
        return info

    def pause(self, name: str, seconds: float) -> None:
        """Watch the job's status file between polls (a stat every WAIT_WATCH_S): its end is seen at once."""
        status_file = JobState(self.workspace.job_dir(name)).status_file
        before, until = stamp(status_file), time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0 and stamp(status_file) == before:
            time.sleep(min(WAIT_WATCH_S, left))

    def _await_supervisors(self, name: str, sweep: bool) -> None:
        """A job's supervisor records its end, then ends its MLflow run and exits, a few ms later; a sweep's
        trials' the same. Wait for them (up to SUPERVISOR_EXIT_S): when ``wait`` returns, nothing of the job runs."""
        names = [name, *(p.name for p in self.workspace.jobs.iterdir() if p.name.startswith(f"{name}_trial_"))] \
            if sweep else [name]
        pending = []
        for job in names:
            with contextlib.suppress(OSError, ValueError, DamagedRecord):  # no supervisor known: wait as get() reads
                status = JobState(self.workspace.job_dir(job)).status()
                if (supervisor := Identity.recorded(status.get("supervisor_pid"), status.get("supervisor_started"))):
                    pending.append(supervisor)
        deadline = time.monotonic() + SUPERVISOR_EXIT_S
        while (pending := [p for p in pending if p.alive()]) and time.monotonic() < deadline:
            time.sleep(WAIT_WATCH_S / 2)

    def logs(self, name: str, stream: str = "stdout", *, follow: bool = False, poll_s: float = 0.5) -> Iterator[str]:
        """Yield the job's log lines; with ``follow``, keep yielding until the job ends."""
        self.get(name)
        path = self.workspace.job_dir(name) / "logs" / f"{check.one_of('stream', stream, ('stdout', 'stderr'))}.log"
        position, pending = 0, ""
        while True:
            done = self.get(name).status.is_terminal()
            if path.exists():
                with open(path, encoding="utf-8", errors="replace") as handle:
                    handle.seek(position)
                    pending += handle.read()
                    position = handle.tell()
            *lines, pending = pending.split("\n")
            yield from lines
            if not follow or done:
                if pending:
                    yield pending
                return
            time.sleep(poll_s)

    def metrics(self, name: str) -> dict[str, float]:
        """The latest value of each metric the job logged."""
        from mlrunway.local import tracking

        run_id = self.get(name).mlflow_run_id
        return tracking.latest_metrics(self.workspace, run_id) if run_id else {}

    def metric_history(self, name: str, metric: str) -> tuple[float, ...]:
        """Every value the job logged of ``metric``, in step order."""
        from mlrunway.local import tracking

        run_id = self.get(name).mlflow_run_id
        return tuple(tracking.metric_history(self.workspace, run_id, metric)) if run_id else ()

    def params(self, name: str) -> dict[str, Any]:
        """The params the job logged to its MLflow run."""
        from mlrunway.local import tracking

        run_id = self.get(name).mlflow_run_id
        return dict(tracking.client(self.workspace).get_run(run_id).data.params) if run_id else {}

    def tracking_uri(self) -> str:
        """The workspace's MLflow tracking store (``sqlite:///.../mlflow.db``)."""
        return self.workspace.tracking_uri

    def log_artifacts(self, name: str, folder: str | Path, artifact_path: str) -> None:
        """Keep ``folder``'s files as artifacts of the job's MLflow run, under ``artifact_path``."""
        from mlrunway.local import tracking

        tracking.log_artifacts(self.workspace, self._mlflow_run(name, "keep artifacts in"), Path(folder), artifact_path)

    def log_metrics(self, name: str, metrics: dict[str, float]) -> None:
        """Log ``metrics`` on the job's MLflow run."""
        from mlrunway.local import tracking

        tracking.log_metrics(self.workspace, self._mlflow_run(name, "log metrics on"), metrics)

    def _mlflow_run(self, name: str, purpose: str) -> str:
        """The job's MLflow run, or NotFound saying it has none to ``purpose``."""
        run_id = self.get(name).mlflow_run_id
        if not run_id:
            raise NotFound(f"job {name}: has no MLflow run to {purpose}")
        return run_id

    def sweep_result(self, name: str) -> SweepResult:
        """The sweep's record so far, from the controller's ``sweep.json`` (empty until its first write)."""
        info = self.get(name)
        if info.damaged:
            raise MlrunwayError(info.error)  # its job.json or status.json: what it is cannot be known
        job = JobState(self.workspace.job_dir(name)).job()
        if job["kind"] != "sweep":
            raise SpecError(f"job {name}: is a {job['kind']} job, not a sweep; pass a sweep job's name")
        path = self.workspace.job_dir(name) / "outputs" / "sweep.json"
        spec = SweepSpec.from_dict(job["sweep"])
        objective = spec.objective
        try:
            data = read(path, "restore it, or cancel the sweep and run it again") if path.exists() else {}
        except DamagedRecord as exc:  # not "Completed with no trials": what it ran is unknown
            return SweepResult(name=name, status=JobStatus.FAILED, objective=objective, error=str(exc), damaged=True)
        return record.result(name, info.status, spec, data, info.error)


def await_answer(read: Callable[[], JobInfo], answered: Callable[[], bool], until: float, answer_by: float, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 poll_s: float = 0.2) -> JobInfo:
    """Read a canceled job until it has ended, ``until`` passes, or ``answer_by`` passes with its supervisor not
    having answered (frozen, or swapped out: waiting longer tells nothing more); the last read. No sleep runs past
    ``answer_by``, so the supervisor is found frozen at CANCEL_ANSWER_S, as its error says, not a poll later."""
    while not (info := read()).status.is_terminal():
        now, seen = clock(), answered()
        if now >= until or (not seen and now >= answer_by):
            break
        sleep(min(poll_s, (until if seen else min(until, answer_by)) - now))
    return info


def _token(state: JobState) -> str | None:
    """The job's token, from its copy (:data:`TOKEN_FILE`); None for a job submitted before the copy was kept."""
    try:
        return (state.dir / TOKEN_FILE).read_text().strip()
    except OSError:
        return None


def _existing_folder(field: str, path: str) -> Path:
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise check.fail(field, f"folder {path!r} does not exist", "pass the folder that holds the training script")
    return folder


def _absolute_inputs(spec: CommandJobSpec) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    for name, value in spec.inputs.items():
        if isinstance(value, Input):
            path = Path(value.path).expanduser().resolve()
            kind_ok = path.is_dir() if value.type == "uri_folder" else path.is_file()
            if not kind_ok:
                raise check.fail(
                    f"command_job.inputs.{name}", f"{value.type} {value.path!r} does not exist",
                    "pass an existing path or fix the input's type",
                )
            value = Input(path=str(path), type=value.type)
        inputs[name] = value
    return inputs


def _usage(status: dict[str, Any]) -> Usage | None:
    """A job's usage as its supervisor recorded it (its start and end, its processes from its start, the CPU time
    they took at its end); None for a job that never started."""
    if status.get("started") is None:
        return None
    recorded: dict[str, Any] = status["usage"] if isinstance(status.get("usage"), dict) else {}
    processes, cpu = recorded.get("processes"), recorded.get("cpu_seconds")
    return Usage(started=status["started"], ended=status.get("ended"),
                 processes=processes if isinstance(processes, int) and processes >= 1 else 1,
                 cpu_seconds=float(cpu) if isinstance(cpu, (int, float)) and not isinstance(cpu, bool) else None)
