"""The budget setting and its refusals before any job: read as a user writes it, refused by name where the run
cannot keep it, and what Train and earlier attempts leave the sweep."""

from __future__ import annotations

import pytest

from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import Usage
from mlrunway.errors import SpecError
from mlrunway.ledger.budget import Budget, against_budget, budget_of, refusals, sweep_budget, train_verdict
from mlrunway.ledger.cost import cost_rows, job_cost, run_cost
from mlrunway.local.backend import LocalBackend
from mlrunway.specs import CommandJobSpec
from mlrunway.specs.job import PyTorchDistribution

JOB = CommandJobSpec(code=".", command="python train.py")


@pytest.mark.parametrize(("value", "message"), [
    ({"max_cost": 0}, "budget.max_cost: 0 is not an amount above 0; give the most the run may spend"),
    ({"max_cost": -2}, "budget.max_cost: -2 is not an amount above 0"),
    ({"max_compute_hours": "0"}, "budget.max_compute_hours: '0' is not a number of hours above 0"),
    ({"max_cost": 5, "max_compute_hours": 2}, "budget.max_cost: or max_compute_hours: both are set; give one"),
    ({"reserve": 0.2}, "budget.max_cost: or max_compute_hours: neither is set"),
    ({"max_cost": 5, "reserve": 1}, "budget.reserve: 1 is not a share from 0 up to (not including) 1"),
    ({"max_cost": 5, "cap": 1}, "budget.cap: is not a budget setting; use max_cost, max_compute_hours, reserve"),
    ("{max_cost: 5}", "budget: is not JSON"),
    ([5], "budget: [5] is not a mapping"),
])
def test_a_budget_the_run_cannot_have_is_refused_naming_the_field(value, message):
    with pytest.raises(SpecError) as caught:
        Budget.parse(value)
    assert str(caught.value).startswith(message)


def test_a_budget_is_read_from_an_object_or_its_json_and_empty_is_none():
    assert Budget.parse('{"max_cost": "5", "reserve": 0.2}') == Budget(max_cost=5.0, reserve=0.2)
    assert Budget.parse({"max_compute_hours": 2}).measure == "hours"
    assert [Budget.parse(v) for v in (None, "", " ", {})] == [None] * 4


def test_the_tasks_budget_wins_over_the_connections_default_which_is_read_only_without_one():
    read: list[bool] = []

    def connection() -> Budget:
        read.append(True)
        return Budget(max_cost=3.0)

    assert budget_of({"max_compute_hours": 1}, connection) == Budget(max_compute_hours=1.0) and not read
    assert budget_of(None, connection) == Budget(max_cost=3.0) and read


def test_a_max_cost_without_the_rate_of_a_job_is_refused_before_any_job(tmp_path):
    backend = LocalBackend.at(tmp_path)  # no local_rate
    with pytest.raises(SpecError) as caught:
        refusals(backend, Budget(max_cost=5), {"the job": JOB})
    assert str(caught.value) == (
        "budget: max_cost 5 needs the rate of every job, and the job runs on this machine, whose rate is unknown; "
        "set the connection's local_rate, the price of a core-hour; or give max_compute_hours instead")
    refusals(backend, Budget(max_compute_hours=1), {"the job": JOB})  # hours need no rate


def test_a_budget_below_one_minute_of_the_compute_is_refused(tmp_path):
    backend = LocalBackend.from_connection({"workspace": str(tmp_path), "local_rate": "0.6"})
    with pytest.raises(SpecError, match=r"^budget: 0\.005 USD is below one core-minute of the sweep's trial's "
                                        r"compute \(0\.01 USD\); raise it"):
        refusals(backend, Budget(max_cost=0.005), {"the sweep's trial": JOB})
    with pytest.raises(SpecError, match=r"^budget: 0\.01 compute-hours is below one core-minute"):
        refusals(backend, Budget(max_compute_hours=0.01), {"the job": JOB})
    refusals(backend, Budget(max_cost=0.02), {"the job": JOB})


def test_a_local_jobs_planned_usage_counts_its_processes(tmp_path):
    ddp = CommandJobSpec(code=".", command="python train.py", distribution=PyTorchDistribution(
        process_count_per_instance=2))
    assert LocalBackend.at(tmp_path).jobs.planned_usage(ddp) == Usage(processes=2)


def test_train_that_leaves_the_sweep_nothing_fails_and_the_sweep_gets_the_rest_less_the_reserve():
    card = RateCard(local_rate=3.6)  # a process-second costs 0.001
    train = [job_cost("t", Usage(started=0.0, ended=1000.0, processes=1), card)]  # 1.0 USD
    used, refused = train_verdict(Budget(max_cost=1.1), card, train)
    assert used == pytest.approx(1.0) and refused == (
        "budget: Train spent 1 USD of 1.1 USD, leaving the sweep nothing (the reserve of 10% is export's and the "
        "reference's); raise the budget, or train for less")
    assert train_verdict(Budget(max_cost=2), card, train)[1] is None
    allowed = sweep_budget(Budget(max_cost=2, reserve=0.25), card, train)
    assert allowed.limit == pytest.approx(0.5) and allowed.measure == "cost" and allowed.local_rate == 3.6
    assert allowed.basis == "2 USD less the 25% reserve and 1 USD spent before the sweep"
    assert sweep_budget(Budget(max_compute_hours=2), card, []).limit == pytest.approx(1.8)
    with pytest.raises(SpecError, match=r"^budget: the run has spent 1 USD of 1 USD before the sweep"):
        sweep_budget(Budget(max_cost=1), card, train)


def test_a_job_at_a_rate_unknown_is_never_counted_as_free():
    train = [job_cost("t", Usage(started=0.0, ended=10.0, size="Standard_X"), RateCard())]
    with pytest.raises(SpecError, match=r"^budget: is in money and job t ran at a rate unknown; add 'Standard_X'"):
        train_verdict(Budget(max_cost=1), RateCard(), train)


def test_a_runs_cost_is_stated_against_its_budget_with_what_went_past_it():
    card = RateCard(local_rate=3.6)
    cost = run_cost({"train": {"t": Usage(started=0.0, ended=1000.0)},
                     "export": {"e": Usage(started=0.0, ended=500.0)}}, card).to_dict()
    held = against_budget(Budget(max_cost=1.2), cost)
    assert held["text"] == "spent 1.5 of 1.2 USD, 0.3 USD past it (export, the reference or the sweep's stated overshoot)"
    assert against_budget(Budget(max_compute_hours=1), cost)["text"] == "spent 0.4167 of 1 compute-hours"
    assert ("budget", held["text"]) in cost_rows({**cost, "budget": held})
    unpriced = run_cost({"train": {"t": Usage(started=0.0, ended=10.0)}}, RateCard()).to_dict()
    assert against_budget(Budget(max_cost=1), unpriced)["spent"] is None


def test_what_a_retried_sweep_may_spend_counts_train_and_the_earlier_attempts_trials_not_its_own():
    from mlrunway.backend.fake import FakeBackend
    from mlrunway.backend.naming import RunNames
    from mlrunway.backend.types import JobStatus, TrialInfo
    from mlrunway.ledger.budget import spent_before
    from mlrunway.specs import Choice, Objective, SweepSpec

    fake, names = FakeBackend(), RunNames(prefix="b", run_key="0badcafe")
    fake.jobs.submit(names.train_job, JOB)
    spec = SweepSpec(trial=CommandJobSpec(code=".", command="python t.py --lr ${{inputs.lr}}", inputs={"lr": 0.1}),
                     search_space={"lr": Choice(values=[0.1, 0.2])}, objective=Objective(primary_metric="acc"))
    for attempt, trial in ((names.sweep, "t1"), (f"{names.sweep}-a2", "t2")):
        fake.jobs.submit_sweep(attempt, spec)
        fake.jobs.set_trials(attempt, [TrialInfo(name=trial, params={}, status=JobStatus.COMPLETED)])
    fake.jobs.usages.update({names.train_job: Usage(started=0.0, ended=3600.0), "t1": Usage(started=0.0, ended=1800.0),
                             "t2": Usage(started=0.0, ended=900.0)})
    assert {c.job: c.hours for c in spent_before(fake, names, f"{names.sweep}-a2")} == {names.train_job: 1.0, "t1": 0.5}
    assert {c.job for c in spent_before(fake, names, names.sweep)} == {names.train_job}
    assert {c.job for c in spent_before(fake, names)} == {names.train_job}
