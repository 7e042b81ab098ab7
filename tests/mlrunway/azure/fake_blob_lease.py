"""Blob Storage's leases, containers and metadata, for the fake service (``fake_azureml.FakeAzureML``).

What the service documents (Lease Blob, Create Container, Set Blob Metadata, Get Blob Properties, Put Blob, and
the Blob service's error codes): a lease is available, leased (infinite, or fixed 15-60 s and then expired),
breaking or broken; each action answers as the lease-state table says (201 acquire, 200 renew, change and
release, 202 break with ``x-ms-lease-time``; 409 ``LeaseAlreadyPresent``, ``LeaseIdMismatchWithLeaseOperation``,
``LeaseNotPresentWithLeaseOperation``, ...); a write to a leased blob without its lease id is refused with 412
(``LeaseIdMissing``, ``LeaseIdMismatchWithBlobOperation``), and one with a lease id on an unleased blob too
(``LeaseNotPresentWithBlobOperation``, ``LeaseLost``); ``If-Match`` and ``If-None-Match`` hold for writes and
lease actions; lease actions leave the ETag alone (as in Azurite), writes move it on. Errors are the service's XML with
``x-ms-error-code``. ``denied``: the caller has no data-plane role, so every call made with an Entra ID token
answers 403 ``AuthorizationPermissionMismatch`` (a SAS or an account key, as the SDK's uploads use, still works).

``handle`` answers for the containers it created and for the blobs a lease call touched; anything else is
None, for the fake's own blob routes. Every state change happens under one lock: threads may race on it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from azure.core.rest._http_response_impl import HttpResponseImpl
from azure.core.utils import CaseInsensitiveDict

_MESSAGES = {
    "AuthorizationPermissionMismatch": "This request is not authorized to perform this operation using this "
                                       "permission.",
    "BlobAlreadyExists": "The specified blob already exists.",
    "BlobNotFound": "The specified blob does not exist.",
    "ConditionNotMet": "The condition specified using HTTP conditional header(s) is not met.",
    "ContainerAlreadyExists": "The specified container already exists.",
    "ContainerNotFound": "The specified container does not exist.",
    "InvalidHeaderValue": "The value for one of the HTTP headers is not in the correct format.",
    "LeaseAlreadyPresent": "There is already a lease present.",
    "LeaseIdMismatchWithBlobOperation": "The lease ID specified did not match the lease ID for the blob.",
    "LeaseIdMismatchWithLeaseOperation": "The lease ID specified did not match the lease ID for the blob.",
    "LeaseIdMissing": "There is currently a lease on the blob and no lease ID was specified in the request.",
    "LeaseIsBreakingAndCannotBeAcquired": "The lease ID matched, but the lease is currently in breaking state "
                                          "and cannot be acquired until it is broken.",
    "LeaseIsBreakingAndCannotBeChanged": "The lease ID matched, but the lease is breaking and cannot be changed.",
    "LeaseIsBrokenAndCannotBeRenewed": "The lease ID matched, but the lease has been broken explicitly and "
                                       "cannot be renewed.",
    "LeaseLost": "A lease ID was specified, but the lease for the blob has expired.",
    "LeaseNotPresentWithBlobOperation": "There is currently no lease on the blob.",
    "LeaseNotPresentWithLeaseOperation": "There is currently no lease on the blob.",
    "MissingRequiredHeader": "An HTTP header that's mandatory for this request is not specified.",
}
_MODIFIED = "Sun, 22 Nov 2026 10:00:00 GMT"
_META = "x-ms-meta-"


class _Raw:
    def close(self) -> None:
        pass


class _Refused(Exception):
    def __init__(self, status: int, code: str) -> None:
        super().__init__(code)
        self.status, self.code = status, code


@dataclass
class _Blob:
    """A blob's lease and metadata. ``state``: available, leased, breaking or broken (expired is computed)."""

    etag: int = 1
    metadata: dict[str, str] = field(default_factory=dict)
    state: str = "available"
    lease_id: str | None = None
    duration: int = -1  # seconds of a fixed lease; -1: infinite
    ends: float | None = None  # when a fixed lease expires, or a breaking one is broken; None: infinite


class BlobLeases:
    """:param clock: seconds, for fixed leases and break periods."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.denied = False
        self.containers: set[str] = set()
        self.state: dict[str, _Blob] = {}  # "<container>/<blob>" -> its lease and metadata
        self._lock = threading.Lock()

    def handle(self, request: Any, recorded: Any, blobs: dict[str, bytes]) -> HttpResponseImpl | None:
        """The answer to a blob-host call this class owns (``recorded``: the fake's record of it, whose path is
        ``/<container>[/<blob>]``; ``blobs``: the fake's contents by ``<container>/<blob>``), else None."""
        headers = CaseInsensitiveDict(recorded.headers)
        container, _, name = recorded.path.strip("/").partition("/")
        path, comp = f"{container}/{name}", recorded.query.get("comp")
        if self.denied and headers.get("authorization", "").startswith("Bearer "):
            return _answer(request, 403, code="AuthorizationPermissionMismatch", body=recorded.method != "HEAD")
        with self._lock:
            try:
                if not name and recorded.method == "PUT" and recorded.query.get("restype") == "container":
                    return self._create_container(request, container)
                if not name or not (comp == "lease" or container in self.containers or path in self.state):
                    return None
                if recorded.method == "PUT" and comp == "lease":
                    return self._lease(request, headers, container, path, blobs)
                if recorded.method == "PUT" and comp == "metadata":
                    return self._set_metadata(request, headers, path, blobs)
                if recorded.method == "PUT" and comp is None:
                    return self._put_blob(request, headers, path, blobs, recorded.body)
                if recorded.method == "HEAD" and comp is None:
                    return self._properties(request, path, blobs)
                return None
            except _Refused as refused:
                return _answer(request, refused.status, code=refused.code, body=recorded.method != "HEAD")

    # -- containers and blobs -------------------------------------------------------------------------
    def _create_container(self, request: Any, container: str) -> HttpResponseImpl:
        if container in self.containers:
            raise _Refused(409, "ContainerAlreadyExists")
        self.containers.add(container)
        return _answer(request, 201, {"ETag": '"0x1"', "Last-Modified": _MODIFIED})

    def _put_blob(self, request: Any, headers: Mapping[str, str], path: str, blobs: dict[str, bytes],
                  content: bytes) -> HttpResponseImpl:
        if "x-ms-blob-type" not in headers:
            raise _Refused(400, "MissingRequiredHeader")
        blob = self._write(headers, path, blobs, exists=False)
        blobs[path] = content
        blob.metadata = _metadata(headers)
        return _answer(request, 201, _written(blob))

    def _set_metadata(self, request: Any, headers: Mapping[str, str], path: str,
                      blobs: dict[str, bytes]) -> HttpResponseImpl:
        blob = self._write(headers, path, blobs, exists=True)
        blob.metadata = _metadata(headers)
        return _answer(request, 200, _written(blob))

    def _properties(self, request: Any, path: str, blobs: dict[str, bytes]) -> HttpResponseImpl:
        if path not in blobs:
            raise _Refused(404, "BlobNotFound")
        blob = self._blob(path)
        state = self._state(blob)
        extra = {"x-ms-lease-duration": "infinite" if blob.duration == -1 else "fixed"} if state == "leased" else {}
        return _answer(request, 200, {
            "Content-Length": str(len(blobs[path])), "Content-Type": "application/octet-stream", **extra,
            "ETag": _etag(blob), "Last-Modified": _MODIFIED, "x-ms-blob-type": "BlockBlob", "x-ms-lease-state": state,
            "x-ms-lease-status": "locked" if state in ("leased", "breaking") else "unlocked",
            **{f"x-ms-meta-{k}": v for k, v in blob.metadata.items()},
        })

    def _write(self, headers: Mapping[str, str], path: str, blobs: dict[str, bytes], *, exists: bool) -> _Blob:
        """The blob a write may change (its ETag moved on), or the service's refusal: its conditions, then
        its lease (Azurite's order)."""
        if exists and path not in blobs:
            raise _Refused(404, "BlobNotFound")
        blob = self._blob(path)
        if headers.get("if-none-match") == "*" and path in blobs:
            raise _Refused(409, "BlobAlreadyExists")
        self._conditions(headers, blob, path in blobs)
        state, given = self._state(blob), headers.get("x-ms-lease-id")
        if state in ("leased", "breaking") and not given:
            raise _Refused(412, "LeaseIdMissing")
        if state in ("leased", "breaking") and given != blob.lease_id:
            raise _Refused(412, "LeaseIdMismatchWithBlobOperation")
        if state not in ("leased", "breaking") and given:
            raise _Refused(412, "LeaseNotPresentWithBlobOperation" if state == "available" else "LeaseLost")
        blob.etag += 1
        return blob

    # -- leases ---------------------------------------------------------------------------------------
    def _lease(self, request: Any, headers: Mapping[str, str], container: str, path: str,
               blobs: dict[str, bytes]) -> HttpResponseImpl:
        if path not in blobs:
            known = container in self.containers or any(k.startswith(f"{container}/") for k in blobs)
            raise _Refused(404, "BlobNotFound" if known else "ContainerNotFound")
        blob = self._blob(path)
        self._conditions(headers, blob, True)
        action, state = headers.get("x-ms-lease-action"), self._state(blob)
        if action == "acquire":
            self._acquire(blob, state, _int(headers.get("x-ms-lease-duration")), headers.get("x-ms-proposed-lease-id"))
            return _answer(request, 201, _lease_headers(blob, with_id=True))
        if action == "break":
            period = headers.get("x-ms-lease-break-period")
            left = self._break(blob, state, None if period is None else _int(period))
            return _answer(request, 202, {**_lease_headers(blob), "x-ms-lease-time": str(left)})
        if action not in ("renew", "change", "release"):
            raise _Refused(400, "InvalidHeaderValue")
        self._check_id(blob, state, action, headers)
        if action == "release":
            blob.state, blob.lease_id, blob.ends = "available", None, None
            return _answer(request, 200, _lease_headers(blob))
        if action == "renew":
            self._renew(blob, state)
        else:
            self._change(blob, state, headers["x-ms-proposed-lease-id"])
        return _answer(request, 200, _lease_headers(blob, with_id=True))

    def _acquire(self, blob: _Blob, state: str, duration: int, proposed: str | None) -> None:
        if duration != -1 and not 15 <= duration <= 60:
            raise _Refused(400, "InvalidHeaderValue")
        if state == "breaking":
            raise _Refused(409, "LeaseIsBreakingAndCannotBeAcquired" if proposed == blob.lease_id
                           else "LeaseAlreadyPresent")
        if state == "leased" and proposed != blob.lease_id:  # the same proposed id renews, with the new duration
            raise _Refused(409, "LeaseAlreadyPresent")
        blob.state, blob.lease_id, blob.duration = "leased", proposed or str(uuid.uuid4()), duration
        blob.ends = None if duration == -1 else self.clock() + duration

    def _break(self, blob: _Blob, state: str, period: int | None) -> int:
        """Break now, after ``period`` seconds, or (None) when a fixed lease would end: the seconds left."""
        if period is not None and not 0 <= period <= 60:
            raise _Refused(400, "InvalidHeaderValue")
        if state in ("available", "expired"):
            raise _Refused(409, "LeaseNotPresentWithLeaseOperation")
        if state == "broken":
            return 0
        now = self.clock()
        ends = blob.ends if period is None else min(now + period, blob.ends or now + period)
        if ends is None or ends <= now:  # an infinite lease without a period breaks at once
            blob.state, blob.ends = "broken", None
            return 0
        blob.state, blob.ends = "breaking", ends
        return round(ends - now)

    def _check_id(self, blob: _Blob, state: str, action: str, headers: Mapping[str, str]) -> None:
        """Renew, change and release name the lease (change may name the proposed id, as a retry would)."""
        given, proposed = headers.get("x-ms-lease-id"), headers.get("x-ms-proposed-lease-id")
        if not given or (action == "change" and not proposed):
            raise _Refused(400, "MissingRequiredHeader")
        if action == "change" and state == "available":
            raise _Refused(409, "LeaseNotPresentWithLeaseOperation")
        if state == "available" or blob.lease_id not in ((given, proposed) if action == "change" else (given,)):
            raise _Refused(409, "LeaseIdMismatchWithLeaseOperation")

    def _renew(self, blob: _Blob, state: str) -> None:
        if state in ("breaking", "broken"):
            raise _Refused(409, "LeaseIsBrokenAndCannotBeRenewed")
        blob.state = "leased"  # an expired fixed lease too, for another full duration
        blob.ends = None if blob.duration == -1 else self.clock() + blob.duration

    def _change(self, blob: _Blob, state: str, proposed: str) -> None:
        if state == "breaking":
            raise _Refused(409, "LeaseIsBreakingAndCannotBeChanged")
        if state in ("broken", "expired"):
            raise _Refused(409, "LeaseNotPresentWithLeaseOperation")
        blob.lease_id = proposed

    # -- helpers ---------------------------------------------------------------------------------------
    def _blob(self, path: str) -> _Blob:
        return self.state.setdefault(path, _Blob())

    def _state(self, blob: _Blob) -> str:
        """The lease's state now: a fixed lease past its end is expired, a breaking one past its end broken."""
        if blob.ends is not None and blob.ends <= self.clock():
            if blob.state == "breaking":
                blob.state, blob.ends = "broken", None
            elif blob.state == "leased":
                return "expired"
        return blob.state

    def _conditions(self, headers: Mapping[str, str], blob: _Blob, exists: bool) -> None:
        match, none_match = headers.get("if-match"), headers.get("if-none-match")
        if (match == "*" and not exists) or (match and match != "*" and match != _etag(blob)):
            raise _Refused(412, "ConditionNotMet")
        if (none_match == "*" and exists) or (none_match and none_match == _etag(blob)):
            raise _Refused(412, "ConditionNotMet")


def _etag(blob: _Blob) -> str:
    return f'"0x8DC{blob.etag:012X}"'


def _written(blob: _Blob) -> dict[str, str]:
    return {"ETag": _etag(blob), "Last-Modified": _MODIFIED, "x-ms-request-server-encrypted": "true"}


def _lease_headers(blob: _Blob, *, with_id: bool = False) -> dict[str, str]:
    return {"ETag": _etag(blob), "Last-Modified": _MODIFIED, **({"x-ms-lease-id": str(blob.lease_id)} if with_id else {})}


def _metadata(headers: Mapping[str, str]) -> dict[str, str]:
    """The ``x-ms-meta-*`` headers, their names as sent (metadata names keep their case)."""
    return {k[len(_META):]: v for k, v in headers.items() if k.lower().startswith(_META)}


def _int(text: str | None) -> int:
    if text is None:
        raise _Refused(400, "MissingRequiredHeader")
    try:
        return int(text)
    except ValueError:
        raise _Refused(400, "InvalidHeaderValue") from None


def _answer(request: Any, status: int, fields: Mapping[str, str] | None = None, *, code: str | None = None,
            body: bool = True) -> HttpResponseImpl:
    """The service's answer: ``code`` as ``x-ms-error-code`` and, but to a HEAD, as its XML error body."""
    content = b""
    headers = {"x-ms-request-id": str(uuid.uuid4()), "x-ms-version": "2025-01-05", **(fields or {})}
    if code:
        headers["x-ms-error-code"] = code
        if body:
            content = (f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{_MESSAGES[code]}'
                       f"\nRequestId:{headers['x-ms-request-id']}\nTime:2026-11-22T10:00:00.0000000Z</Message>"
                       f"</Error>").encode()
            headers["Content-Type"] = "application/xml"
    headers["Content-Length"] = headers.get("Content-Length", str(len(content)))
    response = HttpResponseImpl(
        request=request, internal_response=_Raw(), status_code=status, reason="OK" if status < 400 else "Error",
        content_type=headers.get("Content-Type", ""), headers=CaseInsensitiveDict(headers),
        stream_download_generator=lambda pipeline, response, **kwargs: iter([content]),
    )
    response._content = content
    response._is_stream_consumed = True
    return response
