"""The one reconciler of local jobs: a job's status as it truly is, decided from verified process identities.

Whoever reads a status (``get``, ``list``, ``sweep_result``, the report page) goes through :func:`reconcile`,
so a death is seen within one poll. Reading may end a job (record Failed with what died, end its MLflow run,
SIGKILL the processes it left) but never starts a process and never waits: restarting what died is an
explicit ``recover``.

- The supervisor's PID counts only with its start time (:class:`~mlrunway.local.processes.Identity`); the
  processes it leaves are found by the job's token in their environment, never by a stored process group id
  that another program may hold after a reboot.
- A job whose folder is in place but whose supervisor was never recorded is being submitted while the
  submitter holds ``submit.lock``; once that lock is free, the submit did not complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import time
from pathlib import Path
from typing import Any

from mlrunway.backend.types import JobStatus
from mlrunway.local.processes import Identity, kill_marked
from mlrunway.local.records import DamagedRecord
from mlrunway.local.supervisor import JobState
from mlrunway.local.workspace import Workspace

SUBMIT_LOCK = "submit.lock"
log = logging.getLogger(__name__)

__all__ = ["SUBMIT_LOCK", "close_run", "reconcile", "submitter_holds"]


def reconcile(state: JobState, workspace: Workspace) -> dict[str, Any]:
    """The job's status now; a job whose supervisor is gone (or never came) is ended with the reason."""
    status = state.status()
    supervisor = Identity.recorded(status.get("supervisor_pid"), status.get("supervisor_started"))
    if JobStatus(status["status"]).is_terminal():
        if status.get("run_open") and (supervisor is None or not supervisor.alive()):
            close_run(state, workspace, status)  # it died between recording the end and closing the run
        return status
    if supervisor is None:
        if submitter_holds(state.dir):
            return status
        return _end(state, workspace, "Failed", "submit did not complete: the submitting process died before the "
                                                "job's supervisor started; a retry submits the job anew")
    if supervisor.alive():
        return status
    token = state.job().get("token")
    left = kill_marked(token) if token else 0
    stopped = f"; the {left} process(es) it left were killed" if left else ""
    try:
        outcome = state.outcome()
    except DamagedRecord as exc:  # it wrote an outcome that cannot be read: the job's end is unknown
        return _end(state, workspace, "Failed", f"supervisor (pid {supervisor.pid}) died; {exc}{stopped}")
    if outcome is not None:  # it knew how the job ended, but could not write the status
        return _end(state, workspace, outcome["status"], outcome.get("error"), killed=bool(outcome.get("killed")),
                    exit_code=outcome.get("exit_code"), timed_out=outcome.get("timed_out"), ended=outcome.get("ended"))
    if (cancel := state.cancel_reason()) is not None:
        return _end(state, workspace, "Canceled", f"{cancel}{stopped}")
    return _end(state, workspace, "Failed",
                f"supervisor (pid {supervisor.pid}) died without recording an outcome (killed: SIGKILL, the OOM "
                f"killer or a reboot){stopped}", killed=True)


def submitter_holds(job_dir: Path) -> bool:
    """Whether a submitting process still holds the job's submit lock (it does until the supervisor is recorded)."""
    try:
        handle = open(job_dir / SUBMIT_LOCK)
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def _end(state: JobState, workspace: Workspace, status: str, error: str | None, *, killed: bool = False,
         **outcome: Any) -> dict[str, Any]:
    """Record the end unless the supervisor recorded one meanwhile; close the job's MLflow run to match.
    ``killed`` marks an end that a sweep's ``recover`` may undo (its process died; it did not fail). When the
    status cannot be written (a full disk), the end is returned as read, and recorded by a later read."""
    ended = {"status": status, "error": error, "killed": killed, **outcome, "ended": outcome.get("ended") or time.time()}
    try:
        state.update_unless_ended(**ended)
    except OSError as exc:
        log.warning("Job %s: its end (%s) could not be recorded yet: %s", state.dir.name, status, exc)
        return {**state.status(), **ended}
    current = state.status()
    if current["status"] == status:
        close_run(state, workspace, current)
    log.info("Job %s reconciled: %s (%s)", state.dir.name, current["status"], current.get("error"))
    return current


def close_run(state: JobState, workspace: Workspace, status: dict[str, Any]) -> None:
    """End the job's MLflow run as its status says (KILLED for Canceled), and record it closed. Its run is the one
    its status names, or, for a trial whose supervisor stopped before writing it there, the one its controller made
    (job.json's ``mlflow_run``). The store being unavailable must not hide the status: logged, never raised."""
    run_id = status.get("mlflow_run_id")
    if not run_id:
        with contextlib.suppress(OSError, DamagedRecord):  # no job.json to say: no run to end
            run_id = (state.job().get("mlflow_run") or [None, None])[1]
    if not run_id:
        return
    from mlrunway.local import tracking

    try:
        tracking.end_run_quickly(workspace, run_id, status["status"])
        state.update(run_open=False)
    except Exception as exc:  # noqa: BLE001 - the store (a full disk, a lock): the next read closes it
        log.warning("Job %s: its MLflow run %s could not be ended %s: %s", state.dir.name, run_id, status["status"],
                    exc)
