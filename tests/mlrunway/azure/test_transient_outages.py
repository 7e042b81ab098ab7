"""A long wait outlives a transient failure (issue 57, 1), through the real MLClient against the fake service:
reads that still fail after azure-core's own retries (503, 429 with Retry-After, a dropped connection) are no
news, read again for up to the connection's transient_outage_s; past it the watch is lost, the job left running,
and a retry re-attaches to it."""

from __future__ import annotations

import asyncio
import time

import pytest

from mlrunway.airflow.triggers import DeploymentTrigger, JobTrigger
from mlrunway.backend.types import DeploymentSettings, JobStatus
from mlrunway.backend.waiting import Outage
from mlrunway.errors import Unavailable, WatchLost
from tests.conftest import REPO
from tests.mlrunway.azure.conftest import CONNECTION, ENDPOINT
from tests.mlrunway.azure.fake_azureml import WS_PATH, FakeCredential
from training.tutorial import train_job

JOB_READS = rf"{WS_PATH}/jobs/outage-job$"
FAILURES = [("503", 10), ("429", 10), ("reset", 10)]  # each beyond azure-core's own retries (3 a read)


@pytest.fixture
def quick(fake, tmp_path, monkeypatch):
    """The backend on the real MLClient with azure-core's retries quick (backoff 0: the fake answers at once), and
    the waits' own backoff in milliseconds; ``transient_outage_s`` as the test says."""
    import mlrunway.backend.waiting as waiting
    from mlrunway.azure.backend import AzureBackend

    monkeypatch.setattr(waiting, "BACKOFF_S", 0.001)

    def make(outage_s: float = 900.0):
        backend = AzureBackend.from_connection(
            {**CONNECTION, "cache_dir": str(tmp_path / "cache"), "transient_outage_s": str(outage_s)},
            credential=FakeCredential(), transport=fake, polling_interval=0, retry_backoff_factor=0.0)
        backend.jobs.poll_s = backend.endpoints.provision_poll_s = 0.0
        return backend

    return make


def first_event(trigger, backend):
    async def fixed():
        return backend

    trigger.backend = fixed

    async def run():
        async for event in trigger.run():
            return event.payload
    return asyncio.run(asyncio.wait_for(run(), timeout=60))


def test_a_watched_job_outlives_503s_then_429s_then_dropped_connections_and_ends_completed(fake, quick, small_digits):
    azure = quick()
    fake.steps = 4  # the job stays Running for a few reads: the outages hit it mid-run
    azure.jobs.submit("outage-job", train_job(str(REPO / "training"), str(small_digits), num_epochs=2))
    for kind, count in FAILURES:
        fake.inject(kind, count, JOB_READS)
    event = first_event(JobTrigger("aml", "outage-job", poll_interval_s=0.0), azure)
    assert (event["outcome"], event["status"]) == ("ended", "Completed")
    injected = [status for status, _, where in fake.faults if where.endswith("/jobs/outage-job")]
    assert injected == [503] * 10 + [429] * 10 + [0] * 10  # every one was sent and ridden out
    assert not fake.sent("POST", r"/jobs/outage-job/cancel")  # nothing was canceled on the way


def test_a_provisioning_deployment_and_a_non_deferred_wait_outlive_the_same(fake, quick, small_digits, tmp_path):
    azure = quick()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.onnx").write_bytes(b"onnx")
    azure.models.register("tiny", str(tmp_path / "model"))
    azure.endpoints.create_or_update(ENDPOINT)
    azure.endpoints.begin_create_or_update_deployment(ENDPOINT, "green",
                                                      DeploymentSettings(model="tiny:1", code_dir=str(REPO / "training")))
    for kind, count in FAILURES:
        fake.inject(kind, count, rf"{WS_PATH}/onlineEndpoints/{ENDPOINT}/deployments/green$")
    event = DeploymentTrigger("aml", ENDPOINT, "green", poll_interval_s=0.0).wait_here(azure)
    assert (event["outcome"], event["status"]) == ("ended", "Succeeded")
    azure.jobs.submit("outage-job", train_job(str(REPO / "training"), str(small_digits), num_epochs=2))
    for kind, count in FAILURES:
        fake.inject(kind, count, JOB_READS)
    info = azure.jobs.wait("outage-job", poll_s=0, outage_s=azure.capabilities.transient_outage_s)
    assert info.status is JobStatus.COMPLETED


def test_past_transient_outage_s_the_watch_is_lost_the_job_left_running_and_a_retry_re_attaches(fake, quick,
                                                                                                small_digits):
    azure = quick(outage_s=0.5)
    fake.steps = 1000  # Running throughout
    azure.jobs.submit("outage-job", train_job(str(REPO / "training"), str(small_digits), num_epochs=2))
    fake.inject("503", 10_000, JOB_READS)
    started = time.monotonic()
    event = first_event(JobTrigger("aml", "outage-job", poll_interval_s=0.0), azure)
    assert event["outcome"] == "lost" and time.monotonic() - started < 30
    assert event["error"].startswith("job outage-job may still be running on the azure backend: its status could "
                                     "not be read for ") and "HTTP 503: The service is temporarily unavailable" in \
        event["error"]
    assert not fake.sent("POST", r"/jobs/outage-job/cancel")  # left running, for the retry
    fake.outages.clear()
    from mlrunway.backend.attempts import Action, submit_or_reattach

    attempt = submit_or_reattach(azure.jobs, "outage-job", lambda name: pytest.fail(f"{name} submitted again"))
    assert attempt.action is Action.REATTACHED and attempt.job.name == "outage-job"


def test_an_outage_reads_again_after_the_services_retry_after_else_a_backoff_and_gives_up_at_its_bound():
    now = [0.0]
    outage = Outage("job j", "azure", 60.0, clock=lambda: now[0])
    assert outage.failed(Unavailable("HTTP 429", retry_after_s=7.0)) == 7.0
    now[0] = 30.0
    assert 0 < outage.failed(Unavailable("HTTP 503")) <= 4.0  # 2 s doubled once, jittered down to half
    now[0] = 58.0
    assert outage.failed(Unavailable("HTTP 503", retry_after_s=30.0)) == 2.0  # never past the bound
    now[0] = 61.0
    with pytest.raises(WatchLost, match=r"job j may still be running on the azure backend: its status could not be "
                                        r"read for 61 s \(HTTP 503\)"):
        outage.failed(Unavailable("HTTP 503"))
    outage.read()  # news again: the next outage starts from nothing
    assert outage.since is None and outage.failed(Unavailable("x", retry_after_s=1.0)) == 1.0
    assert outage.failed(Unavailable("HTTP 503", retry_after_s=30.0), left_s=0.5) == 0.5  # nor past the deadline
    with pytest.raises(WatchLost):  # at the deadline, unreadable: the work can be neither read nor stopped
        outage.failed(Unavailable("HTTP 503"), left_s=0.0)


def test_a_transient_outage_s_that_is_not_seconds_is_refused_naming_the_field(tmp_path):
    from mlrunway.azure.backend import AzureBackend
    from mlrunway.errors import SpecError

    with pytest.raises(SpecError, match=r"azure_ml connection.transient_outage_s: 'soon' is not a number of seconds"):
        AzureBackend.from_connection({**CONNECTION, "transient_outage_s": "soon", "cache_dir": str(tmp_path)},
                                     credential=FakeCredential())
    assert AzureBackend.from_connection({**CONNECTION, "cache_dir": str(tmp_path)},
                                        credential=FakeCredential()).capabilities.transient_outage_s == 900.0


