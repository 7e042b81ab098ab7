"""Early-termination decisions as pure functions over the trials' metric histories.

Each logged value of the primary metric is one interval. A policy is applied at every multiple of
``evaluation_interval`` that is >= ``delay_evaluation``. :func:`evaluate` replays the intervals in order: at
each evaluation point it compares the trials that have reached it and are not already stopped, so the same
function serves the live sweep controller and an offline reference computation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from mlrunway.early_termination import bandit, median, truncation
from mlrunway.early_termination._common import Goal, Termination, best_so_far
from mlrunway.specs.policies import BanditPolicy, EarlyTerminationPolicy, MedianStoppingPolicy

__all__ = ["Goal", "Termination", "applies_at", "best_so_far", "evaluate", "evaluation_points"]


def _first_point(evaluation_interval: int, delay_evaluation: int) -> int:
    return max(evaluation_interval, -(-delay_evaluation // evaluation_interval) * evaluation_interval)


def evaluation_points(policy: EarlyTerminationPolicy, up_to: int) -> Iterator[int]:
    """Intervals (1-based) at which the policy is applied, up to ``up_to``."""
    first = _first_point(policy.evaluation_interval, policy.delay_evaluation)
    yield from range(first, up_to + 1, policy.evaluation_interval)


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
        if not active:
            continue
        if isinstance(policy, BanditPolicy):
            stopped.update(bandit.decide_at(policy, active, goal, k, histories))
        elif isinstance(policy, MedianStoppingPolicy):
            stopped.update(median.decide_at(policy, active, goal, k, histories))
        else:
            stopped.update(truncation.decide_at(policy, active, goal, k, histories))
    return stopped
