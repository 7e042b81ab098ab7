"""The sweep controller: start trials, judge them with the early-termination policy, keep the record.

It depends only on a small :class:`TrialRunner`, so it runs the same over local jobs or a scripted fake,
with the clock and the sleep passed in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from mlrunway.backend.naming import attempt_name, attempt_number, base_name
from mlrunway.backend.types import JobStatus, TrialInfo
from mlrunway.early_termination import evaluate
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep.leaderboard import best_trial
from mlrunway.sweep.sampling import trial_params

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


MAX_ATTEMPTS = 3  # of one trial lost with its processes: the first and two more


class MetricNeverLogged(Exception):
    """The first finished trial logged no value of the primary metric."""


@dataclass
class SweepOutcome:
    """Where the sweep ended: every trial, the best one, and why the sweep stopped if it stopped early."""

    trials: dict[str, TrialInfo] = field(default_factory=dict)
    best: str | None = None
    stopped_because: str | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {"trials": [t.to_dict() for t in self.trials.values()], "best_trial": self.best,
                "stopped_because": self.stopped_because, "error": self.error}


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

    def run(self) -> SweepOutcome:
        """Run the sweep to its end. Given the ``outcome`` a dead controller recorded, take it on from there:
        recorded trials that had not ended are adopted (polled, judged), unstarted ones start, ended ones stand."""
        pending = [(i, p) for i, p in enumerate(trial_params(self.spec)) if self._trial_name(i) not in self.outcome.trials]
        running = [n for n, t in self.outcome.trials.items() if not t.status.is_terminal()]
        if self.outcome.trials:
            log.info("Resuming %s: %d trials ended, %d adopted, %d to start", self.name,
                     len(self.outcome.trials) - len(running), len(running), len(pending))
        deadline = None if self.spec.limits.timeout is None else self.clock() + self.spec.limits.timeout
        while pending or running:
            reason = self.stop_requested() or (
                f"sweep timeout {self.spec.limits.timeout:g} s reached" if deadline and self.clock() > deadline else None
            )
            if reason:
                self._stop_all(running, reason)
                break
            while pending and len(running) < self.spec.limits.max_concurrent_trials:  # type: ignore[operator]
                running.append(self._start(*pending.pop(0)))
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

    def _start(self, index: int, params: dict[str, Any]) -> str:
        name = self._trial_name(index)
        self.runner.start(name, params)
        self.outcome.trials[name] = TrialInfo(name=name, params=params, status=JobStatus.QUEUED)
        log.info("Trial %s started: %s", name, params)
        return name

    def _refresh(self, running: list[str]) -> list[str]:
        """Read each running trial's status and metric, apply the policy, return who still runs."""
        for name in running:
            status, error = self.runner.poll(name)
            trial = self.outcome.trials[name]
            history = tuple(self.runner.history(name))
            if trial.early_termination:  # canceled by us; keep the record we made
                history = history[: trial.early_termination["interval"]]
                status = JobStatus.CANCELED if status.is_terminal() else trial.status
            self.outcome.trials[name] = replace(trial, status=status, history=history, error=error)
            if status is JobStatus.COMPLETED and not history:
                self._metric_never_logged(name)
        running = [self._rerun_if_lost(name) for name in running]
        self._apply_policy(running)
        still = [n for n in running if not self.outcome.trials[n].status.is_terminal()]
        for name in set(running) - set(still):
            trial = self.outcome.trials[name]
            self.outcome.trials[name] = replace(trial, metrics=self.runner.metrics(name))
            log.info("Trial %s %s after %d intervals", name, trial.status.value, len(trial.history))
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

    def _apply_policy(self, running: list[str]) -> None:
        policy = self.spec.early_termination
        if policy is None:
            return
        histories = {n: t.history for n, t in self.outcome.trials.items() if t.history}
        for name, stop in evaluate(policy, histories, self.spec.objective.goal).items():
            trial = self.outcome.trials[name]
            ended = trial.status.is_terminal() and trial.status is not JobStatus.COMPLETED
            if name not in running or trial.early_termination or ended:
                continue
            if trial.status is JobStatus.COMPLETED:
                # It completed since the last poll, its last intervals unjudged (a slow poll, a dead controller's
                # outage). The decision is recorded, so the sweep's decisions never depend on timing, but not
                # applied: the record says what ran (Completed, every epoch, as its job and MLflow run say), and
                # the trial is scored on what it logged, the model it saved.
                late = {**stop.to_dict(), "applied": False,
                        "reason": f"decided late, not applied (the trial had completed): {stop.reason}"}
                log.info("Trial %s completed before the policy could stop it at interval %d", name, stop.interval)
                self.outcome.trials[name] = replace(trial, early_termination=late)
                continue
            reason = f"early termination at interval {stop.interval}: {stop.reason}"
            log.info("Trial %s stopped: %s", name, reason)
            self.runner.cancel(name, reason)
            self.outcome.trials[name] = replace(trial, early_termination=stop.to_dict())

    def _metric_never_logged(self, name: str) -> None:
        metric = self.spec.objective.primary_metric
        logged = sorted(self.runner.metrics(name)) or ["no metrics at all"]
        raise MetricNeverLogged(
            f"sweep.objective.primary_metric: trial {name} completed without logging {metric!r}; it logged "
            f"{', '.join(logged)}; set primary_metric to the exact name the script passes to mlflow.log_metric"
        )

    def _stop_all(self, running: list[str], reason: str) -> None:
        self.outcome.stopped_because = reason
        for name in running:
            self.runner.cancel(name, reason)
            trial = self.outcome.trials[name]
            self.outcome.trials[name] = replace(trial, status=JobStatus.CANCELED, error=reason)

    def _finish(self) -> SweepOutcome:
        trials = list(self.outcome.trials.values())
        best = best_trial(trials, self.spec.objective)
        self.outcome.best = best.name if best else None
        if self.outcome.error is None and best is None:
            errors = "; ".join(f"{t.name}: {_last_line(t.error or t.status.value)}" for t in trials)
            self.outcome.error = f"sweep {self.name}: no trial produced the primary metric ({errors})"
        self.on_update(self.outcome)
        return self.outcome


def _last_line(text: str) -> str:
    """The last non-empty line of an error: for a crashed script, the exception itself."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), text)
