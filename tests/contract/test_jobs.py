"""Jobs, as the contract (:class:`mlrunway.backend.protocol.Jobs`) says every backend runs them."""

from __future__ import annotations

import pytest

from mlrunway.backend.protocol import Backend, RunMetrics
from mlrunway.backend.types import JobStatus
from mlrunway.errors import JobTimedOut, NotFound, SpecError
from mlrunway.specs.job import Input
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


def test_a_job_whose_script_fails_ends_failed_with_an_error_that_says_why(backend: Backend, driver: Driver) -> None:
    driver.failing(backend, "ctr-fails", "contract job failed on purpose")
    info = backend.jobs.wait("ctr-fails", timeout=driver.wait_s)
    assert info.status is JobStatus.FAILED and info.error is not None
    assert "contract job failed on purpose" in info.error


def test_a_running_job_canceled_ends_canceled_and_wait_returns_it(backend: Backend, driver: Driver) -> None:
    driver.running(backend, "ctr-cancel")
    assert backend.jobs.get("ctr-cancel").status is not JobStatus.CANCELED
    canceled = backend.jobs.cancel("ctr-cancel", reason="the contract says stop")
    assert (canceled.name, canceled.status) == ("ctr-cancel", JobStatus.CANCELED)
    assert backend.jobs.wait("ctr-cancel", timeout=driver.wait_s).status is JobStatus.CANCELED


def test_wait_past_its_timeout_cancels_the_job_and_raises_job_timed_out(backend: Backend, driver: Driver) -> None:
    driver.running(backend, "ctr-slow")
    with pytest.raises(JobTimedOut, match="ctr-slow"):
        backend.jobs.wait("ctr-slow", timeout=0.3)
    assert backend.jobs.wait("ctr-slow", timeout=driver.wait_s).status is JobStatus.CANCELED


def test_logs_of_a_completed_job_are_lines_holding_what_it_printed(backend: Backend, driver: Driver) -> None:
    driver.printing(backend, "ctr-logs", "contract line printed")
    assert backend.jobs.wait("ctr-logs", timeout=driver.wait_s).status is JobStatus.COMPLETED
    lines = list(backend.jobs.logs("ctr-logs"))
    assert all(isinstance(line, str) and "\n" not in line for line in lines)
    assert "contract line printed" in lines


def test_metric_history_gives_every_value_logged_in_step_order(backend: Backend, driver: Driver) -> None:
    driver.logging(backend, "ctr-history", (0.5, 0.7, 0.6))
    assert backend.jobs.wait("ctr-history", timeout=driver.wait_s).status is JobStatus.COMPLETED
    assert backend.jobs.metric_history("ctr-history", "best_val_acc") == (0.5, 0.7, 0.6)
    assert backend.jobs.metrics("ctr-history")["best_val_acc"] == 0.6  # the latest
    assert backend.jobs.metric_history("ctr-history", "never_logged") == ()


def test_recover_of_an_ended_job_returns_its_info(backend: Backend, driver: Driver) -> None:
    completed(backend, "ctr-recover", driver)
    info = backend.jobs.recover("ctr-recover")
    assert (info.name, info.kind, info.status) == ("ctr-recover", "command", JobStatus.COMPLETED)


def test_validate_refuses_a_missing_input_path_naming_the_field_before_any_job(backend: Backend,
                                                                                driver: Driver) -> None:
    spec = driver.job_spec(inputs={"data": Input(path=str(driver.root / "no-such-folder"), type="uri_folder")})
    with pytest.raises(SpecError, match="command_job.inputs.data"):
        backend.jobs.validate(spec)
    backend.jobs.validate(driver.job_spec())  # a spec it can run passes
    assert backend.jobs.list() == []
