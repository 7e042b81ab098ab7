"""The optional capability protocols of :mod:`mlrunway.backend.protocol`: each behaves as its docstring says where a
backend has it, and is a declared skip naming it where the backend has not. Those of endpoints (Rollout, Shadow,
MeteredEndpoints) are in test_endpoints.py, on its shared endpoint; RunMetrics is in test_jobs.py."""

from __future__ import annotations

from pathlib import Path

from mlrunway.backend.protocol import (
    Artifacts,
    Backend,
    Leftovers,
    Metered,
    OutputFiles,
    Priced,
    StopRecords,
    Studio,
)
from mlrunway.backend.rates import RateCard
from tests.contract.conftest import Driver, completed, require


def test_metered_a_completed_jobs_usage_starts_before_it_ends(backend: Backend, driver: Driver) -> None:
    metered = require(backend, Metered)
    completed(backend, "ctr-metered", driver)
    usage = metered.usage("ctr-metered")
    assert usage is not None and usage.started is not None and usage.ended is not None
    assert usage.started <= usage.ended


def test_priced_gives_its_rate_card_for_no_sizes(backend: Backend) -> None:
    assert isinstance(require(backend, Priced).rates_for([]), RateCard)


def test_artifacts_logged_on_an_ended_jobs_run_are_listed_by_its_tracking_store(backend: Backend, driver: Driver,
                                                                                tmp_path: Path) -> None:
    artifacts = require(backend, Artifacts)
    completed(backend, "ctr-artifacts", driver)
    folder = tmp_path / "kept"
    folder.mkdir()
    (folder / "notes.txt").write_text("kept with the run")
    artifacts.log_artifacts("ctr-artifacts", folder, "extra")
    from mlflow.tracking import MlflowClient

    run_id = backend.jobs.get("ctr-artifacts").mlflow_run_id
    assert run_id
    listed = MlflowClient(artifacts.tracking_uri()).list_artifacts(run_id, "extra")
    assert [a.path for a in listed] == ["extra/notes.txt"]


def test_leftovers_after_a_job_has_ended_are_none(backend: Backend, driver: Driver) -> None:
    leftovers = require(backend, Leftovers)
    completed(backend, "ctr-leftover", driver)
    assert leftovers.leftovers() == []


def test_studio_links_a_job_to_a_page_naming_it(backend: Backend, driver: Driver) -> None:
    studio = require(backend, Studio)
    backend.jobs.submit("ctr-studio", driver.job_spec())
    link = studio.link("job", "ctr-studio")
    assert link.startswith("https://") and "ctr-studio" in link


def test_stop_records_a_reason_read_back_as_the_canceled_sweeps_budget_stop(backend: Backend, driver: Driver) -> None:
    records = require(backend, StopRecords)
    driver.sweep(backend, "ctr-stopped", [[0.5, 0.6]])
    records.record_stop("ctr-stopped", "the budget of 1.00 is spent")  # before the cancel, as the watcher does
    backend.jobs.cancel("ctr-stopped", reason="the budget of 1.00 is spent")
    assert backend.jobs.get("ctr-stopped").budget_stop == "the budget of 1.00 is spent"


def test_output_files_holds_the_files_that_exist_and_says_which_do_not(backend: Backend, driver: Driver) -> None:
    files = require(backend, OutputFiles)
    completed(backend, "ctr-outfiles", driver)
    base = backend.job_outputs("ctr-outfiles")
    assert files.output_exists(base, "model", "missing.txt") is False
    with files.output_files(base, "model", ["missing.txt"]) as folder:
        assert not (folder / "missing.txt").exists()
