"""Early-termination policies (one module each, found by name in :mod:`.registry`) and their decisions, as pure
functions over the trials' metric histories.

Each logged value of the primary metric is one interval. A policy is applied at every multiple of
``evaluation_interval`` that is >= ``delay_evaluation``.

Two ways to choose whom a trial is compared with:

- :func:`evaluate` replays the intervals in order: at each evaluation point it compares every trial that has
  reached it and is not already stopped. That is Azure ML's picture with all curves known in advance; live,
  the service judges as metrics arrive, so what a trial is compared with depends on timing.
- :func:`evaluate_in_order` is the local controller's rule, which repeats: trial *i* is judged at interval *k*
  against trials 0..i-1 (the ones that started before it), each as far as it got by *k* (a stopped one up to
  where it was stopped). :func:`decide` is one such judgement; the controller waits, within a bound, for the
  earlier trials still short of *k*, so CPU contention and restarts do not change what is decided.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from mlrunway.early_termination._common import Goal, Termination, best_so_far
from mlrunway.early_termination.registry import POLICIES, EarlyTerminationPolicy, Policy, policy_from_dict

__all__ = ["POLICIES", "EarlyTerminationPolicy", "Goal", "Policy", "Termination", "applies_at", "best_so_far",
           "decide", "evaluate", "evaluate_in_order", "evaluation_points", "first_stop", "policy_from_dict"]


def _first_point(evaluation_interval: int, delay_evaluation: int) -> int:
    return max(evaluation_interval, -(-delay_evaluation // evaluation_interval) * evaluation_interval)


def evaluation_points(policy: EarlyTerminationPolicy, up_to: int) -> Iterator[int]:
    """Intervals (1-based) at which the policy is applied, up to ``up_to``."""
    first = _first_point(policy.evaluation_interval, policy.delay_evaluation)
    yield from range(first, up_to + 1, policy.evaluation_interval)


def first_stop(policy: EarlyTerminationPolicy, intervals: int) -> int | None:
    """The first interval at which the policy could stop a trial that logs ``intervals`` values and still save
    some of it (a stop at the last one saves nothing); None: with these settings it never can."""
    return next(evaluation_points(policy, intervals - 1), None)


def applies_at(evaluation_interval: int, delay_evaluation: int, interval: int) -> bool:
    """Whether a policy with these settings is applied at ``interval`` (1-based): the evidence that a trial
    canceled there may have been stopped by it, and that one canceled elsewhere was not."""
    first = _first_point(evaluation_interval, delay_evaluation)
    return interval >= first and (interval - first) % evaluation_interval == 0


def evaluate(
    policy: EarlyTerminationPolicy, histories: Mapping[str, Sequence[float]], goal: Goal
) -> dict[str, Termination]:
    """Return the trials that must stop, each with the first interval at which the policy stops it."""
    longest = max((len(h) for h in histories.values()), default=0)
    stopped: dict[str, Termination] = {}
    for k in evaluation_points(policy, longest):
        active = {t: h[:k] for t, h in histories.items() if len(h) >= k and t not in stopped}
        if active:
            stopped.update(_decide_at(policy, active, goal, k, histories))
    return stopped


def _decide_at(policy: EarlyTerminationPolicy, active: Mapping[str, Sequence[float]], goal: Goal, k: int,
               everyone: Mapping[str, Sequence[float]]) -> dict[str, Termination]:
    return POLICIES[policy.type].decide_at(policy, active, goal, k, everyone)


def decide(policy: EarlyTerminationPolicy, cohort: Mapping[str, Sequence[float]], goal: Goal, k: int,
           trial: str) -> Termination | None:
    """Whether ``trial`` stops at interval ``k``, judged against ``cohort``: the trials that started before it
    and itself, in start order, each with the values it logged (a stopped one's up to where it was stopped).
    Those that reached ``k`` are compared at ``k``; the median's running averages take every trial's first
    ``k`` values, or all it has."""
    active = {t: h[:k] for t, h in cohort.items() if len(h) >= k}
    return _decide_at(policy, active, goal, k, cohort).get(trial) if trial in active else None


def evaluate_in_order(
    policy: EarlyTerminationPolicy, histories: Mapping[str, Sequence[float]], goal: Goal
) -> dict[str, Termination]:
    """The local controller's decisions from complete curves, ``histories`` in start order: each trial judged
    at each evaluation point against the ones before it, as far as they got (see :func:`decide`)."""
    judged: dict[str, Sequence[float]] = {}
    stopped: dict[str, Termination] = {}
    for trial, values in histories.items():
        judged[trial] = values
        for k in evaluation_points(policy, len(values)):
            if (stop := decide(policy, judged, goal, k, trial)) is not None:
                stopped[trial], judged[trial] = stop, values[:k]
                break
    return stopped
