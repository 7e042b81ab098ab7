"""Waiting on any backend: a job (poll, report, cancel what outlives its deadline), an endpoint's provisioning."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mlrunway.backend.protocol import Jobs
from mlrunway.backend.types import JobInfo, ProvisioningState
from mlrunway.errors import EndpointError, JobTimedOut


def wait_for_job(jobs: Jobs, name: str, *, timeout: float | None = None, poll_s: float = 1.0,
                 on_poll: Callable[[JobInfo], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> JobInfo:
    """Block until the job is terminal; past ``timeout`` seconds cancel it and raise JobTimedOut. Each poll is
    ``jobs.recover``: the waiter restarts what of its own job died (a local sweep's controller). ``sleep``
    waits between polls (a backend's may end early when it sees the job change)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        info = jobs.recover(name)
        if on_poll is not None:
            on_poll(info)
        if info.status.is_terminal():
            return info
        if deadline is not None and time.monotonic() > deadline:
            jobs.cancel(name, reason=f"wait timed out after {timeout:g} s")
            raise JobTimedOut(f"job {name}: still {info.status.value} after {timeout:g} s; it was canceled")
        sleep(poll_s)


def wait_provisioned(get: Callable[[], Any], what: str, *, timeout: float = 3600.0, poll_s: float = 5.0) -> Any:
    """Poll ``get()`` until its ``provisioning_state`` is terminal (Succeeded, Failed, Canceled); return it.

    Past ``timeout`` seconds raise EndpointError: Azure cannot cancel a provisioning, so the caller decides
    whether to delete what it created.
    """
    deadline = time.monotonic() + timeout
    while True:
        resource = get()
        if ProvisioningState.parse(resource.provisioning_state).is_terminal():
            return resource
        if time.monotonic() > deadline:
            raise EndpointError(f"{what}: still {resource.provisioning_state} after {timeout:g} s")
        time.sleep(poll_s)
