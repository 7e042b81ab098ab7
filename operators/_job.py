"""What Train and Sweep share: one job under the run's name, waited on in the triggerer or here, re-attached.

``deferrable=True`` (the default) submits the job, then frees the worker slot: a ``JobTrigger`` polls it in
the triggerer and resumes the task in ``execute_complete``. ``deferrable=False`` polls in the worker through
Airflow's ``ResumableJobMixin``, which keeps the job's name in the task state store so that a retry after a
worker crash reconnects to it. Either way the name derives from the DAG run, so a retry or re-run re-attaches
to a Queued, Running or Completed job and submits nothing; after a Failed or Canceled one it submits the next
attempt (``<name>-a2``...: :mod:`mlrunway.backend.attempts`).
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
from mlrunway.errors import JobFailed, JobTimedOut
from operators._base import MlrunwayWaitingOperator


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

    def progress(self, name: str) -> Callable[[JobInfo], None] | None:
        """Called on every poll in the worker, and once at the end when deferred (log lines, trials)."""
        return None

    def finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        """Check the ended job and return the task's result."""
        raise NotImplementedError

    # -- execution -----------------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return self.execute_resumable(context)
        deadline = time.time() + self.max_wait_s  # the wait in the worker counts towards it
        name = self.submit_job(context)
        info = self.settle(lambda: self.backend.jobs.recover(name), lambda i: i.status.is_terminal())
        if info.status.is_terminal():  # ended already (a re-run found it finished, or a short job): no deferral
            return self._finish(context, info)
        self.defer(trigger=self.trigger_class(self.backend_conn_id, name, self.poll_s, deadline),
                   method_name="execute_complete")

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        name = self._job = event["job_name"]
        outcome = Outcome(event["outcome"])
        self.link(context, self.link_kind, name)  # a resumed task is a new process: record its links again
        if outcome is Outcome.TIMEOUT:
            raise JobTimedOut(f"job {name}: {event['error']} (max_wait_s={self.max_wait_s:g})")
        if outcome is Outcome.ERROR:
            raise JobFailed(f"job {name}: waiting on it failed: {event['error']}")
        self.log.info("%s ended %s", name, JobStatus(event["status"]).value)
        return self._finish(context, self.backend.jobs.get(name))

    def _finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        if (report := self.progress(info.name)) is not None:
            report(info)
        return self.finish(context, info)

    # -- ResumableJobMixin ---------------------------------------------------------------------------
    def submit_job(self, context: Context) -> str:
        """Submit the run's job, or re-attach to its newest attempt (a retry, a re-run, a worker that died)
        unless that attempt ended Failed or Canceled: then submit the next attempt. Returns the job's name."""
        attempt = self.attempt = submit_or_reattach(self.backend.jobs, self.job_name(context),
                                                    lambda n: self.submit(n, context))
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
        info = self.backend.jobs.wait(external_id, timeout=self.max_wait_s, poll_s=self.poll_s,
                                      on_poll=self.progress(external_id))
        self._result = self.finish(context, info)

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        result = getattr(self, "_result", None)
        return result if result is not None else self._finish(context, self.backend.jobs.get(external_id))

    def on_kill(self) -> None:
        """The task was killed (marked failed, timed out): cancel its job; a sweep cancels its trials."""
        if (name := getattr(self, "_job", None)) is not None:
            self.backend.jobs.cancel(name, reason="the Airflow task was killed")
