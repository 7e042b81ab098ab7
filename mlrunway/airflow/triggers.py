"""Triggers that wait in the triggerer, so Train, Sweep and DeployBlue free their worker slot.

One base loop, ``BackendTrigger``: each poll runs the backend's blocking call in a thread; the first terminal
state fires the one event ``{outcome: ended, status, error, ...ids}``; at the deadline the trigger stops the
remote work and fires ``outcome: timeout``; an exception fires ``outcome: error`` with its sentence. A poll that
brings no news (``Unavailable``: the service briefly away) is no verdict: the trigger reads again after the
service's Retry-After or a backoff of its own (never past the deadline), saying so once a minute, for up to the
backend's ``transient_outage_s``; past it the event is ``outcome: lost`` (the work may still run: a retry
re-attaches). Subclasses say what to wait on and what stopping it means. Triggers hold only names and numbers,
so they serialize.

A user who marks a deferred task failed (or clears it) reaches ``on_kill``, which Airflow 3.3 calls in the
triggerer for user actions only, never on a triggerer restart: a job is canceled there. The run's cleanup
task cancels any job of the run that is still running, as a second net.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from mlrunway.airflow.hook import MlrunwayHook
from mlrunway.backend.protocol import Backend
from mlrunway.backend.waiting import Outage, Outcome
from mlrunway.deploy import APPROVAL_BY_TAG, APPROVAL_TAG, WindowWatch, window_watch
from mlrunway.errors import Unavailable, WatchLost
from mlrunway.specs.sweep import SweepBudget
from mlrunway.sweep.budget import enforce
from mlrunway.sweep.progress import SaidOnce, TrialWatch


class BackendTrigger(BaseTrigger):
    """:param backend_conn_id: the backend's Airflow connection.
    :param poll_interval_s: seconds between status checks.
    :param deadline: epoch seconds after which the remote work is stopped and the event says ``timeout``.
    """

    detail = "error"  # the event's key for what ``poll`` says with the status (an approval's: who answered)

    def __init__(self, backend_conn_id: str, poll_interval_s: float = 10.0, deadline: float | None = None) -> None:
        super().__init__()
        self.backend_conn_id, self.poll_interval_s, self.deadline = backend_conn_id, poll_interval_s, deadline

    # -- what a subclass says ------------------------------------------------------------------------
    def ids(self) -> dict[str, Any]:
        """The names that identify what is waited on; they go into ``serialize`` and every event."""
        raise NotImplementedError

    def poll(self, backend: Backend) -> tuple[str, bool, str | None]:
        """Blocking: the status, whether it is terminal, and the error that goes with it."""
        raise NotImplementedError

    def stop(self, backend: Backend, reason: str) -> str:
        """Blocking: stop the remote work at the deadline; say what was done, for the event's message."""
        raise NotImplementedError

    def what(self) -> str:
        """What is waited on, for messages: ``job x``, ``deployment e/blue``."""
        return ", ".join(f"{key} {value}" for key, value in self.ids().items() if value and key != "carry")

    # -- the loop ------------------------------------------------------------------------------------
    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            **self.ids(), "backend_conn_id": self.backend_conn_id, "poll_interval_s": self.poll_interval_s,
            "deadline": self.deadline,
        }

    async def backend(self) -> Backend:
        return await asyncio.to_thread(MlrunwayHook(self.backend_conn_id).get_backend)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            event = await self._wait()
        except WatchLost as exc:
            event = {"outcome": Outcome.LOST.value, "status": None, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the operator raises the sentence; the triggerer must not die
            event = {"outcome": Outcome.ERROR.value, "status": None, "error": f"{type(exc).__name__}: {exc}"}
        yield TriggerEvent({**self.ids(), **event})

    async def _wait(self) -> dict[str, Any]:
        backend = await self.backend()
        outage = Outage(self.what(), backend.kind, backend.capabilities.transient_outage_s)
        # The operator checked just before deferring: the first look comes one interval later, which also keeps
        # the event from racing the deferring process's exit in the scheduler (apache/airflow#72716).
        delay = self.poll_interval_s
        while True:
            await asyncio.sleep(delay)
            try:
                event = await asyncio.to_thread(self.look, backend)
            except Unavailable as exc:
                delay = self.after(outage, exc)
                continue
            outage.read()
            if event is not None:
                return event
            delay = self.poll_interval_s

    def after(self, outage: Outage, exc: Unavailable) -> float:
        """The wait before reading again after a poll without news (:meth:`Outage.failed`, up to the deadline)."""
        return outage.failed(exc, math.inf if self.deadline is None else self.deadline - time.time())

    def look(self, backend: Backend) -> dict[str, Any] | None:
        """Blocking: one poll, and the event it ends the wait with (stopping the work past the deadline), or None."""
        status, terminal, detail = self.poll(backend)
        if terminal:
            return {"outcome": Outcome.ENDED.value, "status": status, self.detail: detail}
        if self.deadline is not None and time.time() > self.deadline:
            done = self.stop(backend, "the task's maximum wait passed")
            return {"outcome": Outcome.TIMEOUT.value, "status": status, "error": f"still {status} at the deadline; {done}"}
        return None

    def wait_here(self, backend: Backend) -> dict[str, Any]:
        """The trigger's wait and event, in the calling process (a task that does not defer)."""
        outage = Outage(self.what(), backend.kind, backend.capabilities.transient_outage_s)
        while True:
            try:
                event = self.look(backend)
            except Unavailable as exc:
                try:
                    time.sleep(self.after(outage, exc))
                except WatchLost as lost:
                    return {**self.ids(), "outcome": Outcome.LOST.value, "status": None, "error": str(lost)}
                continue
            outage.read()
            if event is not None:
                return {**self.ids(), **event}
            time.sleep(self.poll_interval_s)


class LogCopy:
    """Copy a job's new log lines into a task's log on every poll, the synchronous wait's and the trigger's alike
    (the triggerer writes a deferred task's trigger lines into that task's log), at most :data:`MAX_LINES` a poll:
    past them, how many were skipped is said instead. A courtesy: a read that fails is said once and skipped, never
    fails the wait. A trigger restarted elsewhere copies again from the first line."""

    MAX_LINES = 1000

    def __init__(self, log: Any, name: str) -> None:
        self.log, self.name, self.seen, self.said = log, name, 0, SaidOnce()

    def copy(self, backend: Backend) -> None:
        try:
            lines = list(backend.jobs.logs(self.name))
        except Exception as exc:  # noqa: BLE001 - whatever the read raised, the job's own outcome stands
            self.said.warn(self.log, "unread", "The log of %s could not be read (%s: %s); its copy here was skipped",
                           self.name, type(exc).__name__, exc)
            return
        new = lines[self.seen:]
        for line in new[:self.MAX_LINES]:
            self.log.info("[%s] %s", self.name, line)
        if len(new) > self.MAX_LINES:
            self.log.info("[%s] ... %d more lines skipped here (the job's own log has them)", self.name,
                          len(new) - self.MAX_LINES)
        self.seen = len(lines)


class JobTrigger(BackendTrigger):
    """Wait on a job or sweep; the deadline or a user's kill cancels it (a sweep cancels its trials).

    :param job_name: the job or sweep to wait on.
    :param follow_logs: copy the job's new log lines into the task's log on every poll (:class:`LogCopy`).
    """

    def __init__(self, backend_conn_id: str, job_name: str, poll_interval_s: float = 10.0,
                 deadline: float | None = None, follow_logs: bool = False) -> None:
        super().__init__(backend_conn_id, poll_interval_s, deadline)
        self.job_name, self.follow_logs = job_name, follow_logs
        self.logs = LogCopy(self.log, job_name) if follow_logs else None

    def ids(self) -> dict[str, Any]:
        return {"job_name": self.job_name}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        path, kwargs = super().serialize()
        return path, {**kwargs, **({"follow_logs": True} if self.follow_logs else {})}

    def what(self) -> str:
        return f"job {self.job_name}"

    def poll(self, backend: Backend) -> tuple[str, bool, str | None]:
        info = backend.jobs.recover(self.job_name)  # the waiter restarts what of its job died (a sweep's controller)
        if self.logs is not None:
            self.logs.copy(backend)
        return info.status.value, info.status.is_terminal(), info.error

    def stop(self, backend: Backend, reason: str) -> str:
        backend.jobs.cancel(self.job_name, reason)
        return "it was canceled"

    async def on_kill(self) -> None:
        """The user marked the deferred task failed or cleared it: cancel the job (Airflow bounds the wait)."""
        backend = await self.backend()
        await asyncio.to_thread(self.stop, backend, "the Airflow task was killed while deferred")


class SweepTrigger(JobTrigger):
    """Wait on a sweep as :class:`JobTrigger` does, and log its progress as it happens, one line per trial event
    (started, each value of the primary metric, ended and why: :class:`~mlrunway.sweep.progress.TrialWatch`): the
    triggerer writes a deferred task's trigger lines into that task's log. A trigger restarted elsewhere says
    again what it had said.

    :param budget: what the sweep may spend (:class:`~mlrunway.specs.sweep.SweepBudget`, as a dict), where the
        service starts its trials (Azure ML): at it, the trigger records the decision on the sweep and cancels the
        sweep (:func:`mlrunway.sweep.budget.enforce`); None where the backend's own controller keeps it.
    """

    def __init__(self, backend_conn_id: str, job_name: str, poll_interval_s: float = 10.0,
                 deadline: float | None = None, budget: dict[str, Any] | None = None) -> None:
        super().__init__(backend_conn_id, job_name, poll_interval_s, deadline)
        self.watch, self.said, self.budget = TrialWatch(), SaidOnce(), budget
        self.looked: float | None = None  # when the budget was last looked at: a longer gap is a stated overshoot

    def serialize(self) -> tuple[str, dict[str, Any]]:
        path, kwargs = super().serialize()
        return path, {**kwargs, "budget": self.budget}

    def poll(self, backend: Backend) -> tuple[str, bool, str | None]:
        if self.looked is None:  # the watch's start: an outage before its first look makes that look late too
            self.looked = time.monotonic() - self.poll_interval_s
        polled = super().poll(backend)
        try:
            lines = self.watch.events(backend.jobs.sweep_result(self.job_name))
        except Exception as exc:  # noqa: BLE001 - progress is a courtesy: the wait goes on without it
            self.said.warn(self.log, "progress", "the sweep's progress could not be read (%s); waiting on it "
                           "regardless", exc)
        else:
            for event in lines:
                self.log.info("%s", event.text)
        if self.budget is not None and not polled[1]:
            now = time.monotonic()
            gap = max(0.0, now - self.looked - self.poll_interval_s)
            verdict = enforce(backend, self.job_name, SweepBudget(**self.budget), outage_s=gap)
            if verdict.unpriced is not None:  # no verdict: this poll's status stands, the next poll looks again
                self.said.warn(self.log, "unpriced", "Sweep %s: its budget was not looked at: %s", self.job_name,
                               verdict.unpriced)
                return polled
            self.looked = now
            self.said.over("unpriced")
            if verdict.decision is not None:
                info = backend.jobs.get(self.job_name)
                return info.status.value, info.status.is_terminal(), verdict.decision
        return polled


class DeploymentTrigger(BackendTrigger):
    """Wait on an endpoint's provisioning, or one of its deployments'; the deadline deletes the deployment.

    :param endpoint: the online endpoint.
    :param deployment: the deployment, or None for the endpoint itself.
    :param operation: the service's handle on the deployment's provisioning (``DeploymentInfo.operation``),
        where a failure's reason is.
    :param carry: what the resumed task needs, handed back in the event (see :class:`WindowTrigger`).
    """

    def __init__(self, backend_conn_id: str, endpoint: str, deployment: str | None = None,
                 poll_interval_s: float = 10.0, deadline: float | None = None, operation: str | None = None,
                 carry: dict[str, Any] | None = None) -> None:
        super().__init__(backend_conn_id, poll_interval_s, deadline)
        self.endpoint, self.deployment, self.operation, self.carry = endpoint, deployment, operation, carry

    def ids(self) -> dict[str, Any]:
        ids = {"endpoint": self.endpoint, "deployment": self.deployment, "operation": self.operation}
        return {**ids, "carry": self.carry} if self.carry is not None else ids

    def what(self) -> str:
        return f"endpoint {self.endpoint}" if self.deployment is None else f"deployment {self.endpoint}/{self.deployment}"

    def poll(self, backend: Backend) -> tuple[str, bool, str | None]:
        if self.deployment is None:
            state, error = backend.endpoints.get(self.endpoint).provisioning_state, None
        else:
            info = backend.endpoints.get_deployment(self.endpoint, self.deployment, operation=self.operation)
            state, error = info.provisioning_state, info.error
        return state.value, state.is_terminal(), error

    def stop(self, backend: Backend, reason: str) -> str:
        """Azure cannot cancel a provisioning: delete the deployment (it has no traffic yet); an endpoint is left
        to the run's cleanup task, which deletes it with whatever it holds."""
        if self.deployment is None:
            return "the run's cleanup deletes it"
        backend.endpoints.delete_deployment(self.endpoint, self.deployment)
        return "it was deleted"


class ApprovalTrigger(BackendTrigger):
    """Wait for a person's answer on a challenger: the model version's ``mlrunway.approval`` tag turning from
    ``pending`` to ``approved`` or ``rejected`` (``python -m mlrunway.airflow.approval``, or the tag edited in the
    registry's own UI). At the deadline the tag says ``expired``.

    :param model: the version waiting, ``name:version``.
    :param carry: what the resumed task needs, handed back in the event.
    """

    detail = "by"

    def __init__(self, backend_conn_id: str, model: str, poll_interval_s: float = 10.0,
                 deadline: float | None = None, carry: dict[str, Any] | None = None) -> None:
        super().__init__(backend_conn_id, poll_interval_s, deadline)
        self.model, self.carry = model, carry

    def ids(self) -> dict[str, Any]:
        return {"model": self.model, "carry": self.carry}

    def what(self) -> str:
        return f"the approval of {self.model}"

    def poll(self, backend: Backend) -> tuple[str, bool, str | None]:
        name, _, version = self.model.partition(":")
        tags = backend.models.get(name, version).tags
        answer = tags.get(APPROVAL_TAG, "pending")
        return answer, answer != "pending", tags.get(APPROVAL_BY_TAG)

    def stop(self, backend: Backend, reason: str) -> str:
        name, _, version = self.model.partition(":")
        backend.models.update_tags(name, int(version), {APPROVAL_TAG: "expired"})
        return "no answer came; the approval expired"



class WindowTrigger(BaseTrigger):
    """Wait until ``until`` (epoch seconds), then hand ``carry`` back in the event: a staged rollout's window.
    ``carry`` is the strategy's state, opaque here: the strategy reads its progress from it
    (:func:`mlrunway.deploy.window_watch`). With ``backend_conn_id``, the window is watched meanwhile (its
    :meth:`~mlrunway.deploy.WindowWatch.once`, no more often than the backend's metrics change):
    a clearly failing challenger is rolled back here, at once, and the event says so (status ``rolled_back``,
    the reason as its error).

    The task's state travels in the event rather than in ``defer(kwargs=...)``: Airflow 3.3's ``dag.test()`` (the
    demo's ``airflow dags test``) resumes a task with the event alone, dropping the deferral's kwargs.
    """

    def __init__(self, until: float, carry: dict[str, Any], backend_conn_id: str | None = None) -> None:
        super().__init__()
        self.until, self.carry, self.backend_conn_id = until, carry, backend_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "until": self.until, "carry": self.carry, "backend_conn_id": self.backend_conn_id}

    def watch(self) -> WindowWatch | None:
        """The watch of the rollout the window belongs to, when it is watched."""
        return window_watch(self.carry) if self.backend_conn_id else None

    def event(self, watched: str | None) -> dict[str, Any]:
        if watched:
            return {"outcome": Outcome.ENDED.value, "carry": self.carry, "status": "rolled_back", "error": watched}
        return {"outcome": Outcome.ENDED.value, "carry": self.carry}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        watch, watched = self.watch(), None
        if watch is None:
            await asyncio.sleep(max(0.0, self.until - time.time()))
        else:
            try:
                backend = await asyncio.to_thread(MlrunwayHook(str(self.backend_conn_id)).get_backend)
                while (left := self.until - time.time()) > 0:
                    if watched := await asyncio.to_thread(watch.once, backend):
                        await asyncio.to_thread(watch.roll_back, backend)
                        break
                    await asyncio.sleep(min(watch.period(backend), left))
            except Exception as exc:  # noqa: BLE001 - a watch that fails leaves the window's end to judge
                self.log.warning("the rollout window's watch stopped (%s: %s); its end judges it", type(exc).__name__,
                                 exc)
                await asyncio.sleep(max(0.0, self.until - time.time()))
        yield TriggerEvent(self.event(watched))

    def wait_here(self, backend: Backend) -> dict[str, Any]:
        """The window, in the calling process (a task that does not defer), watched as in the triggerer."""
        watch = self.watch()
        if watch is None:
            time.sleep(max(0.0, self.until - time.time()))
            return self.event(None)
        return self.event(watch.until(backend, self.until))
