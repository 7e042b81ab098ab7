"""Writes to endpoints and deployments, tried again while the service answers 409 or 429; and the reads a wait
makes, whose transient failures are no news (:func:`transient_reads`).

An endpoint takes one operation at a time: while a deployment is still updating, a traffic update or another
deployment's write is answered 409 Conflict; a busy subscription is throttled with 429. Both pass, so a write
is retried with the service's ``Retry-After`` (else backoff) for a bounded time, then fails naming what it was.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

from mlrunway.errors import EndpointError, Unavailable

__all__ = ["WRITE_BACKOFF_S", "RetriedWrites", "transient_reads"]

WRITE_BACKOFF_S = 1.0  # the first wait after a 409 or 429 without Retry-After; doubled each time, up to 60 s
T = TypeVar("T")
log = logging.getLogger(__name__)


class RetriedWrites:
    """:param retry_s: how long a write the service answers 409 (another operation on the endpoint is running: a
        deployment still updating) or 429 (throttled) is tried again, with backoff, before it fails."""

    def __init__(self, retry_s: float = 600.0) -> None:
        self.retry_s = retry_s

    def __call__(self, what: str, send: Callable[[], T]) -> T:
        """``send()``, again after 409 Conflict and 429 Too Many Requests (the service's ``Retry-After``, else
        1, 2, 4... s) until ``retry_s`` has passed; then the last error, naming what was being written."""
        deadline, backoff = time.monotonic() + self.retry_s, WRITE_BACKOFF_S
        while True:
            try:
                return send()
            except HttpResponseError as exc:
                if exc.status_code not in (409, 429):
                    raise
                wait = _retry_after(exc) or backoff
                said = getattr(exc.error, "message", None) or exc.message
                if time.monotonic() + wait > deadline:
                    raise EndpointError(f"{what}: still refused after {self.retry_s:g} s of retries "
                                        f"(HTTP {exc.status_code}: {said})") from exc
                log.warning("%s: HTTP %s (%s); again in %.1f s", what, exc.status_code, said, wait)
                time.sleep(wait)
                backoff = min(backoff * 2, 60.0)


def _retry_after(exc: HttpResponseError) -> float | None:
    """The service's Retry-After (seconds), if its answer had one."""
    try:
        return float(exc.response.headers["Retry-After"])  # type: ignore[union-attr]
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def transient_reads(read: Callable[..., T]) -> Callable[..., T]:
    """``read`` with the service's transient failures, still failing after azure-core's own retries (408, 429,
    5xx, a connection refused or reset), raised as the core's Unavailable (with the service's Retry-After): a wait
    reads again, for up to the connection's ``transient_outage_s``. Any other error is raised as it was."""

    @functools.wraps(read)
    def reading(*args: Any, **kwargs: Any) -> T:
        try:
            return read(*args, **kwargs)
        except (ServiceRequestError, ServiceResponseError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}") from exc
        except HttpResponseError as exc:
            status = exc.status_code or 0
            if status not in (408, 429) and status < 500:
                raise
            said = getattr(exc.error, "message", None) or exc.message
            raise Unavailable(f"HTTP {status}: {said}", _retry_after(exc)) from exc

    return reading
