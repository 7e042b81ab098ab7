"""Jobs, as the contract (:class:`mlrunway.backend.protocol.Jobs`) says every backend runs them."""

from __future__ import annotations

import pytest

from mlrunway.backend.protocol import Backend, RunMetrics
from mlrunway.backend.types import JobStatus
from mlrunway.errors import NotFound, SpecError
from tests.contract.conftest import Driver, completed, require


def test_get_of_a_job_that_does_not_exist_raises_not_found(backend: Backend) -> None:
    with pytest.raises(NotFound, match="ctr-missing"):
        backend.jobs.get("ctr-missing")


def test_a_submitted_job_is_read_back_by_its_name_and_kind(backend: Backend, driver: Driver) -> None:
    submitted = backend.jobs.submit("ctr-read", driver.job_spec())
    info = backend.jobs.get("ctr-read")
    assert (submitted.name, submitted.kind) == (info.name, info.kind) == ("ctr-read", "command")


def test_submitting_a_name_again_reattaches_to_the_job_and_starts_no_second_one(backend: Backend,
                                                                                driver: Driver) -> None:
    backend.jobs.submit("ctr-again", driver.job_spec())
    again = backend.jobs.submit("ctr-again", driver.job_spec(command="python job.py --another-try"))
    assert (again.name, again.kind) == ("ctr-again", "command")
    assert [job.name for job in backend.jobs.list("ctr-again")] == ["ctr-again"]


def test_list_returns_exactly_the_jobs_whose_names_start_with_the_prefix_in_name_order(backend: Backend,
                                                                                       driver: Driver) -> None:
    for name in ("ctr-b-2", "ctr-b-1", "ctr-a-1", "ctr-bb-1"):
        backend.jobs.submit(name, driver.job_spec())
    assert [job.name for job in backend.jobs.list("ctr-b-")] == ["ctr-b-1", "ctr-b-2"]
    assert [job.name for job in backend.jobs.list("ctr-")] == ["ctr-a-1", "ctr-b-1", "ctr-b-2", "ctr-bb-1"]
    assert backend.jobs.list("ctr-none-") == []


def test_wait_ends_completed_and_a_cancel_of_the_ended_job_changes_nothing(backend: Backend, driver: Driver) -> None:
    backend.jobs.submit("ctr-done", driver.job_spec())
    info = backend.jobs.wait("ctr-done", timeout=driver.wait_s)
    assert info.status is JobStatus.COMPLETED and info.status.is_terminal()
    canceled = backend.jobs.cancel("ctr-done", reason="too late")
    assert canceled.status is JobStatus.COMPLETED and canceled.name == "ctr-done"
    assert backend.jobs.get("ctr-done").status is JobStatus.COMPLETED


def test_a_completed_jobs_metrics_and_params_are_dicts(backend: Backend, driver: Driver) -> None:
    completed(backend, "ctr-metrics", driver)
    metrics, params = backend.jobs.metrics("ctr-metrics"), backend.jobs.params("ctr-metrics")
    assert isinstance(metrics, dict) and all(isinstance(v, float) for v in metrics.values())
    assert isinstance(params, dict) and all(isinstance(k, str) for k in params)


@pytest.mark.parametrize("bad", ["../../other/jobs/victim", "has space", "", "-leading-dash"],
                         ids=["path", "space", "empty", "dash"])
def test_a_bad_job_name_is_refused_naming_the_field_before_any_job(backend: Backend, driver: Driver,
                                                                   bad: str) -> None:
    with pytest.raises(SpecError, match="job.name"):
        backend.jobs.submit(bad, driver.job_spec())
    with pytest.raises(SpecError, match="job.name"):
        backend.jobs.get(bad)
    assert backend.jobs.list() == []


def test_metrics_logged_on_an_ended_jobs_run_are_read_back_with_its_own(backend: Backend, driver: Driver) -> None:
    run_metrics = require(backend, RunMetrics)
    completed(backend, "ctr-logged", driver)
    run_metrics.log_metrics("ctr-logged", {"cost": 1.5})
    assert backend.jobs.metrics("ctr-logged")["cost"] == 1.5
