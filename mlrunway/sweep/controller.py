"""The sweep controller: start trials, judge them with the early-termination policy, keep the record.

It depends only on a small :class:`TrialRunner`, so it runs the same over local jobs or a scripted fake,
with the clock and the sleep passed in.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from mlrunway.backend.naming import attempt_name, attempt_number, base_name
from mlrunway.backend.types import JobStatus, TrialInfo
from mlrunway.early_termination import decide, evaluation_points
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep.budget import STOPPED, BudgetWatch, budget_record
from mlrunway.sweep.leaderboard import best_trial, trial_score
from mlrunway.sweep.sampling import SAMPLER_VERSION, new_seed, trial_params

log = logging.getLogger(__name__)


class TrialRunner(Protocol):
    """What the controller needs from a backend to run one trial."""

    def start(self, name: str, params: dict[str, Any]) -> None: ...
    def poll(self, name: str) -> tuple[JobStatus, str | None]: ...
    def history(self, name: str) -> list[float]: ...
    def metrics(self, name: str) -> dict[str, float]: ...
    def cancel(self, name: str, reason: str) -> None: ...
    def lost(self, name: str) -> bool:
        """Whether the trial, ended Failed, died without an outcome of its own: its processes were killed with
        their supervisor (a reboot, a kill of everything), so it did not fail, and may run again."""
        ...
    def waiting(self, name: str) -> str | None:
        """What the trial waits for before it can run (a Ray cluster to place its distributed processes, whole, from
        its start until a poll finds them placed), None when nothing: while one waits, no other trial starts, so the
        sweep's concurrency is what the cluster can place and trials never hold half of what each needs."""
        ...


class ParamSource(Protocol):
    """Where trials' hyperparameters come from: drawn up front (random, sobol, grid), or asked of an optimizer
    as earlier trials end (bayesian), which hears how each trial ended."""

    def params(self, index: int) -> dict[str, Any]: ...
    def ended(self, trial: TrialInfo, score: float | None) -> None: ...


@dataclass
class Drawn:
    """Trials' hyperparameters drawn up front (``sampling.trial_params``); being told results changes nothing."""

    points: list[dict[str, Any]]

    def params(self, index: int) -> dict[str, Any]:
        return self.points[index]

    def ended(self, trial: TrialInfo, score: float | None) -> None:
        return None


MAX_ATTEMPTS = 3  # of one trial lost with its processes: the first and two more
SETTLE_S = 30.0  # the most a sweep stopped by its budget or timeout waits for its canceled trials to end
JUDGE_WAIT_S = 30.0  # the least a judgement waits for earlier trials short of its interval (or 2 of its intervals)


class MetricNeverLogged(Exception):
    """The first finished trial logged no value of the primary metric."""


@dataclass
class SweepOutcome:
    """Where the sweep ended: every trial, the best one, and why the sweep stopped if it stopped early; the
    sampler's version and seed it drew with (a resumed sweep keeps them)."""

    trials: dict[str, TrialInfo] = field(default_factory=dict)
    best: str | None = None
    stopped_because: str | None = None
    error: str | None = None
    sampler_version: int = SAMPLER_VERSION
    seed: int | None = None
    partial: list[dict[str, Any]] = field(default_factory=list)  # judgements made without waiting for everyone
    budget: dict[str, Any] | None = None  # what it might spend and spent, and the decision if its budget stopped it

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {"trials": [t.to_dict() for t in self.trials.values()], "best_trial": self.best,
                "stopped_because": self.stopped_because, "error": self.error,
                "sampler_version": self.sampler_version, "seed": self.seed, "partial_judgements": self.partial,
                **({"budget": self.budget} if self.budget is not None else {})}


@dataclass
class SweepController:
    spec: SweepSpec
    runner: TrialRunner
    name: str
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    poll_s: float = 1.0
    on_update: Callable[[SweepOutcome], None] = lambda outcome: None
    stop_requested: Callable[[], str | None] = lambda: None
    outcome: SweepOutcome = field(default_factory=SweepOutcome)
    judge_wait_s: float = JUDGE_WAIT_S
    source: ParamSource | None = None  # None: drawn with sampling.trial_params (random, sobol, grid)
    budget: BudgetWatch | None = None  # what the sweep may spend, watched before each start and at every poll
    _judged: dict[str, int] = field(default_factory=dict)  # trial -> the last interval it was judged at
    _waiting: dict[tuple[str, int], float] = field(default_factory=dict)  # (trial, interval) -> since when
    _seen: dict[str, float] = field(default_factory=dict)  # trial -> when this controller first saw it

    def run(self) -> SweepOutcome:
        """Run the sweep to its end. Given the ``outcome`` a dead controller recorded, take it on from there:
        recorded trials that had not ended are adopted (polled, judged), unstarted ones start, ended ones stand."""
        if self.spec.seed is not None or self.spec.sampling.type != "random":
            self.outcome.seed = self.spec.seed
        elif self.outcome.seed is None:
            self.outcome.seed = new_seed()
        if self.source is None:
            self.source = Drawn(trial_params(self.spec, seed=self.outcome.seed, version=self.outcome.sampler_version))
        started = {base_name(n) for n in self.outcome.trials}
        pending = [i for i in range(self.spec.limits.max_total_trials) if self._trial_name(i) not in started]
        running = [n for n, t in self.outcome.trials.items() if not t.status.is_terminal()]
        if self.outcome.trials:
            log.info("Resuming %s: %d trials ended, %d adopted, %d to start", self.name,
                     len(self.outcome.trials) - len(running), len(running), len(pending))
        deadline = None if self.spec.limits.timeout is None else self.clock() + self.spec.limits.timeout
        while pending or running:  # a stop a dead controller recorded stands: a resumed one carries it out
            reason = self.outcome.stopped_because or self.stop_requested() or (
                f"sweep timeout {self.spec.limits.timeout:g} s reached" if deadline and self.clock() > deadline else None
            )
            look = None if reason or self.budget is None else self.budget.look(self.outcome.trials, running)
            if look is not None and look.stop is None and look.room == 0 and not running:
                reason = BudgetWatch.not_started(look, self.budget.budget, len(pending))  # type: ignore[union-attr]
            if reason or (look is not None and look.stop):
                self._stop_all(running, reason or look.stop)  # type: ignore[union-attr,arg-type]
                self._settle(running)
                break
            room = math.inf if look is None or look.room is None else look.room
            while (pending and len(running) < self.spec.limits.max_concurrent_trials  # type: ignore[operator]
                   and room > 0 and not any(self.runner.waiting(n) for n in running)):
                running.append(self._start(pending.pop(0)))
                room -= 1
            try:
                running = self._refresh(running)
            except MetricNeverLogged as exc:
                self._stop_all(running, "the primary metric was never logged")
                self.outcome.error = str(exc)
                break
            self.on_update(self.outcome)
            if running:
                self.sleep(self.poll_s)
        return self._finish()

    def _trial_name(self, index: int) -> str:
        return f"{self.name}_trial_{index}"

    def _start(self, index: int) -> str:
        name = self._trial_name(index)
        assert self.source is not None
        params = self.source.params(index)
        self.runner.start(name, params)
        self.outcome.trials[name] = TrialInfo(name=name, params=params, status=JobStatus.QUEUED)
        log.info("Trial %s started: %s", name, params)
        return name

    def _refresh(self, running: list[str]) -> list[str]:
        """Read each running trial's status and metric, apply the policy, return who still runs."""
        # Every status, then every history: a runner may read them all at once, each still after its status.
        polled = {name: self.runner.poll(name) for name in running}
        for name in running:
            status, error = polled[name]
            trial = self.outcome.trials[name]
            history = tuple(self.runner.history(name))  # all it logged, past a decision too: what ran
            stop = trial.early_termination
            if stop is not None and trial.stopped_early and status is JobStatus.COMPLETED:
                # It ended before our cancel landed: it ran to the end, as its job and MLflow run say.
                stop = _not_applied(stop, f"decided at interval {stop['interval']}, not applied (the trial completed "
                                          f"before the cancel landed)")
            waiting = self.runner.waiting(name) if status is JobStatus.QUEUED else None
            if waiting and not trial.waiting:
                log.info("Trial %s waits %s; no other trial starts until it runs", name, waiting)
            self.outcome.trials[name] = replace(trial, status=status, history=history, error=error,
                                                early_termination=stop, waiting=waiting)
            if status is JobStatus.COMPLETED and not history:
                self._metric_never_logged(name)
        running = [self._rerun_if_lost(name) for name in running]
        self._apply_policy()
        still = [n for n in running if not self.outcome.trials[n].status.is_terminal()]
        for name in set(running) - set(still):
            trial = replace(self.outcome.trials[name], metrics=self.runner.metrics(name))
            self.outcome.trials[name] = trial
            log.info("Trial %s %s after %d intervals", name, trial.status.value, len(trial.history))
            assert self.source is not None
            self.source.ended(trial, trial_score(trial, self.spec.objective))
        return still

    def _rerun_if_lost(self, name: str) -> str:
        """A trial that died with its processes (a reboot mid-sweep, a kill of everything) did not fail: it runs
        again, with the same parameters, as a new attempt (``<trial>-a2``, as a retried job), so the sweep
        still completes its budget. The lost attempt stays in the record, Failed, naming its successor."""
        trial = self.outcome.trials[name]
        if (trial.status is not JobStatus.FAILED or trial.early_termination
                or attempt_number(name) >= MAX_ATTEMPTS or not self.runner.lost(name)):
            return name
        again = attempt_name(base_name(name), attempt_number(name) + 1)
        self.outcome.trials[name] = replace(trial, error=f"{trial.error}; lost with its processes, run again as "
                                                         f"{again}")
        self.runner.start(again, trial.params)
        self.outcome.trials[again] = TrialInfo(name=again, params=trial.params, status=JobStatus.QUEUED)
        log.info("Trial %s was lost with its processes (%s): started again as %s", name, trial.error, again)
        return again

    def _apply_policy(self) -> None:
        """Judge each trial at each evaluation point it reached, in start order, against the trials that started
        before it (``early_termination.decide``), once none of those is still short of the point and unjudged
        there; or, past a bound, against what they have (a partial judgement, logged and recorded). So one seed
        gives the same decisions under CPU contention and after a restart."""
        policy = self.spec.early_termination
        if policy is None:
            return
        now = self.clock()
        order = self._start_order()
        cohort: dict[str, tuple[float, ...]] = {}
        for position, name in enumerate(order):
            trial = self.outcome.trials[name]
            self._seen.setdefault(name, now)
            stop = trial.early_termination
            cohort[name] = trial.history[: stop["interval"]] if stop else trial.history
            ended = trial.status.is_terminal() and trial.status is not JobStatus.COMPLETED
            if stop or ended:
                continue
            for k in evaluation_points(policy, len(trial.history)):
                if k <= self._judged.get(name, 0):
                    continue
                short = [j for j in order[:position] if not self._settled(j, k)]
                if short and not self._waited_out(name, k, now):
                    break
                self._judged[name] = k
                if short:
                    log.info("Trial %s judged at interval %d without waiting longer for %s (partial)", name, k,
                             ", ".join(short))
                    self.outcome.partial.append({"trial": name, "interval": k, "waited_for": short})
                decision = decide(policy, cohort, self.spec.objective.goal, k, name)
                if decision is not None:
                    self._stop(name, {**decision.to_dict(), **({"partial": True} if short else {})})
                    cohort[name] = trial.history[:k]
                    break

    def _start_order(self) -> list[str]:
        """The trials by index, each by its newest attempt (an attempt lost with its processes is superseded)."""
        newest: dict[str, str] = {}
        for name in self.outcome.trials:
            base = base_name(name)
            if base not in newest or attempt_number(name) > attempt_number(newest[base]):
                newest[base] = name
        return sorted(newest.values(), key=trial_index)

    def _settled(self, name: str, k: int) -> bool:
        """Whether trial ``name``'s part in judgements at interval ``k`` is final: it was stopped, or it has
        reached ``k`` (or ended short of it) and was judged at every evaluation point up to there."""
        trial = self.outcome.trials[name]
        if trial.early_termination or (trial.status.is_terminal() and trial.status is not JobStatus.COMPLETED):
            return True
        if len(trial.history) < k and not trial.status.is_terminal():
            return False
        policy = self.spec.early_termination
        assert policy is not None
        due = list(evaluation_points(policy, min(k, len(trial.history))))
        return not due or self._judged.get(name, 0) >= due[-1]

    def _waited_out(self, name: str, k: int, now: float) -> bool:
        """Past the bound for trial ``name`` at ``k``: JUDGE_WAIT_S, or two of its intervals if they are longer."""
        since = self._waiting.setdefault((name, k), now)
        pace = (since - self._seen[name]) / max(1, len(self.outcome.trials[name].history))
        return now - since >= max(self.judge_wait_s, 2 * pace)

    def _stop(self, name: str, stop: dict[str, Any]) -> None:
        trial = self.outcome.trials[name]
        if trial.status is JobStatus.COMPLETED:
            # It completed before it could be judged here (a dead controller's outage, a wait for earlier
            # trials). The decision is recorded, so the sweep's decisions never depend on timing, but not
            # applied: the record says what ran (Completed, every epoch, as its job and MLflow run say), and
            # the trial is scored on what it logged, the model it saved.
            late = _not_applied(stop, "decided late, not applied (the trial had completed)")
            log.info("Trial %s completed before the policy could stop it at interval %d", name, stop["interval"])
            self.outcome.trials[name] = replace(trial, early_termination=late)
            return
        reason = f"early termination at interval {stop['interval']}: {stop['reason']}"
        log.info("Trial %s stopped: %s", name, reason)
        self.runner.cancel(name, reason)
        self.outcome.trials[name] = replace(trial, early_termination={**stop, "at": time.time()})

    def _metric_never_logged(self, name: str) -> None:
        metric = self.spec.objective.primary_metric
        logged = sorted(self.runner.metrics(name)) or ["no metrics at all"]
        # The trial's record says what happened (its job completed; the metric never came), not "Canceled".
        self.outcome.trials[name] = replace(self.outcome.trials[name], error=f"completed without logging {metric!r} "
                                            f"(it logged {', '.join(logged)})")
        raise MetricNeverLogged(
            f"sweep.objective.primary_metric: trial {name} completed without logging {metric!r}; it logged "
            f"{', '.join(logged)}; set primary_metric to the exact name the script passes to mlflow.log_metric"
        )

    def _stop_all(self, running: list[str], reason: str) -> None:
        self.outcome.stopped_because = reason
        log.info("Sweep %s stops: %s", self.name, reason)
        for name in running:
            trial = self.outcome.trials[name]
            if not trial.status.is_terminal():  # one that has just ended keeps its own status and error
                self.runner.cancel(name, reason)
                trial = replace(trial, status=JobStatus.CANCELED, error=reason)
                self.outcome.trials[name] = trial
            if self.source is not None:
                self.source.ended(trial, None)

    def _settle(self, canceled: list[str]) -> None:
        """Wait (up to SETTLE_S) for the trials just canceled to end, then record all each logged: a trial logs
        until its cancel lands, and keeps its best model so far, so its score is read from what it ran (a sweep
        canceled from outside is not waited for: its own record already holds the stop)."""
        self.on_update(self.outcome)  # the stop is on record before the wait
        if self.stop_requested() is not None:
            return
        deadline = self.clock() + SETTLE_S
        waiting = list(canceled)
        while waiting and self.clock() < deadline:
            waiting = [n for n in waiting if not self.runner.poll(n)[0].is_terminal()]
            if waiting:
                self.sleep(self.poll_s)
        for name in canceled:
            self.runner.poll(name)  # a runner reads a history after its trial's status
            self.outcome.trials[name] = replace(self.outcome.trials[name], history=tuple(self.runner.history(name)),
                                                metrics=self.runner.metrics(name))

    def _finish(self) -> SweepOutcome:
        if self.budget is not None:  # what it spent, and the decision if the budget stopped it
            spent = self.budget.look(self.outcome.trials, []).spent
            stop = self.outcome.stopped_because if (self.outcome.stopped_because or "").startswith(STOPPED) else None
            self.outcome.budget = budget_record(self.budget.budget, spent, stop)
        trials = list(self.outcome.trials.values())
        best = best_trial(trials, self.spec.objective)
        self.outcome.best = best.name if best else None
        if self.outcome.error is None and best is None:
            errors = "; ".join(f"{t.name}: {_last_line(t.error or t.status.value)}" for t in trials)
            self.outcome.error = f"sweep {self.name}: no trial produced the primary metric ({errors})"
        self.on_update(self.outcome)
        return self.outcome


def trial_index(name: str) -> int:
    """The index of trial ``name`` (``<sweep>_trial_<index>``, or an attempt of it) in the sweep's order."""
    return int(base_name(name).rsplit("_", 1)[1])


def _not_applied(stop: dict[str, Any], why: str) -> dict[str, Any]:
    """A decision recorded, so the sweep's decisions never depend on timing, but not applied: the trial had
    completed."""
    return {**stop, "applied": False, "reason": f"{why}: {stop['reason']}"}


def _last_line(text: str) -> str:
    """The last non-empty line of an error: for a crashed script, the exception itself."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), text)
