"""Waiting on any backend: an endpoint's or a deployment's provisioning (a job's is ``Jobs.wait``)."""

from __future__ import annotations

import enum
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway.backend.types import ProvisioningState
from mlrunway.errors import EndpointError, Unavailable, WatchLost
from mlrunway.settings import NOT_A_FLAG, parse, setting

log = logging.getLogger(__name__)


class Outcome(enum.StrEnum):
    """How a wait ended: what it waited on ``ended`` (terminal, whatever its status), the deadline passed
    (``timeout``: the remote work was stopped), waiting itself failed (``error``), or the reads brought no news for
    longer than the backend's ``transient_outage_s`` (``lost``: the work may still be running)."""

    ENDED = "ended"
    TIMEOUT = "timeout"
    ERROR = "error"
    LOST = "lost"


OUTAGE_LOG_S = 60.0  # a wait riding out an outage says so once a minute
BACKOFF_S, BACKOFF_MAX_S = 2.0, 60.0  # its own backoff when the service names no Retry-After: 2, 4, 8... s, jittered


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Waits:
    """How a backend's waits ride out a service that does not answer, declared once (:mod:`mlrunway.settings`):
    a connection's ``transient_outage_s`` (text, as a connection holds it, is read as its number)."""

    transient_outage_s: Annotated[float, NOT_A_FLAG] = setting(
        900.0, ge=0, le=24 * 3600, allow_inf_nan=False,
        description="How long a wait rides out reads that fail (throttled, 5xx, dropped connections) before the task "
                    "gives up on it (a retry re-attaches).",
        problem="{value!r} is not a number of seconds from 0 to 86400",
        fix="write e.g. 900 (how long a wait rides out an outage)")

    @classmethod
    def parse(cls, fields: Mapping[str, Any], field: str) -> Waits:
        """From a connection's fields (an empty one: its default); ``field`` names the connection."""
        given = {name: fields[name] for name in ("transient_outage_s",) if fields.get(name) not in (None, "")}
        return parse(cls, given, field, noun="wait")


class Outage:
    """A wait's reads that brought no news (:class:`~mlrunway.errors.Unavailable`): each is no news, not a
    verdict; the wait reads again after the service's Retry-After, else an exponential backoff with jitter, for
    up to ``bound_s`` (the backend's ``transient_outage_s``), then gives up with WatchLost. ``what`` names what is
    waited on (``job x``), ``backend`` where."""

    def __init__(self, what: str, backend: str, bound_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.backend, self.bound_s, self.clock = what, backend, bound_s, clock
        self.since: float | None = None
        self.failures, self.said = 0, -math.inf

    def read(self) -> None:
        """A read brought news: the outage, if any, is over."""
        if self.since is not None:
            log.info("%s: read again after %.0f s without news", self.what, self.clock() - self.since)
        self.since, self.failures = None, 0

    def failed(self, exc: Unavailable, left_s: float = math.inf) -> float:
        """A read brought no news: the seconds to wait before the next one, never past the wait's deadline
        (``left_s`` from now); WatchLost past the bound, or at the deadline (the work can be neither read nor
        stopped then)."""
        if left_s <= 0:
            raise self.lost(exc)
        now = self.clock()
        self.since = now if self.since is None else self.since
        self.failures += 1
        elapsed = now - self.since
        if elapsed >= self.bound_s:
            raise self.lost(exc)
        if now - self.said >= OUTAGE_LOG_S:
            self.said = now
            log.warning("%s: no news for %.0f s (%s); reading again, for up to %.0f s in all", self.what, elapsed,
                        exc, self.bound_s)
        wait = exc.retry_after_s if exc.retry_after_s is not None else \
            min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (self.failures - 1)) * random.uniform(0.5, 1.0)
        return max(0.0, min(wait, self.bound_s - elapsed, left_s))

    def lost(self, exc: Unavailable) -> WatchLost:
        """The watch given up: what is waited on may still run (a later try may re-attach)."""
        lost = WatchLost(self.what, self.backend, 0.0 if self.since is None else self.clock() - self.since, exc)
        lost.__cause__ = exc
        return lost


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
