"""Waiting for a job on any backend: poll, report, and cancel what outlives its deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mlrunway.backend.types import JobInfo
from mlrunway.errors import JobTimedOut


def wait_for_job(jobs: Any, name: str, *, timeout: float | None = None, poll_s: float = 1.0,
                 on_poll: Callable[[JobInfo], None] | None = None) -> JobInfo:
    """Block until ``jobs.get(name)`` is terminal; past ``timeout`` seconds cancel it and raise JobTimedOut."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        info = jobs.get(name)
        if on_poll is not None:
            on_poll(info)
        if info.status.is_terminal():
            return info
        if deadline is not None and time.monotonic() > deadline:
            jobs.cancel(name, reason=f"wait timed out after {timeout:g} s")
            raise JobTimedOut(f"job {name}: still {info.status.value} after {timeout:g} s; it was canceled")
        time.sleep(poll_s)
