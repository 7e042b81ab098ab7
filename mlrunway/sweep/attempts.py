"""A retried sweep keeps what its earlier attempts completed: their trials (records, metrics, models) are
carried over, and the new attempt runs only the rest (:mod:`mlrunway.backend.attempts` names the attempts)."""

from __future__ import annotations

from dataclasses import replace

from mlrunway.backend.attempts import earlier_attempts
from mlrunway.backend.naming import attempt_number, base_name
from mlrunway.backend.protocol import Jobs
from mlrunway.backend.types import JobStatus, SweepResult, TrialInfo
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep.leaderboard import best_trial

__all__ = ["carried_trials", "spec_for_attempt", "sweep_result"]


def carried_trials(jobs: Jobs, name: str) -> tuple[TrialInfo, ...]:
    """The trials that earlier attempts of sweep ``name`` completed, oldest attempt first."""
    carried: dict[str, TrialInfo] = {}
    for attempt in earlier_attempts(jobs, name, base_name(name)):
        for trial in jobs.sweep_result(attempt.name).trials:
            if trial.status is JobStatus.COMPLETED:
                carried.setdefault(trial.name, trial)
    return tuple(carried.values())


def sweep_result(jobs: Jobs, name: str) -> SweepResult:
    """Sweep ``name``'s result with its earlier attempts' completed trials in it; the best of them all."""
    result = jobs.sweep_result(name)
    carried = carried_trials(jobs, name)
    if not carried:
        return result
    trials = (*carried, *result.trials)
    best = best_trial(trials, result.objective)
    return replace(result, trials=trials, best_trial=best.name if best else None,
                   carried_over=tuple(t.name for t in carried))


def spec_for_attempt(spec: SweepSpec, name: str, carried: tuple[TrialInfo, ...]) -> SweepSpec:
    """The sweep that attempt ``name`` runs: the trials the carried ones leave, sampled afresh (a seed of its
    own, so random sampling does not redraw the carried trials' points)."""
    if not carried:
        return spec
    remaining = max(1, spec.limits.max_total_trials - len(carried))
    concurrent = min(spec.limits.max_concurrent_trials or remaining, remaining)
    limits = replace(spec.limits, max_total_trials=remaining, max_concurrent_trials=concurrent)
    return replace(spec, limits=limits, seed=(spec.seed or 0) + attempt_number(name) - 1)
