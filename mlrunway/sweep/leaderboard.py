"""Rank trials by the objective and pick the best one: pure functions over TrialInfo records."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mlrunway.backend.types import JobStatus, TrialInfo
from mlrunway.early_termination import best_so_far
from mlrunway.specs.sweep import Objective


def trial_score(trial: TrialInfo, objective: Objective) -> float | None:
    """The trial's best value of the primary metric (a stopped trial's up to the interval it was stopped at),
    or None if it logged none."""
    return best_so_far(trial.judged, objective.goal) if trial.judged else None


def rank(trials: Iterable[TrialInfo], objective: Objective) -> list[TrialInfo]:
    """Trials with a score, best first (ties: earlier trial first), then those without."""
    listed = list(trials)
    sign = -1 if objective.goal == "maximize" else 1
    scored = [t for t in listed if trial_score(t, objective) is not None and t.status is not JobStatus.FAILED]
    ordered = sorted(scored, key=lambda t: sign * trial_score(t, objective))  # type: ignore[operator]
    return ordered + [t for t in listed if t not in ordered]


def best_trial(trials: Iterable[TrialInfo], objective: Objective) -> TrialInfo | None:
    """The best trial that logged the primary metric and did not fail."""
    ranked = rank(trials, objective)
    return ranked[0] if ranked and trial_score(ranked[0], objective) is not None and ranked[0].status is not JobStatus.FAILED else None


def format_params(params: dict[str, Any]) -> str:
    """Hyperparameters as one line, floats to 4 significant digits: ``learning_rate=0.01235, momentum=0.8``."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def format_leaderboard(trials: Iterable[TrialInfo], objective: Objective) -> str:
    """A fixed-width table for task logs: rank, trial, status, score, epochs, params, why it stopped."""
    lines = [f"{'#':>2}  {'trial':<28} {'status':<9} {objective.primary_metric:>12} {'epochs':>6}  params / note"]
    for place, trial in enumerate(rank(trials, objective), start=1):
        score = trial_score(trial, objective)
        params = format_params(trial.params)
        note = trial.note
        shown = "-" if score is None else f"{score:.4f}"
        lines.append(f"{place:>2}  {trial.name:<28} {trial.status.value:<9} {shown:>12} {len(trial.history):>6}  {params}"
                     + (f"  [{note}]" if note else ""))
    return "\n".join(lines)
