"""Early-termination decisions as pure functions over the trials' metric histories.

Each logged value of the primary metric is one interval. A policy is applied at every multiple of
``evaluation_interval`` that is >= ``delay_evaluation``. :func:`evaluate` replays the intervals in order: at
each evaluation point it compares the trials that have reached it and are not already stopped, so the same
function serves the live sweep controller and an offline reference computation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from mlrunway.early_termination import bandit, median, truncation
from mlrunway.early_termination._common import Goal, Termination
from mlrunway.specs.policies import BanditPolicy, EarlyTerminationPolicy, MedianStoppingPolicy

__all__ = ["Termination", "evaluate", "evaluation_points"]


def evaluation_points(policy: EarlyTerminationPolicy, up_to: int) -> Iterator[int]:
    """Intervals (1-based) at which the policy is applied, up to ``up_to``."""
    step = policy.evaluation_interval
    first = max(step, -(-policy.delay_evaluation // step) * step)
    yield from range(first, up_to + 1, step)


def evaluate(
    policy: EarlyTerminationPolicy, histories: Mapping[str, Sequence[float]], goal: Goal
) -> dict[str, Termination]:
    """Return the trials that must stop, each with the first interval at which the policy stops it."""
    if isinstance(policy, BanditPolicy):
        decide = bandit.decide_at
    elif isinstance(policy, MedianStoppingPolicy):
        decide = median.decide_at
    else:
        decide = truncation.decide_at
    longest = max((len(h) for h in histories.values()), default=0)
    stopped: dict[str, Termination] = {}
    for k in evaluation_points(policy, longest):
        active = {t: h[:k] for t, h in histories.items() if len(h) >= k and t not in stopped}
        if active:
            stopped.update(decide(policy, active, goal, k, histories))  # type: ignore[arg-type]
    return stopped
