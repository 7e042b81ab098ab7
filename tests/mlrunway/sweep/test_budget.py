"""A sweep held to its budget by the controller that starts its trials: over a scripted runner, a tick a second,
each trial one process at a core-hour price that makes a trial-second cost 1."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import JobStatus, TrialInfo, Usage
from mlrunway.specs.sweep import SweepBudget
from mlrunway.sweep.budget import BudgetWatch
from mlrunway.sweep.leaderboard import best_trial
from tests.mlrunway.sweep.test_controller import ScriptedRunner, run, sweep

PER_SECOND = RateCard(currency="USD", local_rate=3600.0)  # one process-second costs 1 USD


@dataclass
class MeteredRunner(ScriptedRunner):
    """The scripted runner, with each trial's usage: started at its tick, ended when it completed or was canceled."""

    ended: dict[str, int] = field(default_factory=dict)

    def cancel(self, name, reason):
        super().cancel(name, reason)
        self.ended.setdefault(name, self.tick)

    def usage(self, name):
        if name not in self.started:
            return None
        begun, curve = self.started[name]
        status, _ = self.poll(name)
        end = self.ended.get(name, begun + len(self._curve(name)) if status.is_terminal() else None)
        return Usage(started=float(begun), ended=None if end is None else float(end), processes=1)


def budgeted(runner, limit, poll_s=1.0, exit_s=1.0):
    budget = SweepBudget(limit=limit, measure="cost", currency="USD", local_rate=3600.0, basis="a test's")
    return BudgetWatch(budget, runner.usage, PER_SECOND, poll_s, exit_s, now=lambda: float(runner.tick))


def test_at_the_budget_the_running_trials_are_canceled_and_the_best_so_far_is_still_picked():
    runner = MeteredRunner()
    outcome, _ = run(sweep(["good"] * 6, policy=None, concurrent=2), runner, budget=budgeted(runner, 10))
    # Two trials start (no trial has ended to say what one costs); at tick 5 they have spent 10 of 10.
    assert sorted(runner.started) == ["sw_trial_0", "sw_trial_1"]
    assert outcome.stopped_because.startswith("stopped by budget: spent 10 USD of 10 USD (a test's); 2 running "
                                              "trials canceled")
    # The stated overshoot: each running trial (1 USD a second) until its cancel lands (a poll) and while it exits.
    assert ("until the cancels land (a poll, 1 s) and each trial exits (up to 1 s) they spend up to about 4 USD more"
            in outcome.stopped_because)
    trials = list(outcome.trials.values())
    assert all(t.status is JobStatus.CANCELED and len(t.history) == 5 for t in trials)  # all logged until the cancel
    assert outcome.best == "sw_trial_0" == best_trial(trials, sweep(["good"]).objective).name and not outcome.failed
    assert outcome.budget == {"limit": 10, "measure": "cost", "currency": "USD", "local_rate": 3600.0, "rates": {},
                              "basis": "a test's", "spent": 10.0, "stopped": outcome.stopped_because}


def test_no_trial_starts_that_would_pass_the_budget_and_the_sweep_ends_with_what_it_completed():
    runner = MeteredRunner()
    outcome, _ = run(sweep(["good"] * 6, policy=None, concurrent=2), runner, budget=budgeted(runner, 15))
    # Trials 0 and 1 complete at 6 each (12 of 15); a third would cost about 6 more: none starts.
    assert sorted(runner.started) == ["sw_trial_0", "sw_trial_1"] and not runner.canceled
    assert all(t.status is JobStatus.COMPLETED for t in outcome.trials.values())
    assert outcome.stopped_because == ("stopped by budget: spent 12 USD of 15 USD (a test's); 4 trials not started: "
                                       "the next would pass it (a trial costs about what the ended ones did)")
    assert outcome.best == "sw_trial_0" and outcome.budget["spent"] == 12.0


def test_trials_start_while_the_budget_has_room_for_them():
    runner = MeteredRunner()
    outcome, _ = run(sweep(["good"] * 4, policy=None, concurrent=1), runner, budget=budgeted(runner, 20))
    # One at a time: 6 each; after three (18), a fourth would pass 20.
    assert sorted(runner.started) == ["sw_trial_0", "sw_trial_1", "sw_trial_2"]
    assert outcome.stopped_because.startswith("stopped by budget: spent 18 USD of 20 USD")


def test_without_a_budget_nothing_is_recorded_of_one():
    outcome, runner = run(sweep(["good"] * 2, policy=None))
    assert outcome.budget is None and outcome.stopped_because is None and len(runner.started) == 2
    assert "budget" not in outcome.to_dict()


def test_a_resumed_controller_carries_out_the_stop_its_predecessor_recorded():
    """A controller that dies after recording its budget's stop is resumed: the stop stands (no trial starts, the
    adopted one is canceled with the same reason), never decided again against the trial rows."""
    runner = MeteredRunner()
    spec = sweep(["good"] * 4, policy=None, concurrent=1)
    first, _ = run(spec, runner, budget=budgeted(runner, 20))
    decision = first.stopped_because
    assert decision.startswith("stopped by budget: spent 18 USD of 20 USD")
    # The record as a dead controller left it: its stop decided, a trial it had started still running.
    runner.started["sw_trial_3"] = (runner.tick, "good")
    first.trials["sw_trial_3"] = TrialInfo(name="sw_trial_3", params={"curve": "good"}, status=JobStatus.RUNNING)
    again, _ = run(spec, runner, budget=budgeted(runner, 1000), outcome=first)
    assert again.stopped_because == decision and runner.canceled["sw_trial_3"] == decision
    assert again.trials["sw_trial_3"].status is JobStatus.CANCELED and len(runner.started) == 4


def test_the_record_a_resumed_controller_reads_keeps_the_stop(tmp_path):
    from mlrunway.local.sweep_controller import recorded
    from mlrunway.sweep.controller import SweepOutcome

    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(SweepOutcome(stopped_because="stopped by budget: spent 18 USD of 20 USD").to_dict()))
    assert recorded(path).stopped_because == "stopped by budget: spent 18 USD of 20 USD"
