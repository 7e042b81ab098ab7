"""Waiting on any backend: an endpoint's or a deployment's provisioning (a job's is ``Jobs.wait``)."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import Any

from mlrunway.backend.types import ProvisioningState
from mlrunway.errors import EndpointError


class Outcome(enum.StrEnum):
    """How a wait ended: what it waited on ``ended`` (terminal, whatever its status), the deadline passed
    (``timeout``: the remote work was stopped), or waiting itself failed (``error``)."""

    ENDED = "ended"
    TIMEOUT = "timeout"
    ERROR = "error"


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
