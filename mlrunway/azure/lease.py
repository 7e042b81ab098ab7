"""An endpoint's rollout lease as a blob lease in the workspace's default storage: atomic, where a tag is not.

One blob per endpoint (``mlrunway-leases/<endpoint>.lease``) holds an infinite blob lease, whose id is derived
from the holder, so its holder re-acquiring renews it and anyone else gets the service's 409. The blob's
metadata says who holds it and until when (``holder``, ``until`` in epoch seconds), written under the lease. A
lease past its ``until`` is broken and taken by the next run; the break is conditional on the blob's ETag, so
of the runs that saw it expired only one takes it (a later write of the metadata moves the ETag on).

It needs the Storage Blob Data Contributor role on the workspace's storage account: without it the service
answers 403 and :class:`LeaseUnavailable` says so, and :class:`RolloutLease` falls back to the endpoint's tag.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from azure.ai.ml import MLClient
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.storage.blob import BlobClient, BlobLeaseClient, BlobServiceClient

from mlrunway.azure.writes import RetriedWrites
from mlrunway.errors import MlrunwayError

__all__ = ["CONTAINER", "LEASE_TAG", "ROLE", "BlobLease", "LeaseUnavailable", "RolloutLease", "lease_id"]

CONTAINER = "mlrunway-leases"
LEASE_TAG = "mlrunway.lease"
ROLE = "Storage Blob Data Contributor"
_HOLDERS = uuid.UUID("8f6d3c2e-5b1a-4e7f-9c0d-2a4b6e8f1c3d")  # the namespace of the holders' lease ids
log = logging.getLogger(__name__)


class LeaseUnavailable(MlrunwayError):
    """The workspace's storage refused the lease blob (403): the caller lacks its data-plane role."""


def lease_id(holder: str) -> str:
    """The blob lease id of ``holder``: the same on every call, so that acquiring again renews."""
    return str(uuid.uuid5(_HOLDERS, holder))


class BlobLease:
    """The endpoints' rollout leases in one storage account, as the Backend protocol's ``lease`` and ``release``.

    :param service: a client of the storage account (``for_workspace`` builds the workspace's).
    :param clock: epoch seconds now.
    """

    def __init__(self, service: BlobServiceClient, *, container: str = CONTAINER,
                 clock: Callable[[], float] = time.time) -> None:
        self.service, self.container, self.clock = service, container, clock

    @classmethod
    def for_workspace(cls, ml_client: Any, credential: Any, **client_kwargs: Any) -> BlobLease:
        """The leases in the storage account of ``ml_client``'s default datastore, with the workspace's
        credential; ``client_kwargs`` go to the storage client (a ``transport`` in tests)."""
        store = ml_client.datastores.get_default()
        url = f"{store.protocol or 'https'}://{store.account_name}.blob.{store.endpoint or 'core.windows.net'}"
        return cls(BlobServiceClient(account_url=url, credential=credential, **client_kwargs))

    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """Take or renew ``endpoint``'s lease for ``holder`` until ``ttl_s`` from now: None; else who holds it."""
        blob = self._blob(endpoint)
        mine = BlobLeaseClient(blob, lease_id=lease_id(holder))
        with self._data_plane():
            held = self._acquire(blob, mine)
            if held is not None:
                return held
            try:
                blob.set_blob_metadata({"holder": holder, "until": f"{self.clock() + ttl_s:.0f}"}, lease=mine)
            except HttpResponseError as exc:  # 412: a run that saw it expired broke it before this write
                if exc.status_code != 412:
                    raise
                return self._holder(blob)
        return None

    def release(self, endpoint: str, holder: str) -> None:
        """Give ``endpoint``'s lease back if ``holder`` holds it, its metadata cleared."""
        blob = self._blob(endpoint)
        mine = BlobLeaseClient(blob, lease_id=lease_id(holder))
        with self._data_plane():
            try:
                if blob.get_blob_properties().metadata.get("holder") != holder:
                    return
                blob.set_blob_metadata({}, lease=mine)
                mine.release()
            except ResourceNotFoundError:
                return
            except HttpResponseError as exc:  # 409 or 412: broken since, and perhaps taken: not ours to give
                if exc.status_code not in (409, 412):
                    raise

    def _acquire(self, blob: BlobClient, mine: BlobLeaseClient) -> str | None:
        """Acquire (or renew) ``mine``, making the blob first, or breaking an expired lease: None, or who holds it."""
        try:
            mine.acquire(lease_duration=-1)
            return None
        except ResourceNotFoundError:  # the first rollout on this endpoint (or in this workspace)
            self._create(blob)
        except ResourceExistsError:  # 409 LeaseAlreadyPresent: another holder's
            properties = blob.get_blob_properties()
            if float(properties.metadata.get("until") or 0) > self.clock():
                return self._describe(properties.metadata)
            try:  # only if nobody took it since we read it expired
                BlobLeaseClient(blob).break_lease(lease_break_period=0, etag=properties.etag,
                                                  match_condition=MatchConditions.IfNotModified)
            except ResourceModifiedError:
                return self._holder(blob)
        try:
            mine.acquire(lease_duration=-1)
        except ResourceExistsError:  # another run got there first
            return self._holder(blob)
        return None

    def _create(self, blob: BlobClient) -> None:
        """The container and the empty blob, unless another run made them meanwhile."""
        with suppress(ResourceExistsError):
            self.service.create_container(self.container)
        with suppress(ResourceExistsError):
            blob.upload_blob(b"", overwrite=False)

    def _holder(self, blob: BlobClient) -> str:
        return self._describe(blob.get_blob_properties().metadata)

    def _describe(self, metadata: dict[str, str]) -> str:
        """Who holds the lease, as its metadata says; a lease taken whose metadata is not written yet (or still
        the expired holder's) is another run's, taking it now."""
        until = float(metadata.get("until") or 0)
        if not metadata.get("holder") or until <= self.clock():
            return "another run (taking the lease at this moment)"
        return f"{metadata['holder']} (until {datetime.fromtimestamp(until, UTC):%H:%M:%S} UTC)"

    def _blob(self, endpoint: str) -> BlobClient:
        return self.service.get_blob_client(self.container, f"{endpoint}.lease")

    @contextmanager
    def _data_plane(self) -> Iterator[None]:
        try:
            yield
        except HttpResponseError as exc:
            if exc.status_code != 403:
                raise
            code = getattr(exc, "error_code", None)  # set by azure-storage-blob: its enum, or None
            code = getattr(code, "value", code) or 403
            raise LeaseUnavailable(
                f"storage account {self.service.account_name} refused the rollout lease ({code}): "
                f"give the azure_ml connection's identity the {ROLE} role on it (and network access to it)") from exc


class RolloutLease:
    """The rollout lease: a blob lease in the workspace's default storage (atomic: of two runs starting in the
    same second, one proceeds), recorded as the endpoint's ``mlrunway.lease`` tag for anyone reading the
    endpoint. Without the Storage Blob Data Contributor role there, the tag alone, with a warning.

    :param ml: the workspace's ``MLClient`` (its endpoints, and its default datastore's storage account).
    :param credential: the workspace's credential, for the storage account.
    :param write: an endpoint's write, tried again while the endpoint is busy.
    :param transport: azure-core's transport, when given (tests pass the fake service).
    """

    def __init__(self, ml: MLClient, credential: Any, write: RetriedWrites, **transport: Any) -> None:
        self.ml, self.credential, self.write, self.transport = ml, credential, write, transport

    @cached_property
    def blob_lease(self) -> BlobLease | None:
        """The atomic lease in the workspace's default storage; None once refused."""
        return BlobLease.for_workspace(self.ml, self.credential, **self.transport)

    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """Take or renew the endpoint's lease for ``holder``: None, or who else holds it."""
        try:
            if self.blob_lease is not None and (held := self.blob_lease.lease(endpoint, holder, ttl_s)) is not None:
                return held
        except LeaseUnavailable as exc:
            self._tag_only(exc)
        held = self._tag_lease(endpoint, holder, ttl_s)
        if held is not None and self.blob_lease is not None:  # a run of an earlier mlrunway holds the tag alone
            self.blob_lease.release(endpoint, holder)
        return held

    def release(self, endpoint: str, holder: str) -> None:
        try:
            if self.blob_lease is not None:
                self.blob_lease.release(endpoint, holder)
        except LeaseUnavailable as exc:
            self._tag_only(exc)
        self._tag_release(endpoint, holder)

    def _tag_only(self, exc: LeaseUnavailable) -> None:
        log.warning("%s; until then the rollout lease is the endpoint's tag alone, which two runs starting in the "
                    "same seconds can both take", exc)
        self.blob_lease = None

    def _tag_lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """The lease as the endpoint's tag (``mlrunway.lease``: holder and expiry), written with the endpoint's
        update. A missing endpoint has nothing to interleave with: granted unwritten (the caller creates the
        endpoint and leases again). Read, then write: not atomic (the spec has no ETag on endpoints)."""
        current, held = self._lease_of(endpoint)
        if current is None:
            return None
        if held and held.get("holder") != holder and float(held.get("until", 0)) > time.time():
            return f"{held['holder']} (until {datetime.fromtimestamp(float(held['until']), UTC):%H:%M:%S} UTC)"
        current.tags = {**(current.tags or {}), LEASE_TAG: json.dumps({"holder": holder, "until": time.time() + ttl_s})}
        self.write(f"the lease of endpoint {endpoint}",
                   lambda: self.ml.online_endpoints.begin_create_or_update(current).result())
        return None

    def _tag_release(self, endpoint: str, holder: str) -> None:
        current, held = self._lease_of(endpoint)
        if current is not None and held and held.get("holder") == holder:
            current.tags = {k: v for k, v in (current.tags or {}).items() if k != LEASE_TAG}
            self.write(f"the lease of endpoint {endpoint}",
                       lambda: self.ml.online_endpoints.begin_create_or_update(current).result())

    def _lease_of(self, endpoint: str) -> tuple[Any, dict[str, Any] | None]:
        """The endpoint (None when it does not exist) and the lease its tag holds (None when there is none)."""
        try:
            current = self.ml.online_endpoints.get(endpoint)
        except ResourceNotFoundError:
            return None, None
        try:
            held = json.loads((current.tags or {}).get(LEASE_TAG, ""))
        except (TypeError, ValueError):  # no tag (""), or one that is not ours to read
            held = None
        return current, held if isinstance(held, dict) else None
