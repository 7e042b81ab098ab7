"""A sweep held to its budget on Azure ML, through the real MLClient against the fake service: the service starts
the trials, so the sweep's watcher cancels the sweep at the budget, the decision recorded first as a tag on the
sweep's run; every reader then reads the sweep as ended by its budget, and a retry re-attaches to it."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from mlrunway.airflow.triggers import SweepTrigger
from mlrunway.backend.attempts import Action, submit_or_reattach
from mlrunway.backend.naming import RunNames
from mlrunway.backend.types import JobStatus
from mlrunway.errors import SpecError
from mlrunway.ledger.budget import BUDGET_STOP_TAG, Budget, refusals
from mlrunway.operators.sweep import TrialReporter
from mlrunway.pipeline import pick_best
from mlrunway.specs.sweep import SweepBudget
from mlrunway.sweep.budget import Verdict, enforce
from tests.mlrunway.azure.fake_azureml import Trial
from tests.mlrunway.azure.test_cost_azure import CODE, azure_with, retail_item
from training.tutorial import TUTORIAL_BANDIT, train_job, tutorial_sweep

NAMES = RunNames(prefix="mlr", run_key="b0d6e701")
CARD = '{"currency": "USD", "per_hour": {"Standard_NC6s_v3": 3.06}}'


ONE = [Trial({"learning_rate": 0.01, "momentum": 0.9}, [0.5, 0.6])]
TWO = [*ONE, Trial({"learning_rate": 0.05, "momentum": 0.8}, [0.6, 0.9])]


def running_sweep(fake, tmp_path, small_digits, trials, *, started_s_ago: float = 3600.0, runs_on: bool = True,
                  rates=CARD):
    """An Azure backend pricing Standard_NC6s_v3 at 3.06 an hour (``rates``: the connection's card), and a sweep of
    ``trials`` that started ``started_s_ago`` (each trial a node: an hour of two is 6.12 USD so far); ``runs_on``: it
    would run on, and only a budget stops it. azure-core's backoff is 0 (the fake answers at once)."""
    azure = azure_with(fake, tmp_path, rates=rates)
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
        "budget: max_cost 5 needs the rate of every job, and the job runs on 'Standard_NC6s_v3', whose rate is "
        "unknown; add 'Standard_NC6s_v3' to the connection's rates.per_hour, or set rates.retail_prices; or give "
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
    decision = enforce(azure, NAMES.sweep, SweepBudget(limit=1.0, measure="cost", currency="USD")).decision
    assert "tags" not in fake.runs[NAMES.sweep] and fake.sent("POST", r"/runs/log-batch$")
    kept = tmp_path / "reports" / NAMES.sweep / f"budget-stop-{NAMES.sweep}.txt"
    assert kept.read_text() == decision
    info = azure.jobs.get(NAMES.sweep)
    assert info.status is JobStatus.CANCELED and info.budget_stop == decision
    assert azure.jobs.sweep_result(NAMES.sweep).stopped_because == decision


# -- issue 75: a price read or a blip never cancels a sweep; clusters priced by their real size ----------------------
PRICES = r"prices\.azure\.com"
CHILDREN = rf"/history/v1\.0.*/runs/{NAMES.sweep}/children$"


def test_a_retail_prices_outage_never_cancels_a_budgeted_sweep_far_below_its_budget(fake, tmp_path, small_digits,
                                                                                     capfd):
    """The day's cache lost (a triggerer whose reports folder is not the worker's) and the public API throttled: a
    price that cannot be read skips the look, said once, and is never "over budget" (it was NaN, and canceled)."""
    fake.retail_items = [retail_item("Standard_NC6s_v3", "NC6s v3", 3.06)]
    azure = running_sweep(fake, tmp_path, small_digits, ONE, started_s_ago=60, rates={"retail_prices": True})
    fake.job_script[NAMES.sweep] = ["Running"] * 3 + ["Completed"]
    fake.inject("429", 1000, PRICES, retry_after="0.01")
    budget = SweepBudget(limit=50.0, measure="cost", currency="USD")  # admitted before this size's price was known
    event = SweepTrigger("unused", NAMES.sweep, poll_interval_s=0, budget=budget.to_dict()).wait_here(azure)
    assert (event["outcome"], event["status"], event["error"]) == ("ended", "Completed", None)
    assert not fake.sent("POST", rf"/jobs/{NAMES.sweep}/cancel$") and "tags" not in fake.runs[NAMES.sweep]
    written = capfd.readouterr()  # the trigger's logger (structlog), as the triggerer writes it to the task log
    said = [line for line in (written.out + written.err).splitlines() if "its budget was not looked at" in line]
    assert len(said) == 1 and "runs on Standard_NC6s_v3, whose price could not be read" in said[0]
    assert len([f for f in fake.faults if "prices" in f[2]]) >= 3  # read (and refused: 3 tries) at a look


def test_the_watch_prices_from_the_rates_the_sweep_was_admitted_with(fake, tmp_path, small_digits):
    """A rate, once known, stays known for the sweep: the watch never reads Retail Prices for an admitted size."""
    azure = running_sweep(fake, tmp_path, small_digits, TWO, rates={"retail_prices": True})  # 6.12 USD so far
    fake.inject("429", 1000, PRICES, retry_after="0.01")
    budget = SweepBudget(limit=5.0, measure="cost", currency="USD", rates={"Standard_NC6s_v3": 3.06})
    event = SweepTrigger("unused", NAMES.sweep, poll_interval_s=0, budget=budget.to_dict()).wait_here(azure)
    assert (event["outcome"], event["status"]) == ("ended", "Canceled")
    assert re.match(r"stopped by budget: spent 6\.1\d* USD of 5 USD; 2 running trials canceled", event["error"])
    assert not [f for f in fake.faults if "prices" in f[2]] and not fake.sent("GET", r"/api/retail/prices")


def test_the_sweep_is_admitted_with_the_price_of_what_its_trials_run_on(fake, tmp_path, small_digits):
    from mlrunway.ledger.budget import sweep_budget

    azure = running_sweep(fake, tmp_path, small_digits, ONE, rates=CARD)
    planned = azure.jobs.planned_usage(train_job(str(CODE), str(small_digits)))
    allowed = sweep_budget(Budget(max_cost=10), azure.rates_for([planned.size]), [], [planned])
    assert allowed.rates == {"Standard_NC6s_v3": 3.06} and allowed.limit == pytest.approx(9.0)
    assert SweepTrigger("unused", NAMES.sweep, budget=allowed.to_dict()).serialize()[1]["budget"]["rates"] == \
        {"Standard_NC6s_v3": 3.06}  # it travels with the trigger


def test_a_clusters_upper_cased_size_is_priced_as_its_region_spells_it(fake, tmp_path, small_digits):
    """ARM answers a cluster's vmSize upper-cased; Retail Prices' filter is case-sensitive (the fake's too): the
    size is asked for as the region's VM sizes list it, read once per backend."""
    fake.retail_items = [retail_item("Standard_NC6s_v3", "NC6s v3", 3.06), retail_item("Standard_DS3_v2", "DS3", 0.29)]
    assert fake.computes["gpu-cluster"] == "STANDARD_NC6S_V3"
    azure = azure_with(fake, tmp_path, rates={"retail_prices": True})
    job = train_job(str(CODE), str(small_digits), num_epochs=2)
    refusals(azure, Budget(max_cost=5), {"the job": job})  # refused before: the rate unknown
    assert azure.jobs.planned_usage(job).size == "Standard_NC6s_v3"
    assert "armSkuName eq 'Standard_NC6s_v3'" in fake.sent("GET", r"/api/retail/prices$")[0].query["$filter"]
    assert azure.jobs.planned_usage(replace(job, compute="cpu-cluster")).size == "Standard_DS3_v2"
    assert len(fake.sent("GET", r"/locations/[^/]+/vmSizes$")) == 1  # the region's sizes, read once


def test_the_budget_looks_reads_and_its_cancel_ride_out_the_services_blips(fake, tmp_path, small_digits,
                                                                          monkeypatch):
    """Run History throttled past azure-core's retries (a read of the budget look), then the cancel's connection
    dropped (azure-core never retries a POST on that): each is "try again next poll"; the stop lands, and its record
    says it came late."""
    import mlrunway.backend.waiting as waiting

    monkeypatch.setattr(waiting, "BACKOFF_S", 0.001)
    azure = running_sweep(fake, tmp_path, small_digits, TWO)
    fake.inject("429", 6, CHILDREN, retry_after="1")  # the progress read (a courtesy), then the budget look's
    fake.inject("reset", 1, rf"/jobs/{NAMES.sweep}/cancel$")
    budget = SweepBudget(limit=5.0, measure="cost", currency="USD")
    event = SweepTrigger("unused", NAMES.sweep, poll_interval_s=0, budget=budget.to_dict()).wait_here(azure)
    assert (event["outcome"], event["status"]) == ("ended", "Canceled")
    assert "the stop came late by" in event["error"] and "in which the watch could not look" in event["error"]
    assert azure.jobs.get(NAMES.sweep).budget_stop == event["error"]
    assert [k for k, _, where in fake.faults if where.endswith("/cancel")] == [0]  # the dropped one, ridden out
    picked = pick_best(azure, NAMES.sweep, "digits-budget")  # the budget stop delivers the best so far
    assert picked["value"] == 0.9


def test_a_sweep_that_completed_since_the_poll_gets_no_budget_tag(fake, tmp_path, small_digits):
    azure = running_sweep(fake, tmp_path, small_digits, ONE, runs_on=False)
    assert azure.jobs.wait(NAMES.sweep, poll_s=0).status is JobStatus.COMPLETED
    verdict = enforce(azure, NAMES.sweep, SweepBudget(limit=1.0, measure="cost", currency="USD"))  # 3.06 spent
    assert verdict == Verdict() and "tags" not in fake.runs[NAMES.sweep]
    assert not fake.sent("POST", r"/runs/log-batch$")


def test_a_completed_sweeps_courtesy_progress_never_fails_its_task(fake, tmp_path, small_digits):
    azure = running_sweep(fake, tmp_path, small_digits, ONE, runs_on=False)
    info = azure.jobs.wait(NAMES.sweep, poll_s=0)
    fake.inject("429", 100, CHILDREN, retry_after="0.01")
    operator = SimpleNamespace(backend=azure, log=logging.getLogger("test"))
    TrialReporter(operator, NAMES.sweep)(info)  # raised the Run History error before


def test_a_job_silent_past_its_bound_is_canceled_at_a_later_poll_when_the_first_cancel_drops(fake, tmp_path,
                                                                                            small_digits):
    from mlrunway.errors import Unavailable

    azure = azure_with(fake, tmp_path)
    fake.job_final["nr-3"] = "NotResponding"
    azure.jobs.submit("nr-3", train_job(str(CODE), str(small_digits)))
    azure.jobs.not_responding_s = 0.0
    fake.job_script["nr-3"] = ["NotResponding"] * 5
    fake.inject("reset", 1, r"/jobs/nr-3/cancel$")
    with pytest.raises(Unavailable, match=r"the cancel of job nr-3: ServiceResponseError"):
        azure.jobs.get("nr-3")
    info = azure.jobs.get("nr-3")
    assert info.status is JobStatus.FAILED and "canceled it, so a retry runs no attempt beside it" in info.error
