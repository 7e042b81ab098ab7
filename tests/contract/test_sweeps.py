"""Sweeps, as the contract (:meth:`mlrunway.backend.protocol.Jobs.sweep_result`) says every backend runs them: the
local backend runs real trials under its controller, the services are scripted with what those trials log."""

from __future__ import annotations

import pytest

from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import JobStatus
from mlrunway.errors import NotFound, SpecError
from mlrunway.specs import BanditPolicy
from tests.contract.conftest import Driver, completed

CURVES = [[0.5, 0.6], [0.7, 0.9], [0.4, 0.8]]  # trial 1 is the best; the best of each is its last value


def test_a_sweeps_result_lists_its_trials_in_index_order_and_names_the_best(backend: Backend, driver: Driver) -> None:
    driver.sweep(backend, "ctr-sweep", CURVES)
    info = backend.jobs.wait("ctr-sweep", timeout=driver.wait_s)
    assert (info.kind, info.status) == ("sweep", JobStatus.COMPLETED), info.error
    result = backend.jobs.sweep_result("ctr-sweep")
    assert (result.name, result.status, result.objective.primary_metric) == ("ctr-sweep", JobStatus.COMPLETED,
                                                                              "best_val_acc")
    assert [t.params["curve"] for t in result.trials] == [",".join(map(str, c)) for c in CURVES]
    assert [t.history for t in result.trials] == [tuple(c) for c in CURVES]
    assert all(t.status is JobStatus.COMPLETED and not t.stopped_early for t in result.trials)
    assert result.best_trial == result.trials[1].name


def test_a_trial_the_policy_stops_is_marked_stopped_early(backend: Backend, driver: Driver) -> None:
    policy = BanditPolicy(slack_factor=0.2, evaluation_interval=1, delay_evaluation=0)
    driver.sweep(backend, "ctr-stops", [[0.9, 0.9], [0.1] * 40], policy=policy, stops={1: 1},
                 pause=0.3)  # the bad trial still runs when it is judged
    assert backend.jobs.wait("ctr-stops", timeout=driver.wait_s).status is JobStatus.COMPLETED
    good, bad = backend.jobs.sweep_result("ctr-stops").trials
    assert (good.status, good.stopped_early) == (JobStatus.COMPLETED, False)
    assert (bad.status, bad.stopped_early) == (JobStatus.CANCELED, True), bad.note
    assert bad.early_termination is not None and bad.early_termination["interval"] == 1


def test_sweep_result_of_a_command_job_raises_spec_error_naming_it(backend: Backend, driver: Driver) -> None:
    completed(backend, "ctr-command", driver)
    with pytest.raises(SpecError, match="ctr-command: is a command job, not a sweep"):
        backend.jobs.sweep_result("ctr-command")


def test_sweep_result_of_a_job_that_does_not_exist_raises_not_found(backend: Backend) -> None:
    with pytest.raises(NotFound, match="ctr-missing"):
        backend.jobs.sweep_result("ctr-missing")

