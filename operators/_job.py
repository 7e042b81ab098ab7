"""What Train and Sweep share: one job under the run's name, waited on in the triggerer or here, re-attached.

``deferrable=True`` (the default) submits the job, then frees the worker slot: a ``JobTrigger`` polls it in
the triggerer and resumes the task in ``execute_complete``. ``deferrable=False`` polls in the worker through
Airflow's ``ResumableJobMixin``, which keeps the job's name in the task state store so that a retry after a
worker crash reconnects to it. Either way the name derives from the DAG run, so a retry or re-run re-attaches
to a Queued, Running or Completed job and submits nothing; after a Failed or Canceled one it submits the next
attempt (``<name>-a2``...: :mod:`mlrunway.backend.attempts`).

Retries re-attach, never re-spend: a job that *ended* (Failed, Canceled, past ``max_wait_s``, or Completed with
a model or metrics its check refuses) fails the task for good (:func:`~mlrunway.operators._base.final`, an
AirflowFailException: a retry would submit the same deterministic failure again), as a refusal before any job does;
only a lost watch (its status unreadable for longer than the backend's ``transient_outage_s``) is retried, and the
retry re-attaches to the same job. ``on_kill`` cancels the job on the last try only: before it, a worker restart
would otherwise cancel the job its retry re-attaches to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow.sdk import Context, ResumableJobMixin

from mlrunway.airflow.triggers import JobTrigger
from mlrunway.backend.attempts import Action, submit_or_reattach
from mlrunway.backend.types import JobInfo, JobStatus
from mlrunway.backend.waiting import Outcome
from mlrunway.errors import JobTimedOut, MlrunwayError, Unavailable, WatchLost
from mlrunway.operators._base import MlrunwayWaitingOperator, final


class MlrunwayJobOperator(ResumableJobMixin, MlrunwayWaitingOperator):
    """A job under the run's name; past ``max_wait_s`` it is canceled and the task fails."""

    external_id_key = "mlrunway_job_name"
    link_kind = "job"  # what its links show: a job's pages, or a sweep's (the report too)
    trigger_class: type[JobTrigger] = JobTrigger  # what waits on the job in the triggerer

    # -- what a job operator defines -----------------------------------------------------------------
    def job_name(self, context: Context) -> str:
        raise NotImplementedError

    @staticmethod
    def data_interval(context: Context) -> tuple[str, str] | None:
        """The run's data interval as ISO strings, for the training script; None for runs without one."""
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        return (start.isoformat(), end.isoformat()) if start is not None and end is not None else None

    def submit(self, name: str, context: Context) -> JobInfo:
        """Submit the job as ``name`` (an attempt of the run's job) and return it."""
        raise NotImplementedError

    def stale(self, info: JobInfo, context: Context) -> str | None:
        """Why a Completed attempt found on a re-run no longer answers this task (then the next attempt is
        submitted), or None to re-attach to it (the default: a completed job's result stands)."""
        return None

    def progress(self, name: str) -> Callable[[JobInfo], None] | None:
        """Called on every poll in the worker, and once at the end when deferred (log lines, trials)."""
        return None

    def finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        """Check the ended job and return the task's result."""
        raise NotImplementedError

    # -- execution -----------------------------------------------------------------------------------
    def last_try(self, context: Context) -> bool:
        """Whether this try is the task's last (no retry follows a failure), noted for ``on_kill``."""
        task_instance = context.get("ti")
        self._last_try = int(getattr(task_instance, "try_number", 1) or 1) > int(self.retries or 0)
        return self._last_try

    def watch_lost(self, context: Context, detail: str) -> MlrunwayError:
        """The error for a wait that lost its job (it may still run): retried, and the retry re-attaches; on the last
        try, the run's cleanup cancels the job."""
        if self.last_try(context):
            return MlrunwayError(f"{detail}; cleanup now cancels it (raise the connection's transient_outage_s to "
                                 "ride out longer outages)")
        return MlrunwayError(f"{detail}; the next try re-attaches to it")

    def execute(self, context: Context) -> Any:
        self.last_try(context)
        if not self.deferrable:
            return self.execute_resumable(context)
        deadline = time.time() + self.max_wait_s  # the wait in the worker counts towards it
        name = self.submit_job(context)
        info = self.settle(lambda: self.backend.jobs.recover(name), lambda i: i.status.is_terminal())
        if info.status.is_terminal():  # ended already (a re-run found it finished, or a short job): no deferral
            return self._finish(context, info)
        self.defer(trigger=self.trigger(name, deadline), method_name="execute_complete")

    def trigger(self, name: str, deadline: float) -> JobTrigger:
        """What waits on job ``name`` in the triggerer, up to ``deadline``."""
        return self.trigger_class(self.backend_conn_id, name, self.poll_s, deadline)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        name = self._job = event["job_name"]
        outcome = Outcome(event["outcome"])
        self.last_try(context)
        self.link(context, self.link_kind, name)  # a resumed task is a new process: record its links again
        if outcome is Outcome.TIMEOUT:
            raise final(JobTimedOut(f"job {name}: {event['error']} (max_wait_s={self.max_wait_s:g})"))
        if outcome is Outcome.LOST:
            raise self.watch_lost(context, event["error"])
        if outcome is Outcome.ERROR:
            raise self.watch_lost(context, f"job {name} may still be running on the {self.backend.kind} backend: "
                                           f"waiting on it failed ({event['error']})")
        self.log.info("%s ended %s", name, JobStatus(event["status"]).value)
        return self._finish(context, self.backend.jobs.get(name))

    def _finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        """The ended job's check and result. What it refuses is final; a read that brought no news is not."""
        try:
            if (report := self.progress(info.name)) is not None:
                report(info)
            return self.finish(context, info)
        except Unavailable:
            raise
        except MlrunwayError as exc:
            raise final(exc) from exc.__cause__

    # -- ResumableJobMixin ---------------------------------------------------------------------------
    def submit_job(self, context: Context) -> str:
        """Submit the run's job, or re-attach to its newest attempt (a retry, a re-run, a worker that died)
        unless that attempt ended Failed or Canceled: then submit the next attempt. Returns the job's name."""
        attempt = self.attempt = submit_or_reattach(self.backend.jobs, self.job_name(context),
                                                    lambda n: self.submit(n, context),
                                                    lambda info: self.stale(info, context))
        if attempt.action is not Action.SUBMITTED:
            self.log.info(attempt.describe())
        name = self._job = attempt.job.name  # for on_kill, which gets no context
        self.link(context, self.link_kind, name)
        return name

    def get_job_status(self, external_id: Any, context: Context) -> str:
        return self.backend.jobs.get(external_id).status.value

    def is_job_active(self, status: str) -> bool:
        return not JobStatus(status).is_terminal()

    def is_job_succeeded(self, status: str) -> bool:
        return status == JobStatus.COMPLETED.value

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        try:
            info = self.backend.jobs.wait(external_id, timeout=self.max_wait_s, poll_s=self.poll_s,
                                          on_poll=self.progress(external_id),
                                          outage_s=self.backend.capabilities.transient_outage_s,
                                          backend=self.backend.kind)
        except WatchLost as exc:
            raise self.watch_lost(context, str(exc)) from exc
        except JobTimedOut as exc:
            raise final(exc) from exc
        self._result = self._finish(context, info)

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        result = getattr(self, "_result", None)
        return result if result is not None else self._finish(context, self.backend.jobs.get(external_id))

    def on_kill(self) -> None:
        """The task was killed (marked failed, timed out, its worker stopped): on its last try, cancel its job (a
        sweep cancels its trials); before that the job goes on, for the retry to re-attach to (the run's cleanup
        cancels whatever is left running after the last try)."""
        if (name := getattr(self, "_job", None)) is None:
            return
        if not getattr(self, "_last_try", True):
            self.log.info("Killed before its last try: %s goes on, for the next try to re-attach to", name)
            return
        self.backend.jobs.cancel(name, reason="the Airflow task was killed")
