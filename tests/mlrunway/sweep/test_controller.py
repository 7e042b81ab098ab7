"""The controller over a scripted runner: each controller sleep is one tick, and a trial logs one value a tick."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from mlrunway.backend.types import JobStatus
from mlrunway.early_termination import evaluate_in_order
from mlrunway.specs import (
    BanditPolicy,
    Choice,
    CommandJobSpec,
    MedianStoppingPolicy,
    Objective,
    SweepLimits,
    SweepSpec,
    TruncationSelectionPolicy,
)
from mlrunway.sweep.controller import Drawn, SweepController
from mlrunway.sweep.leaderboard import format_leaderboard

CURVES = {
    "good": [0.5, 0.7, 0.8, 0.9, 0.92, 0.93],
    "fine": [0.45, 0.65, 0.75, 0.85, 0.88, 0.9],
    "slow": [0.1, 0.2, 0.3, 0.35, 0.4, 0.45],
    "fade": [0.5, 0.65, 0.66, 0.66, 0.66, 0.66],
    "crash": [0.3, None],
    "silent": [],
}


@dataclass
class ScriptedRunner:
    tick: int = 0
    started: dict[str, tuple[int, str]] = field(default_factory=dict)
    canceled: dict[str, str] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)  # died with their processes (a reboot): lost, not failed
    max_running: int = 0

    def start(self, name, params):
        self.started[name] = (self.tick, params["curve"])
        running = sum(1 for n in self.started if not self.poll(n)[0].is_terminal())
        self.max_running = max(self.max_running, running)

    def _curve(self, name):
        return CURVES[self.started[name][1]]

    def history(self, name):
        begun, _ = self.started[name]
        values = self._curve(name)[: self.tick - begun]
        return [v for v in values if v is not None]

    def poll(self, name):
        if name in self.killed:
            return JobStatus.FAILED, "supervisor (pid 1) died without recording an outcome"
        if name in self.canceled:
            return JobStatus.CANCELED, self.canceled[name]
        begun, _ = self.started[name]
        curve = self._curve(name)
        if None in curve[: self.tick - begun]:
            return JobStatus.FAILED, "exit code 1; stderr tail:\nRuntimeError: boom"
        return (JobStatus.COMPLETED, None) if self.tick - begun >= len(curve) else (JobStatus.RUNNING, None)

    def metrics(self, name):
        history = self.history(name)
        return {"acc": history[-1], "loss": 1.0} if history else {"loss": 1.0}

    def cancel(self, name, reason):
        self.canceled[name] = reason

    def lost(self, name):
        return name in self.killed

    def waiting(self, name):
        return None

    def sleep(self, _seconds):
        self.tick += 1


POLICY = BanditPolicy(slack_factor=0.2, delay_evaluation=2)


def sweep(curves, *, policy=POLICY, concurrent=None, timeout=None):
    trial = CommandJobSpec(code=".", command="python t.py --curve ${{inputs.curve}}", inputs={"curve": "good"})
    return SweepSpec(trial=trial, search_space={"curve": Choice(values=curves)}, sampling_algorithm="grid",
                     objective=Objective(primary_metric="acc"), early_termination=policy,
                     limits=SweepLimits(max_total_trials=len(curves), max_concurrent_trials=concurrent, timeout=timeout))


def run(spec, runner=None, **kwargs):
    runner = runner or ScriptedRunner()
    controller = SweepController(spec=spec, runner=runner, name="sw", sleep=runner.sleep,
                                 clock=lambda: float(runner.tick), **kwargs)
    return controller.run(), runner


def test_controller_stops_exactly_the_trials_the_reference_computation_stops():
    names = ["good", "fine", "slow", "fade"]
    outcome, runner = run(sweep(names))
    reference = evaluate_in_order(POLICY, {n: CURVES[n] for n in names}, "maximize")
    stopped = {runner.started[n][1]: t.early_termination["interval"] for n, t in outcome.trials.items() if t.early_termination}
    assert stopped == {n: s.interval for n, s in reference.items()} == {"slow": 2, "fade": 3}
    assert outcome.best == "sw_trial_0"
    assert all(reason.startswith("early termination at interval") for reason in runner.canceled.values())


def test_controller_honours_max_concurrent_trials():
    _, runner = run(sweep(["good", "fine", "slow", "fade"], policy=None, concurrent=2))
    assert runner.max_running == 2 and len(runner.started) == 4


def test_crashing_trial_fails_and_the_sweep_goes_on():
    outcome, _ = run(sweep(["crash", "good"], policy=None))
    assert outcome.trials["sw_trial_0"].status is JobStatus.FAILED
    assert outcome.trials["sw_trial_1"].status is JobStatus.COMPLETED
    assert outcome.best == "sw_trial_1" and not outcome.failed


def test_all_trials_failing_fails_the_sweep_with_their_errors():
    outcome, _ = run(sweep(["crash", "crash"], policy=None))
    assert outcome.failed
    assert "sw_trial_0: RuntimeError: boom" in outcome.error and "sw_trial_1" in outcome.error


def test_metric_never_logged_fails_at_the_first_trial_naming_what_was_logged():
    outcome, runner = run(sweep(["silent", "good"], policy=None, concurrent=1))
    assert outcome.error.startswith("sweep.objective.primary_metric: trial sw_trial_0 completed without logging 'acc'")
    assert "it logged loss" in outcome.error
    assert len(runner.started) == 1


def test_a_trial_that_completed_without_the_metric_reads_so_on_the_leaderboard_not_canceled():
    """Before: the trial whose job Completed was canceled with the running ones and read "Canceled, 0 epochs"."""
    outcome, _ = run(sweep(["silent", "good"], policy=None, concurrent=2))
    silent, other = outcome.trials["sw_trial_0"], outcome.trials["sw_trial_1"]
    assert silent.status is JobStatus.COMPLETED and silent.note == "completed without logging 'acc' (it logged loss)"
    assert other.status is JobStatus.CANCELED and other.note == "the primary metric was never logged"
    row = next(line for line in format_leaderboard(outcome.trials.values(), Objective(primary_metric="acc"))
               .splitlines() if "sw_trial_0" in line)
    assert "Completed" in row and "[completed without logging 'acc' (it logged loss)]" in row


def test_sweep_timeout_cancels_running_trials_and_keeps_the_best_so_far():
    outcome, runner = run(sweep(["good", "fine"], policy=None, timeout=3))
    assert outcome.stopped_because == "sweep timeout 3 s reached"
    assert set(runner.canceled) == {"sw_trial_0", "sw_trial_1"}
    assert outcome.best == "sw_trial_0"


def test_stop_request_cancels_every_running_trial():
    flag: list[str] = []
    runner = ScriptedRunner()

    def sleep(seconds):
        runner.sleep(seconds)
        flag.append("the sweep was canceled")

    controller = SweepController(spec=sweep(["good", "fine"], policy=None), runner=runner, name="sw", sleep=sleep,
                                 stop_requested=lambda: flag[0] if flag else None)
    outcome = controller.run()
    assert outcome.stopped_because == "the sweep was canceled" and set(runner.canceled) == {"sw_trial_0", "sw_trial_1"}


def test_leaderboard_lists_best_first_with_stop_reasons():
    outcome, _ = run(sweep(["good", "slow"]))
    table = format_leaderboard(outcome.trials.values(), Objective(primary_metric="acc"))
    lines = table.splitlines()
    assert "sw_trial_0" in lines[1] and "Completed" in lines[1]
    ran = len(outcome.trials["sw_trial_1"].history)
    assert "sw_trial_1" in lines[2] and f"[stopped at interval 2, {ran} logged: bandit: best 0.2" in lines[2]


def test_every_poll_publishes_the_record():
    seen = []
    run(sweep(["good"], policy=None), on_update=lambda o: seen.append(len(o.trials)))
    assert len(seen) >= len(CURVES["good"]) and seen[-1] == 1


def test_a_resumed_controller_decides_as_an_undisturbed_one_even_for_trials_that_ended_meanwhile():
    """A controller dies after one tick; its trials go on unjudged (some to the end); a new controller takes the
    sweep on from the record the first one left, and the decisions and best trial are an undisturbed sweep's."""
    from dataclasses import replace

    from mlrunway.sweep.controller import SweepOutcome

    names = ["good", "fine", "slow", "fade"]
    calm, _ = run(sweep(names))
    runner = ScriptedRunner()
    first = SweepController(spec=sweep(names), runner=runner, name="sw", sleep=runner.sleep, clock=lambda: 0.0)
    first.source = Drawn([{"curve": name} for name in names])
    for index in range(len(names)):  # what the dead controller had done: started every trial
        first._start(index)
    runner.tick = 1
    first._refresh(list(first.outcome.trials))
    record = SweepOutcome(trials={n: replace(t) for n, t in first.outcome.trials.items()})
    runner.tick = 10  # nobody judged anything meanwhile: every trial ran to its end
    resumed = SweepController(spec=sweep(names), runner=runner, name="sw", sleep=runner.sleep,
                              clock=lambda: float(runner.tick), outcome=record).run()

    def decisions(outcome):
        return {n: (t.early_termination or {}).get("interval") for n, t in outcome.trials.items()}, outcome.best

    assert decisions(resumed) == decisions(calm)
    assert {n for n, t in resumed.trials.items() if t.early_termination} == {"sw_trial_2", "sw_trial_3"}
    # Issue 27, 8: what ran is what the record says. The trials completed during the outage read Completed with
    # every interval they logged, as their jobs and MLflow runs do; the decision is recorded, marked not applied.
    for name in ("sw_trial_2", "sw_trial_3"):
        trial = resumed.trials[name]
        assert trial.status is JobStatus.COMPLETED and len(trial.history) == len(CURVES[runner.started[name][1]])
        assert trial.early_termination["applied"] is False and not trial.stopped_early
        assert trial.early_termination["reason"].startswith("decided late, not applied")
    assert not {"sw_trial_2", "sw_trial_3"} & set(runner.canceled)  # a completed job is not canceled
    assert all(t.stopped_early for n, t in calm.trials.items() if n in ("sw_trial_2", "sw_trial_3"))


def test_a_trial_lost_with_its_processes_runs_again_as_a_new_attempt_and_the_sweep_completes_its_budget():
    """Issue 27, 4: a reboot mid-sweep killed its running trials; they were adopted as Failed and never run
    again, and the sweep ended Completed on half its budget."""
    runner = ScriptedRunner()

    def sleep(seconds):
        runner.sleep(seconds)
        if runner.tick == 2:
            runner.killed.add("sw_trial_0")

    controller = SweepController(spec=sweep(["good", "fine"], policy=None), runner=runner, name="sw", sleep=sleep,
                                 clock=lambda: float(runner.tick))
    outcome = controller.run()
    statuses = {name: trial.status for name, trial in outcome.trials.items()}
    assert statuses == {"sw_trial_0": JobStatus.FAILED, "sw_trial_1": JobStatus.COMPLETED,
                        "sw_trial_0-a2": JobStatus.COMPLETED}
    assert "run again as sw_trial_0-a2" in outcome.trials["sw_trial_0"].error
    assert outcome.trials["sw_trial_0-a2"].params == outcome.trials["sw_trial_0"].params
    assert outcome.best == "sw_trial_0-a2" and not outcome.failed


def test_a_trial_that_fails_on_its_own_is_not_run_again():
    outcome, runner = run(sweep(["crash", "good"], policy=None))
    assert sorted(outcome.trials) == ["sw_trial_0", "sw_trial_1"]
    assert outcome.trials["sw_trial_0"].status is JobStatus.FAILED


def test_a_resumed_sweep_draws_with_the_sampler_version_and_seed_it_started_with(tmp_path):
    """Issue 28, 1: new draws change what a seed gives, so a sweep records the sampler's version and its seed
    (drawn when none was given), and a resumed one keeps them; a record from before the versions is version 1."""
    import json
    from dataclasses import replace

    from mlrunway.local.sweep_controller import recorded
    from mlrunway.sweep.controller import SweepOutcome
    from mlrunway.sweep.sampling import SAMPLER_VERSION, sample

    curves = ["good", "fine", "slow", "fade"]
    spec = replace(sweep(curves, policy=None), sampling_algorithm="random", seed=None)
    fresh, _ = run(spec)
    assert fresh.sampler_version == SAMPLER_VERSION == 2 and fresh.seed is not None
    assert fresh.to_dict()["sampler_version"] == 2 and fresh.to_dict()["seed"] == fresh.seed
    for version in (1, 2):
        outcome, runner = run(spec, outcome=SweepOutcome(sampler_version=version, seed=fresh.seed))
        drawn = [runner.started[f"sw_trial_{i}"][1] for i in range(len(curves))]
        assert drawn == [p["curve"] for p in sample(spec.search_space, seed=fresh.seed, count=4, version=version)]
        assert (outcome.sampler_version, outcome.seed) == (version, fresh.seed)
    old = tmp_path / "sweep.json"
    old.write_text(json.dumps({"trials": [], "best_trial": None}))  # written before sampler versions
    assert recorded(old).sampler_version == 1
    old.write_text(json.dumps({"trials": [], "sampler_version": 2, "seed": 41}))
    assert (recorded(old).sampler_version, recorded(old).seed) == (2, 41)


@dataclass
class JitteryRunner(ScriptedRunner):
    """Each trial starts after a random delay and takes a random number of ticks per interval: values reach the
    controller in an order timing decides, as under CPU contention."""

    curves: dict[str, list[float]] = field(default_factory=dict)
    delays: dict[str, list[int]] = field(default_factory=dict)  # curve -> ticks before each value

    def _curve(self, name):
        return self.curves[self.started[name][1]]

    def _arrived(self, name):
        begun, curve = self.started[name]
        arrivals = list(itertools.accumulate(self.delays[curve]))
        return sum(1 for at in arrivals if at <= self.tick - begun)

    def history(self, name):
        return self._curve(name)[: self._arrived(name)]

    def poll(self, name):
        if name in self.canceled:
            return JobStatus.CANCELED, self.canceled[name]
        done = self._arrived(name) >= len(self._curve(name))
        return (JobStatus.COMPLETED, None) if done else (JobStatus.RUNNING, None)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decisions_repeat_whatever_order_the_values_arrive_in(data):
    """Issue 28, 4: the same curves give the same stops (and best trial) however the trials' values interleave:
    each trial is judged against those that started before it, once they reach the interval."""
    count = data.draw(st.integers(2, 6))
    values = st.floats(0.0, 1.0, allow_nan=False)
    curves = {f"c{i}": data.draw(st.lists(values, min_size=1, max_size=6)) for i in range(count)}
    delays = {c: data.draw(st.lists(st.integers(1, 5), min_size=len(v), max_size=len(v))) for c, v in curves.items()}
    policy = data.draw(st.sampled_from([BanditPolicy(slack_factor=0.1, delay_evaluation=1),
                                        MedianStoppingPolicy(evaluation_interval=1, delay_evaluation=1),
                                        TruncationSelectionPolicy(truncation_percentage=40, delay_evaluation=2)]))
    concurrent = data.draw(st.integers(1, count))
    runner = JitteryRunner(curves=curves, delays=delays)
    spec = sweep(list(curves), policy=policy, concurrent=concurrent)
    outcome = SweepController(spec=spec, runner=runner, name="sw", sleep=runner.sleep, clock=lambda: float(runner.tick),
                              judge_wait_s=1e9).run()
    expected = evaluate_in_order(policy, curves, "maximize")
    stopped = {runner.started[n][1]: t.early_termination["interval"] for n, t in outcome.trials.items()
               if t.early_termination}
    assert stopped == {c: s.interval for c, s in expected.items()}
    assert outcome.partial == []


@dataclass
class PlacingRunner(ScriptedRunner):
    """Trial 0 is Queued, waiting for the cluster to place its processes, until tick ``placed_at``; then it runs its
    curve from there, as a trial started at that tick."""

    placed_at: int = 3

    def _queued(self, name):
        return name == "sw_trial_0" and self.tick < self.placed_at

    def _from(self, name):
        begun, curve = self.started[name]
        return (max(begun, self.placed_at), curve) if name == "sw_trial_0" else (begun, curve)

    def history(self, name):
        if self._queued(name):
            return []
        begun, curve = self._from(name)
        return [v for v in CURVES[curve][: self.tick - begun] if v is not None]

    def poll(self, name):
        if name in self.canceled:
            return JobStatus.CANCELED, self.canceled[name]
        if self._queued(name):
            return JobStatus.QUEUED, None
        begun, curve = self._from(name)
        return (JobStatus.COMPLETED, None) if self.tick - begun >= len(CURVES[curve]) else (JobStatus.RUNNING, None)

    def waiting(self, name):
        return "for the cluster to place its 2 processes" if self._queued(name) else None


def test_a_trial_waiting_for_the_cluster_to_place_it_holds_back_every_other_start_until_it_runs():
    """Two trials may run at once, but trial 0 waits to be placed (to tick 8) from its start: trial 1 starts only once
    trial 0 runs, not beside it at tick 0, and trial 2 once one of them ends."""
    runner = PlacingRunner(placed_at=8)
    seen: list[tuple[int, str, str | None]] = []

    def record(outcome):
        trial = outcome.trials["sw_trial_0"]
        seen.append((runner.tick, trial.status.value, trial.waiting))

    outcome, _ = run(sweep(["good", "fine", "slow"], policy=None, concurrent=2), runner, on_update=record)
    starts = {name: tick for name, (tick, _) in runner.started.items()}
    assert starts["sw_trial_0"] == 0
    assert runner.placed_at <= starts["sw_trial_1"] <= runner.placed_at + 1  # not at tick 0, beside a waiting trial
    assert starts["sw_trial_2"] > starts["sw_trial_1"] and runner.max_running <= 2
    queued = [(status, waiting) for tick, status, waiting in seen if tick < runner.placed_at]
    assert queued == [("Queued", "for the cluster to place its 2 processes")] * runner.placed_at
    assert all(waiting is None for tick, _, waiting in seen if tick >= runner.placed_at)
    assert {t.status for t in outcome.trials.values()} == {JobStatus.COMPLETED} and len(outcome.trials) == 3
    assert outcome.trials["sw_trial_0"].waiting is None and outcome.best == "sw_trial_0" and not outcome.failed
