"""A sweep's progress as log lines: each trial's start, each value of its primary metric, and its end (completed,
stopped early and why, failed). :class:`TrialWatch` compares what the backend reports now with what it has
already said, so a caller that polls (the sweep task in its worker, its trigger in the triggerer) logs each event
once, as it appears."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlrunway.backend.types import JobStatus, SweepResult, TrialInfo
from mlrunway.sweep.leaderboard import format_params, trial_score


@dataclass(frozen=True)
class Event:
    """One line of progress: ``kind`` is started, waiting (for a cluster to place it), value (one of the primary
    metric's) or ended."""

    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass
class TrialWatch:
    """What has been said of each trial: how many of its metric's values, and whether its end."""

    values: dict[str, int] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)
    waited: set[str] = field(default_factory=set)

    def events(self, result: SweepResult) -> list[Event]:
        """What happened since the last call, trial by trial, in the trials' order."""
        lines: list[Event] = []
        metric = result.objective.primary_metric
        for trial in result.trials:
            if trial.name in self.ended:
                continue
            said = self.values.get(trial.name)
            if said is None:
                said = self.values[trial.name] = 0
                lines.append(Event("started", f"trial {trial.name} started: {_params(trial)}"))
            if trial.waiting and trial.name not in self.waited:
                self.waited.add(trial.name)
                lines.append(Event("waiting", f"trial {trial.name} waits {trial.waiting}"))
            history = trial.history
            for epoch in range(said + 1, len(history) + 1):
                lines.append(Event("value", f"trial {trial.name} epoch {epoch}: {metric} = {history[epoch - 1]:.4f}"))
            self.values[trial.name] = len(history)
            if trial.status.is_terminal():
                self.ended.add(trial.name)
                lines.append(Event("ended", _ended(trial, result)))
        return lines


def _params(trial: TrialInfo) -> str:
    return format_params(trial.params) or "no hyperparameters"


def _ended(trial: TrialInfo, result: SweepResult) -> str:
    score = trial_score(trial, result.objective)
    best = "" if score is None else f", best {result.objective.primary_metric} {score:.4f}"
    if trial.stopped_early:
        return f"trial {trial.name} stopped early ({trial.note}){best}"
    if trial.status is JobStatus.FAILED:
        return f"trial {trial.name} failed: {trial.note or 'no error recorded'}"
    return f"trial {trial.name} {trial.status.value.lower()} after {len(trial.history)} epochs{best}" + (
        f" ({trial.note})" if trial.note else "")


@dataclass
class SaidOnce:
    """What a sweep's watcher (its trigger, or the task waiting in its worker) warns about once, not at every poll:
    the progress that could not be read, the budget look a price skipped; ``over`` lets it be said again."""

    said: set[str] = field(default_factory=set)

    def warn(self, log: Any, what: str, message: str, *args: Any) -> None:
        if what not in self.said:
            log.warning(message, *args)
        self.said.add(what)

    def over(self, what: str) -> None:
        self.said.discard(what)
