"""What Train and Sweep share: one job under the run's name, waited on in the triggerer or here, re-attached.

``deferrable=True`` (the default) submits the job, then frees the worker slot: a ``JobTrigger`` polls it in
the triggerer and resumes the task in ``execute_complete``. ``deferrable=False`` polls in the worker through
Airflow's ``ResumableJobMixin``, which keeps the job's name in the task state store so that a retry after a
worker crash reconnects to it. Either way the name derives from the DAG run, so a retry or re-run submits
nothing new: the backend hands back the job already under that name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow.sdk import Context, ResumableJobMixin

from mlrunway.airflow.triggers import JobTrigger
from mlrunway.backend.types import JobInfo, JobStatus
from mlrunway.errors import JobTimedOut, NotFound
from operators._base import MlrunwayWaitingOperator


class MlrunwayJobOperator(ResumableJobMixin, MlrunwayWaitingOperator):
    """A job under the run's name; past ``max_wait_s`` it is canceled and the task fails."""

    external_id_key = "mlrunway_job_name"
    link_kind = "job"  # what its links show: a job's pages, or a sweep's (the report too)

    # -- what a job operator defines -----------------------------------------------------------------
    def job_name(self, context: Context) -> str:
        raise NotImplementedError

    @staticmethod
    def data_interval(context: Context) -> tuple[str, str] | None:
        """The run's data interval as ISO strings, for the training script; None for runs without one."""
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        return (start.isoformat(), end.isoformat()) if start is not None and end is not None else None

    def submit(self, name: str, context: Context) -> None:
        """Submit the job as ``name`` (the backend returns the existing job when there is one)."""
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
        info = self.settle(lambda: self.backend.jobs.get(name), lambda i: i.status.is_terminal())
        if info.status.is_terminal():  # ended already (a re-run found it finished, or a short job): no deferral
            return self._finish(context, info)
        self.defer(trigger=JobTrigger(self.backend_conn_id, name, self.poll_interval_s, deadline),
                   method_name="execute_complete")

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        name = self._job = event["job_name"]
        self.link(context, self.link_kind, name)  # a resumed task is a new process: record its links again
        if event["status"] == "timeout":
            raise JobTimedOut(f"job {name}: {event['error']} (max_wait_s={self.max_wait_s:g})")
        return self._finish(context, self.backend.jobs.get(name))

    def _finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        if (report := self.progress(info.name)) is not None:
            report(info)
        return self.finish(context, info)

    # -- ResumableJobMixin ---------------------------------------------------------------------------
    def submit_job(self, context: Context) -> str:
        """Submit the run's job, or re-attach to the one already under its name (a retry, a re-run, a worker
        that died): looked up by name, so a re-attach costs one call and submits nothing."""
        name = self.job_name(context)
        self._job = name  # for on_kill, which gets no context
        try:
            info = self.backend.jobs.get(name)
            self.log.info("Re-attaching to %s, already %s: nothing new is submitted", name, info.status.value)
        except NotFound:
            self.submit(name, context)
        self.link(context, self.link_kind, name)
        return name

    def get_job_status(self, external_id: Any, context: Context) -> str:
        return self.backend.jobs.get(external_id).status.value

    def is_job_active(self, status: str) -> bool:
        return not JobStatus(status).is_terminal()

    def is_job_succeeded(self, status: str) -> bool:
        return status == JobStatus.COMPLETED.value

    def poll_until_complete(self, external_id: Any, context: Context) -> dict[str, Any]:
        info = self.backend.jobs.wait(external_id, timeout=self.max_wait_s, poll_s=self.poll_interval_s,
                                      on_poll=self.progress(external_id))
        self._result = self.finish(context, info)
        return self._result

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        result = getattr(self, "_result", None)
        return result if result is not None else self._finish(context, self.backend.jobs.get(external_id))

    def on_kill(self) -> None:
        """The task was killed (marked failed, timed out): cancel its job; a sweep cancels its trials."""
        if (name := getattr(self, "_job", None)) is not None:
            self.backend.jobs.cancel(name, reason="the Airflow task was killed")
