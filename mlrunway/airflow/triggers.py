"""The trigger that waits on a backend's job in the triggerer, so Train and Sweep free their worker slot.

It holds only names (the connection id, the job name) and numbers, so it serializes; each poll runs the
backend's blocking call in a thread. At its deadline it cancels the job and reports a timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from mlrunway.airflow.hook import MlrunwayHook


class JobTrigger(BaseTrigger):
    """:param backend_conn_id: the backend's Airflow connection.
    :param job_name: the job or sweep to wait on.
    :param poll_interval_s: seconds between status checks.
    :param deadline: epoch seconds after which the job is canceled and the event says ``timeout``.
    """

    def __init__(self, backend_conn_id: str, job_name: str, poll_interval_s: float = 10.0,
                 deadline: float | None = None) -> None:
        super().__init__()
        self.backend_conn_id, self.job_name = backend_conn_id, job_name
        self.poll_interval_s, self.deadline = poll_interval_s, deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "backend_conn_id": self.backend_conn_id, "job_name": self.job_name,
            "poll_interval_s": self.poll_interval_s, "deadline": self.deadline,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        backend = await asyncio.to_thread(MlrunwayHook(self.backend_conn_id).get_backend)
        while True:
            info = await asyncio.to_thread(backend.jobs.get, self.job_name)
            if info.status.is_terminal():
                yield TriggerEvent({"job_name": self.job_name, "status": info.status.value, "error": info.error})
                return
            if self.deadline is not None and time.time() > self.deadline:
                await asyncio.to_thread(backend.jobs.cancel, self.job_name, "the task's maximum wait passed")
                yield TriggerEvent({"job_name": self.job_name, "status": "timeout",
                                    "error": f"still {info.status.value} at the deadline; it was canceled"})
                return
            await asyncio.sleep(self.poll_interval_s)
