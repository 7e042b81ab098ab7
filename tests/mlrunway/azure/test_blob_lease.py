"""The rollout lease as a blob lease (mlrunway/azure/lease.py), through azure-storage-blob's real clients over the
fake service with Blob Storage's leases plugged in (fake_blob_lease.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError
from azure.storage.blob import BlobLeaseClient, BlobServiceClient

from mlrunway.azure.lease import CONTAINER, BlobLease, LeaseUnavailable, lease_id
from tests.mlrunway.azure.fake_azureml import BLOB_HOST, FakeAzureML, FakeCredential

ENDPOINT = "digits-prod"
NOON = datetime(2026, 11, 22, 12, 0, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def storage(fake: FakeAzureML) -> BlobServiceClient:
    return BlobServiceClient(account_url=f"https://{BLOB_HOST}", credential=FakeCredential(), transport=fake)


def leases(fake: FakeAzureML, clock: Clock) -> BlobLease:
    """One run's: its own storage client, as each Airflow task has."""
    return BlobLease(storage(fake), clock=clock)


def holder_of(fake: FakeAzureML, endpoint: str = ENDPOINT) -> str | None:
    blob = fake.leases.state.get(f"{CONTAINER}/{endpoint}.lease")
    return blob.metadata.get("holder") if blob and blob.state == "leased" else None


def breaks(fake: FakeAzureML) -> int:
    return sum(r.headers.get("x-ms-lease-action") == "break" for r in fake.sent("PUT", BLOB_HOST))


# -- the lease ---------------------------------------------------------------------------------------------
def test_lease_is_granted_renewed_by_its_holder_and_refused_to_another(fake: FakeAzureML, clock: Clock) -> None:
    assert leases(fake, clock).lease(ENDPOINT, "run-1", 600) is None
    assert fake.sent("PUT", f"{BLOB_HOST}/{CONTAINER}$")  # the container, made on the first lease
    clock.now += 300
    assert leases(fake, clock).lease(ENDPOINT, "run-1", 600) is None  # renewed until 12:15
    assert leases(fake, clock).lease(ENDPOINT, "run-2", 600) == "run-1 (until 12:15:00 UTC)"
    blob = fake.leases.state[f"{CONTAINER}/{ENDPOINT}.lease"]
    assert (blob.lease_id, blob.duration, holder_of(fake)) == (lease_id("run-1"), -1, "run-1")
    assert leases(fake, clock).lease("digits-staging", "run-2", 600) is None  # one lease per endpoint


def test_expired_lease_is_broken_and_taken_by_the_next_holder_once(fake: FakeAzureML, clock: Clock) -> None:
    assert leases(fake, clock).lease(ENDPOINT, "run-1", 60) is None
    clock.now += 61
    assert leases(fake, clock).lease(ENDPOINT, "run-2", 600) is None
    assert leases(fake, clock).lease(ENDPOINT, "run-3", 600) == "run-2 (until 12:11:01 UTC)"
    assert leases(fake, clock).lease(ENDPOINT, "run-1", 600) == "run-2 (until 12:11:01 UTC)"  # too late to renew
    assert (breaks(fake), holder_of(fake)) == (1, "run-2")


def race(fake: FakeAzureML, clock: Clock, endpoint: str, runs: list[str]) -> dict[str, str | None]:
    """Each run asks for the lease on its own thread with its own client, all let go at once."""
    clients = {run: leases(fake, clock) for run in runs}
    start = threading.Barrier(len(runs))

    def ask(run: str) -> str | None:
        start.wait()
        return clients[run].lease(endpoint, run, 600)

    with ThreadPoolExecutor(len(runs)) as pool:
        return dict(zip(runs, pool.map(ask, runs), strict=True))


@pytest.mark.parametrize("expired", [False, True], ids=["new-endpoint", "expired-lease"])
def test_runs_starting_in_the_same_second_exactly_one_proceeds(fake: FakeAzureML, clock: Clock, expired: bool) -> None:
    for round_ in range(10):  # ten races of 8: the interleavings differ each time
        endpoint, runs = f"race-{round_}", [f"run-{round_}-{i}" for i in range(8)]
        if expired:
            assert leases(fake, clock).lease(endpoint, "old-run", -1) is None
        answers = race(fake, clock, endpoint, runs)
        granted = [run for run, answer in answers.items() if answer is None]
        assert len(granted) == 1, answers
        assert holder_of(fake, endpoint) == granted[0]
        other = next(run for run in runs if run != granted[0])
        assert leases(fake, clock).lease(endpoint, other, 600) == f"{granted[0]} (until 12:10:00 UTC)"


def test_release_by_another_holder_does_nothing_and_by_the_holder_frees_it(fake: FakeAzureML, clock: Clock) -> None:
    leases(fake, clock).release(ENDPOINT, "run-1")  # no blob yet: nothing to give back
    assert leases(fake, clock).lease(ENDPOINT, "run-1", 600) is None
    leases(fake, clock).release(ENDPOINT, "run-2")
    assert holder_of(fake) == "run-1"
    leases(fake, clock).release(ENDPOINT, "run-1")
    blob = fake.leases.state[f"{CONTAINER}/{ENDPOINT}.lease"]
    assert (blob.state, blob.metadata) == ("available", {})
    assert leases(fake, clock).lease(ENDPOINT, "run-2", 600) is None
    assert breaks(fake) == 0


def test_release_after_the_lease_was_broken_and_taken_leaves_the_new_holder(fake: FakeAzureML, clock: Clock) -> None:
    assert leases(fake, clock).lease(ENDPOINT, "run-1", 60) is None
    clock.now += 61
    assert leases(fake, clock).lease(ENDPOINT, "run-2", 600) is None
    leases(fake, clock).release(ENDPOINT, "run-1")
    assert holder_of(fake) == "run-2"


def test_without_the_data_plane_role_the_lease_is_unavailable(fake: FakeAzureML, clock: Clock) -> None:
    fake.leases.denied = True
    for call in (lambda: leases(fake, clock).lease(ENDPOINT, "run-1", 600),
                 lambda: leases(fake, clock).release(ENDPOINT, "run-1")):
        with pytest.raises(LeaseUnavailable, match=r"stmlrunway refused .*\(AuthorizationPermissionMismatch\): give "
                                                   r"the azure_ml connection's identity the Storage Blob Data "
                                                   r"Contributor role"):
            call()


def test_for_workspace_leases_in_the_default_datastores_account(fake: FakeAzureML, azure: Any, clock: Clock) -> None:
    lease = BlobLease.for_workspace(azure.client, azure.credential, **azure.transport)
    assert lease.service.url == f"https://{BLOB_HOST}/"
    assert lease.lease(ENDPOINT, "run-1", 600) is None
    assert holder_of(fake) == "run-1"
    assert all(r.headers["Authorization"] == f"Bearer {FakeCredential.TOKEN}" for r in fake.sent("PUT", BLOB_HOST))


# -- the fake, as the Lease Blob documentation's state table says -----------------------------------------
A, B = lease_id("a"), lease_id("b")


def _code(call: Any) -> tuple[int, str] | None:
    try:
        call()
    except HttpResponseError as exc:
        return exc.status_code, getattr(exc.error_code, "value", exc.error_code)
    return None


@pytest.fixture
def blob(fake: FakeAzureML) -> Any:
    service = storage(fake)
    service.create_container("c")
    client = service.get_blob_client("c", "b")
    client.upload_blob(b"x")
    return client


@pytest.mark.parametrize(("steps", "expected"), [
    (["acquire A", "acquire B"], (409, "LeaseAlreadyPresent")),
    (["acquire A", "acquire A", "renew A", "change A B", "release B"], None),
    (["acquire A", "renew B"], (409, "LeaseIdMismatchWithLeaseOperation")),
    (["acquire A", "release B"], (409, "LeaseIdMismatchWithLeaseOperation")),
    (["renew A"], (409, "LeaseIdMismatchWithLeaseOperation")),
    (["break"], (409, "LeaseNotPresentWithLeaseOperation")),
    (["acquire A", "write"], (412, "LeaseIdMissing")),
    (["acquire A", "write B"], (412, "LeaseIdMismatchWithBlobOperation")),
    (["write A"], (412, "LeaseNotPresentWithBlobOperation")),
    (["acquire A", "break", "write A"], (412, "LeaseLost")),
    (["acquire A", "break", "renew A"], (409, "LeaseIsBrokenAndCannotBeRenewed")),
    (["acquire A", "break", "write", "acquire B", "write B"], None),
    (["acquire A", "write A", "break stale-etag"], (412, "ConditionNotMet")),
], ids=lambda v: " / ".join(v) if isinstance(v, list) else None)
def test_fake_leases_answer_as_the_service(blob: Any, steps: list[str], expected: tuple[int, str] | None) -> None:
    etag = blob.get_blob_properties().etag
    ids = {"A": A, "B": B}
    actions = {
        "acquire": lambda who: BlobLeaseClient(blob, ids[who]).acquire(lease_duration=-1),
        "renew": lambda who: BlobLeaseClient(blob, ids[who]).renew(),
        "release": lambda who: BlobLeaseClient(blob, ids[who]).release(),
        "change": lambda who: BlobLeaseClient(blob, ids[who[0]]).change(ids[who[2]]),
        "break": lambda how: BlobLeaseClient(blob).break_lease(
            lease_break_period=0, **({"etag": etag, "match_condition": MatchConditions.IfNotModified} if how else {})),
        "write": lambda who: blob.set_blob_metadata({"k": "v"}, lease=ids[who] if who else None),
    }
    answers = [_code(lambda s=step: actions[s.split(" ")[0]](s.partition(" ")[2])) for step in steps]
    assert answers[:-1] == [None] * (len(steps) - 1)
    assert answers[-1] == expected


def test_fake_fixed_leases_expire_and_breaking_ones_break(fake: FakeAzureML, blob: Any) -> None:
    fake.leases.clock = clock = Clock(0.0)
    BlobLeaseClient(blob, A).acquire(lease_duration=15)
    assert blob.get_blob_properties().lease.state == "leased"
    clock.now = 15.0
    assert blob.get_blob_properties().lease.state == "expired"
    BlobLeaseClient(blob, B).acquire(lease_duration=60)
    assert BlobLeaseClient(blob).break_lease(lease_break_period=10) == 10
    assert _code(lambda: BlobLeaseClient(blob, A).acquire(lease_duration=-1)) == (409, "LeaseAlreadyPresent")
    clock.now = 25.0
    assert blob.get_blob_properties().lease.state == "broken"


def test_fake_containers_and_blobs_exist_once(fake: FakeAzureML, blob: Any) -> None:
    with pytest.raises(ResourceExistsError, match="ContainerAlreadyExists"):
        storage(fake).create_container("c")
    with pytest.raises(ResourceExistsError, match="BlobAlreadyExists"):
        blob.upload_blob(b"y", overwrite=False)
    blob.upload_blob(b"y", overwrite=True, metadata={"Kept": "case"})
    assert (fake.blobs["c/b"], blob.get_blob_properties().metadata) == (b"y", {"Kept": "case"})


def test_through_the_backend_two_runs_leasing_at_once_one_proceeds_and_the_tag_records_it(fake, production):
    """Issue 29, 9, as a rollout takes it: of 6 runs leasing the endpoint in the same instant, exactly one holds it
    (the blob lease decides), and the endpoint's tag names that one for whoever reads the endpoint."""
    import json

    barrier = threading.Barrier(6)

    def run(holder: str) -> str | None:
        barrier.wait()
        return production.endpoints.lease(ENDPOINT, holder, 600)

    with ThreadPoolExecutor(6) as pool:
        answers = dict(zip([f"run-{i}" for i in range(6)], pool.map(run, [f"run-{i}" for i in range(6)]), strict=True))
    winners = [holder for holder, held in answers.items() if held is None]
    assert len(winners) == 1
    assert json.loads(fake.resource("onlineEndpoints", ENDPOINT)["tags"]["mlrunway.lease"])["holder"] == winners[0]
    production.endpoints.release(ENDPOINT, winners[0])
    assert production.endpoints.lease(ENDPOINT, "run-next", 600) is None


def test_without_the_storage_role_the_backend_falls_back_to_the_tag_and_says_which_role(fake, production, caplog):
    fake.leases.denied = True
    assert production.endpoints.lease(ENDPOINT, "run-a", 600) is None
    assert "Storage Blob Data Contributor" in caplog.text and "the endpoint's tag alone" in caplog.text
    assert production.endpoints.lease(ENDPOINT, "run-b", 600).startswith("run-a (until")
