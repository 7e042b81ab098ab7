"""Writes to endpoints and deployments, tried again while the service answers 409 or 429; and the reads and writes a
watch makes, whose transient failures are no news (:func:`transient_reads`, :func:`watched_write`): the watch tries
them again at its next poll.

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

__all__ = ["WRITE_BACKOFF_S", "RetriedWrites", "service_message", "transient_reads", "unavailable", "watched_write"]

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
                said = service_message(exc)
                if time.monotonic() + wait > deadline:
                    raise EndpointError(f"{what}: still refused after {self.retry_s:g} s of retries "
                                        f"(HTTP {exc.status_code}: {said})") from exc
                log.warning("%s: HTTP %s (%s); again in %.1f s", what, exc.status_code, said, wait)
                time.sleep(wait)
                backoff = min(backoff * 2, 60.0)


def service_message(exc: HttpResponseError) -> str:
    """What the service said of a failure: its error body's message (ARM's ``{"error": {"message": ...}}``), else
    azure-core's own line for the answer. The one reader of an Azure error's message."""
    return str(getattr(exc.error, "message", None) or exc.message)


def _retry_after(exc: HttpResponseError) -> float | None:
    """The service's Retry-After (seconds), if its answer had one."""
    try:
        return float(exc.response.headers["Retry-After"])  # type: ignore[union-attr]
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def unavailable(exc: Exception, what: str = "") -> Unavailable | None:
    """The core's Unavailable for a failure the service's answer says is transient (408, 429, 5xx, a connection
    refused or dropped: azure-core never retries a POST whose connection dropped), with its Retry-After; None for
    any other."""
    said = f"{what}: " if what else ""
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return Unavailable(f"{said}{type(exc).__name__}: {exc}")
    if isinstance(exc, HttpResponseError):
        status = exc.status_code or 0
        if status in (408, 429) or status >= 500:
            return Unavailable(f"{said}HTTP {status}: {service_message(exc)}", _retry_after(exc))
    return None


def transient_reads(read: Callable[..., T]) -> Callable[..., T]:
    """``read`` with the service's transient failures, still failing after azure-core's own retries (408, 429,
    5xx, a connection refused or reset), raised as the core's Unavailable (with the service's Retry-After): a wait
    reads again, for up to the connection's ``transient_outage_s``. Any other error is raised as it was."""

    @functools.wraps(read)
    def reading(*args: Any, **kwargs: Any) -> T:
        try:
            return read(*args, **kwargs)
        except (ServiceRequestError, ServiceResponseError, HttpResponseError) as exc:
            raise (unavailable(exc) or exc) from exc

    return reading


def watched_write(what: str, send: Callable[[], T]) -> T:
    """A write a watch makes (the cancel of a sweep at its budget, of a job that stopped answering): ``send()``,
    its transient failures raised as Unavailable naming ``what`` (with the service's Retry-After), so the watch tries
    it again at its next poll, within the connection's ``transient_outage_s``, as it reads again (never a busy loop
    here: the watch's own bound and backoff hold it). Any other error is raised as it was."""
    try:
        return send()
    except (ServiceRequestError, ServiceResponseError, HttpResponseError) as exc:
        raise (unavailable(exc, what) or exc) from exc
