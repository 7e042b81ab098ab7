"""What a job costs (mlrunway.ledger.cost): duration × nodes (or processes) × the card's rate, an estimate; a rate
the card lacks is said to be unknown, never guessed; a run's cost counts every attempt of each of its jobs."""

from __future__ import annotations

import sys

import pytest

from mlrunway.backend.fake import FakeBackend
from mlrunway.backend.naming import RunNames
from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import JobStatus, TrialInfo, Usage
from mlrunway.errors import SpecError
from mlrunway.ledger.cost import RunCost, cost_of_run, cost_rows, estimated, job_cost, run_cost
from mlrunway.local.backend import LocalBackend
from mlrunway.specs import CommandJobSpec, MpiDistribution, PyTorchDistribution, TensorFlowDistribution
from mlrunway.specs.command import process_count

CARD = RateCard.parse({"currency": "EUR", "per_hour": {"Standard_NC6s_v3": 2.8, "Standard_NC6s_v3:spot": "0.56 EUR"}},
                      local_rate=0.05)
NAMES = RunNames(prefix="fk", run_key="0badc0de")


def test_a_node_hour_on_a_vm_and_a_core_hour_here_are_priced_at_the_cards_rates():
    gpu = Usage(started=0.0, ended=5400.0, size="STANDARD_NC6S_V3", instances=2)  # 1.5 h on 2 nodes
    cost = job_cost("train", gpu, CARD)
    assert (cost.hours, cost.amount, cost.unit) == (3.0, pytest.approx(8.4), "node-hour")
    assert cost.text() == "8.4 EUR (3 node-hours (90 min × 2 nodes) on STANDARD_NC6S_V3 at 2.8 EUR a node-hour)"
    spot = job_cost("trial", Usage(started=0.0, ended=3600.0, size="Standard_NC6s_v3", tier="spot"), CARD)
    assert spot.amount == pytest.approx(0.56) and spot.compute == "Standard_NC6s_v3 (spot)"
    here = job_cost("local", Usage(started=10.0, ended=1810.0, processes=2, cpu_seconds=2700.0), CARD)
    assert (here.hours, here.amount, here.cpu_hours) == (1.0, pytest.approx(0.05), 0.75)
    assert here.text() == "0.05 EUR (1 core-hour (30 min × 2 processes) on this machine at 0.05 EUR a core-hour)"


def test_a_rate_the_card_lacks_is_unknown_and_said_so_never_made_up():
    low = job_cost("t", Usage(started=0.0, ended=3600.0, size="Standard_NC6s_v3", tier="low_priority"), CARD)
    other = job_cost("t", Usage(started=0.0, ended=1800.0, size="Standard_D4s_v3"), CARD)
    here = job_cost("t", Usage(started=0.0, ended=3600.0), RateCard())
    assert low.amount is other.amount is here.amount is None
    assert other.text() == ("0.5 node-hours (30 min × 1 node) on Standard_D4s_v3 (rate unknown: add 'Standard_D4s_v3' "
                            "to the connection's rates.per_hour, or set rates.retail_prices)")
    assert here.text() == ("1 core-hour (60 min × 1 process) on this machine (rate unknown: set the connection's "
                           "local_rate, the price of a core-hour)")
    assert "add 'Standard_NC6s_v3:low_priority' to the connection's rates.per_hour" in low.text()


def test_a_running_job_costs_what_it_ran_so_far_and_one_that_never_started_costs_nothing():
    running = job_cost("t", Usage(started=100.0, processes=1), CARD, now=100.0 + 1800.0)
    assert running.running and running.hours == 0.5 and "so far" in running.text()
    assert job_cost("t", None, CARD) is None and job_cost("t", Usage(), CARD) is None


def test_a_runs_total_counts_the_known_and_names_the_unknown():
    usages = {"train": {"t": Usage(started=0.0, ended=3600.0, size="Standard_NC6s_v3")},
              "trials": {"a": Usage(started=0.0, ended=1800.0, size="Standard_NC6s_v3"),
                         "b": Usage(started=0.0, ended=1800.0, size="Standard_E4s_v3")},
              "export": {"e": None}}  # never started: not a cost
    total = run_cost(usages, CARD)
    assert set(total.jobs) == {"train", "trials"} and total.unknown == 1
    assert total.amount == pytest.approx(4.2)
    assert total.text() == "4.2 EUR for 2 node-hours in 3 jobs; 1 of them at a rate unknown, not counted (an estimate)"
    assert run_cost({"train": {"t": Usage(started=0.0, ended=7200.0)}}, RateCard()).text() == \
        "2 core-hours in 1 job, rate unknown (set the connection's local_rate, the price of a core-hour)"
    assert RunCost(jobs={}, currency="USD").text() == "no job has run yet"
    rows = dict(cost_rows(total.to_dict()))
    assert rows["total"] == total.text() and rows["trials"] == "1.4 EUR, 1 node-hour in 2 jobs, 1 at a rate unknown"


def test_a_runs_cost_is_every_attempt_of_each_of_its_jobs_and_each_sweep_attempts_trials():
    fake = FakeBackend()
    fake.rate_card = RateCard(per_hour={"Standard_NC6s_v3": 3.0})
    hour = Usage(started=0.0, ended=3600.0, size="Standard_NC6s_v3")
    train_a2 = f"{NAMES.train_job}-a2"
    fake.jobs.script(NAMES.train_job, JobStatus.FAILED, error="a preempted node")  # its retry ran as -a2
    fake.jobs.usages.update({NAMES.train_job: hour, train_a2: hour, NAMES.export_job: hour})
    fake.jobs.submit(NAMES.train_job, _job())
    fake.jobs.submit(train_a2, _job())
    fake.jobs.submit(NAMES.export_job, _job())
    fake.jobs.submit_sweep(NAMES.sweep, _sweep())
    fake.jobs.set_trials(NAMES.sweep, [TrialInfo(name=f"{NAMES.sweep}_trial_{i}", params={}, status=JobStatus.COMPLETED)
                                       for i in range(3)])
    fake.jobs.usages.update({f"{NAMES.sweep}_trial_{i}": hour for i in range(2)})  # the third never started
    cost = cost_of_run(fake, NAMES)
    assert {role: [c.job for c in costs] for role, costs in cost.jobs.items()} == {
        "train": [NAMES.train_job, train_a2], "trials": [f"{NAMES.sweep}_trial_0", f"{NAMES.sweep}_trial_1"],
        "export": [NAMES.export_job]}
    assert cost.amount == pytest.approx(15.0) and cost.currency == "USD"


def _job() -> CommandJobSpec:
    return CommandJobSpec(code="/tmp", command="python train.py")


def _sweep():
    from mlrunway.specs import Choice, Objective, SweepLimits, SweepSpec

    return SweepSpec(trial=CommandJobSpec(code="/tmp", command="python train.py --lr ${{inputs.lr}}",
                                          inputs={"lr": 0.1}), search_space={"lr": Choice(values=[0.1])},
                     objective=Objective(primary_metric="acc", goal="maximize"),
                     limits=SweepLimits(max_total_trials=1, max_concurrent_trials=1))


def test_a_local_jobs_usage_is_its_wall_time_processes_and_measured_cpu_time(jobs):
    spec = CommandJobSpec(code=str(jobs.workspace.root), command=f"{sys.executable} -c 'sum(range(3_000_000))'")
    jobs.submit("busy", spec)
    assert jobs.wait("busy", poll_s=0.05).status is JobStatus.COMPLETED
    usage = jobs.usage("busy")
    assert usage.processes == 1 and usage.size is None and usage.ended > usage.started
    assert 0 < usage.cpu_seconds < 60  # measured by its supervisor once it ended
    assert jobs.usage("never-submitted") is None


@pytest.mark.parametrize(("distribution", "processes"), [
    (None, 1), (PyTorchDistribution(process_count_per_instance=3), 3), (MpiDistribution(process_count_per_instance=2), 2),
    (TensorFlowDistribution(worker_count=2, parameter_server_count=1), 3)])
def test_a_local_job_counts_the_processes_its_distribution_runs(distribution, processes):
    assert process_count(CommandJobSpec(code="/tmp", command="python x.py", distribution=distribution)) == processes


@pytest.mark.parametrize(("fields", "message"), [
    ({"local_rate": "-0.1"}, r"^local_rate: '-0.1' is not a price of at least 0 and at most 1000000; give the price "
                             r"of a core-hour"),
    ({"local_rate": "1e308"}, r"^local_rate: '1e308' is not a price of at least 0 and at most 1000000"),  # 'inf USD'
    ({"rates": '{"per_hour": {"Standard_D4s_v3": 2e6}}'},
     r"^rates.per_hour.Standard_D4s_v3: 2000000.0 is not a price of at least 0 and at most 1000000"),
    ({"local_rate": "cheap"}, r"^local_rate: 'cheap' is not a price of at least 0"),
    ({"rates": '{"currency": "EUR", "per_hour": {"Standard_D4s_v3": "0.2 USD"}}'}, r"a currency mix"),
])
def test_a_bad_local_rate_is_refused_when_the_connection_is_read(tmp_path, fields, message):
    with pytest.raises(SpecError, match=message):
        LocalBackend.from_connection({"workspace": str(tmp_path / "ws"), **fields})
    assert LocalBackend.from_connection({"workspace": str(tmp_path / "ws"), "local_rate": "0.04"}).rates_for(
        []).local_rate == 0.04


def test_a_cost_that_cannot_be_read_is_logged_and_left_unknown_never_failing_what_shows_it(caplog):
    def outage():
        raise ConnectionError("Run History answered 503 for 15 minutes")

    assert estimated("run 0badc0de", outage) is None
    assert "the cost of run 0badc0de could not be read: ConnectionError: Run History answered 503" in caplog.text
    assert estimated("run 0badc0de", lambda: RunCost(jobs={}, currency="USD")) is None  # nothing ran: nothing shown
    card = RateCard(per_hour={"Standard_NC6s_v3": 3.0})
    shown = estimated("run", lambda: run_cost({"train": {"t": Usage(started=0.0, ended=3600.0,
                                                                     size="Standard_NC6s_v3")}}, card))
    assert shown["amount"] == 3.0 and shown["text"] == "3 USD for 1 node-hour in 1 job (an estimate)"
