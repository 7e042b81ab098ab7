"""A sweep held to its budget on Azure ML, through the real MLClient against the fake service: the service starts
the trials, so the sweep's watcher cancels the sweep at the budget, the decision recorded first as a tag on the
sweep's run; every reader then reads the sweep as ended by its budget, and a retry re-attaches to it."""

from __future__ import annotations

import logging
import re
import time
from types import SimpleNamespace

import pytest

from mlrunway.airflow.triggers import SweepTrigger
from mlrunway.backend.attempts import Action, submit_or_reattach
from mlrunway.backend.budget import BUDGET_STOP_TAG, Budget, refusals
from mlrunway.backend.naming import RunNames
from mlrunway.backend.types import JobStatus
from mlrunway.errors import SpecError
from mlrunway.operators.sweep import TrialReporter
from mlrunway.pipeline import pick_best
from mlrunway.specs.sweep import SweepBudget
from mlrunway.sweep.budget import enforce
from tests.mlrunway.azure.fake_azureml import Trial
from tests.mlrunway.azure.test_cost_azure import CODE, azure_with
from training.tutorial import TUTORIAL_BANDIT, train_job, tutorial_sweep

NAMES = RunNames(prefix="mlr", run_key="b0d6e701")
CARD = '{"currency": "USD", "per_hour": {"Standard_NC6s_v3": 3.06}}'


ONE = [Trial({"learning_rate": 0.01, "momentum": 0.9}, [0.5, 0.6])]
TWO = [*ONE, Trial({"learning_rate": 0.05, "momentum": 0.8}, [0.6, 0.9])]


def running_sweep(fake, tmp_path, small_digits, trials, *, started_s_ago: float = 3600.0, runs_on: bool = True):
    """An Azure backend pricing Standard_NC6s_v3 at 3.06 an hour, and a sweep of ``trials`` that started
    ``started_s_ago`` (each trial a node: an hour of two is 6.12 USD so far); ``runs_on``: it would run on, and only a
    budget stops it."""
    azure = azure_with(fake, tmp_path, rates=CARD)
    job = train_job(str(CODE), str(small_digits), num_epochs=2)
    fake.sweep_trials[NAMES.sweep] = list(trials)
    fake.clock = time.time() - started_s_ago
    azure.jobs.submit_sweep(NAMES.sweep, tutorial_sweep(job, max_total_trials=2 * len(trials),
                                                        max_concurrent_trials=len(trials)))
    if runs_on:
        fake.job_script[NAMES.sweep] = ["Running"] * 50
    return azure


def test_the_watcher_records_the_decision_then_cancels_the_sweep_at_its_budget(fake, tmp_path, small_digits):
    azure = running_sweep(fake, tmp_path, small_digits, TWO)  # 2 node-hours so far: 6.12 USD
    budget = SweepBudget(limit=5.0, measure="cost", currency="USD", basis="5.56 USD less the 10% reserve")
    trigger = SweepTrigger("unused", NAMES.sweep, poll_interval_s=0, budget=budget.to_dict())
    assert trigger.serialize()[1]["budget"] == budget.to_dict()  # it travels to the triggerer with the trigger

    event = trigger.wait_here(azure)
    assert (event["outcome"], event["status"]) == ("ended", "Canceled")
    decision = event["error"]
    assert re.match(r"stopped by budget: spent 6\.1\d* USD of 5 USD \(5\.56 USD less the 10% reserve\); 2 running "
                    r"trials canceled with the sweep; the overshoot is at most a poll of the watch$", decision)
    # Recorded before the cancel, as a tag of the sweep's run (MLflow log-batch), then canceled.
    tagged = fake.sent("POST", r"/mlflow/runs/log-batch$")
    canceled = fake.sent("POST", rf"/jobs/{NAMES.sweep}/cancel$")
    assert tagged and canceled and fake.requests.index(tagged[-1]) < fake.requests.index(canceled[0])
    assert fake.runs[NAMES.sweep]["tags"] == {BUDGET_STOP_TAG: decision}

    info = azure.jobs.get(NAMES.sweep)
    assert info.status is JobStatus.CANCELED and info.budget_stop == decision == info.error
    result = azure.jobs.sweep_result(NAMES.sweep)
    assert result.stopped_because == decision
    assert result.policy == TUTORIAL_BANDIT  # read back from the service's sweep: what the report's replay starts from
    assert all(t.status is JobStatus.CANCELED and t.error.endswith(decision) for t in result.trials)
    again = submit_or_reattach(azure.jobs, NAMES.sweep, lambda name: pytest.fail(f"a retry submitted {name}"))
    assert again.action is Action.REATTACHED and again.job.budget_stop == decision
    # A canceled trial counts on its best so far: pick_best ranks it as an early-terminated one.
    picked = pick_best(azure, NAMES.sweep, "digits-budget")
    assert picked["trial"] == f"{NAMES.sweep}_1" and picked["value"] == 0.9


def test_below_the_budget_the_watcher_lets_the_sweep_run(fake, tmp_path, small_digits):
    azure = running_sweep(fake, tmp_path, small_digits, ONE, started_s_ago=60, runs_on=False)
    budget = SweepBudget(limit=50.0, measure="cost", currency="USD")
    event = SweepTrigger("unused", NAMES.sweep, poll_interval_s=0, budget=budget.to_dict()).wait_here(azure)
    assert event["status"] == "Completed" and not fake.sent("POST", rf"/jobs/{NAMES.sweep}/cancel$")
    assert azure.jobs.get(NAMES.sweep).budget_stop is None and "tags" not in fake.runs[NAMES.sweep]


def test_a_max_cost_on_a_size_the_card_lacks_is_refused_before_any_job(fake, tmp_path, small_digits):
    azure = azure_with(fake, tmp_path)  # no rates
    job = train_job(str(CODE), str(small_digits), num_epochs=2)
    with pytest.raises(SpecError) as caught:
        refusals(azure, Budget(max_cost=5), {"the job": job})
    assert str(caught.value) == (
        "budget: max_cost 5 needs the rate of every job, and the job runs on 'STANDARD_NC6S_V3', whose rate is "
        "unknown; add 'STANDARD_NC6S_V3' to the connection's rates.per_hour, or set rates.retail_prices; or give "
        "max_compute_hours instead")
    assert not fake.sent("PUT", r"/jobs/")
    refusals(azure_with(fake, tmp_path, rates=CARD), Budget(max_cost=5), {"the job": job})


def test_a_sweep_task_that_waits_in_its_worker_is_the_watcher_on_each_poll(fake, tmp_path, small_digits):
    azure = running_sweep(fake, tmp_path, small_digits, ONE)
    operator = SimpleNamespace(backend=azure, log=logging.getLogger("test"))
    reporter = TrialReporter(operator, NAMES.sweep, budget=SweepBudget(limit=1.0, measure="cost", currency="USD"))
    reporter(azure.jobs.get(NAMES.sweep))  # the worker's wait calls it on every poll
    info = azure.jobs.get(NAMES.sweep)
    assert info.status is JobStatus.CANCELED and info.budget_stop.startswith("stopped by budget: spent 3.06 USD")


def test_where_the_service_refuses_the_tag_the_decision_is_kept_in_the_runs_reports_folder(fake, tmp_path,
                                                                                          small_digits):
    azure = running_sweep(fake, tmp_path, small_digits, ONE)
    fake.refuse_tags = True
    decision = enforce(azure, NAMES.sweep, SweepBudget(limit=1.0, measure="cost", currency="USD"))
    assert "tags" not in fake.runs[NAMES.sweep] and fake.sent("POST", r"/runs/log-batch$")
    kept = tmp_path / "reports" / NAMES.sweep / f"budget-stop-{NAMES.sweep}.txt"
    assert kept.read_text() == decision
    info = azure.jobs.get(NAMES.sweep)
    assert info.status is JobStatus.CANCELED and info.budget_stop == decision
    assert azure.jobs.sweep_result(NAMES.sweep).stopped_because == decision
