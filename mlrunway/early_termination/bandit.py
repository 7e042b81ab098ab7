"""Bandit: stop a trial whose best value, widened by the slack, still falls short of the best trial's.

Maximize (Azure's documented rule): stop if ``Y * (1 + slack_factor) < best`` or ``Y + slack_amount < best``.
Minimize (Azure documents no formula; this is the mirror): stop if ``Y > best * (1 + slack_factor)`` or
``Y > best + slack_amount``. Y is the trial's best value so far, best the best of all trials at that interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from mlrunway import check
from mlrunway.early_termination._common import Goal, Termination, best_so_far, check_intervals, worse


@dataclass(frozen=True, kw_only=True)
class BanditPolicy:
    """Stop trials whose best metric, widened by the slack, falls short of the best trial's."""

    type: Literal["bandit"] = "bandit"
    slack_factor: float | None = None
    slack_amount: float | None = None
    evaluation_interval: int = 1
    delay_evaluation: int = 0

    def __post_init__(self) -> None:
        check_intervals("bandit", self.evaluation_interval, self.delay_evaluation)
        if (self.slack_factor is None) == (self.slack_amount is None):
            raise check.fail(
                "bandit", "needs exactly one of slack_factor and slack_amount", "pass one, e.g. slack_factor=0.15"
            )
        for name in ("slack_factor", "slack_amount"):
            value = getattr(self, name)
            if value is not None and check.number(f"bandit.{name}", value) <= 0:
                raise check.fail(f"bandit.{name}", f"{value} is not positive", f"pass {name} > 0")


def threshold(policy: BanditPolicy, best: float, goal: Goal) -> float:
    """The value a trial must reach to keep running."""
    if policy.slack_factor is not None:
        return best / (1 + policy.slack_factor) if goal == "maximize" else best * (1 + policy.slack_factor)
    assert policy.slack_amount is not None
    return best - policy.slack_amount if goal == "maximize" else best + policy.slack_amount


def decide_at(
    policy: BanditPolicy, values: Mapping[str, Sequence[float]], goal: Goal, interval: int,
    everyone: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, Termination]:
    """Decide at one interval; ``values`` holds each active trial's first ``interval`` values."""
    ys = {trial: best_so_far(v, goal) for trial, v in values.items()}
    best = best_so_far(list(ys.values()), goal)
    limit = threshold(policy, best, goal)
    slack = f"slack_factor {policy.slack_factor}" if policy.slack_factor is not None else f"slack_amount {policy.slack_amount}"
    return {
        trial: Termination(trial, interval, y, limit, f"bandit: best {y:.4g} outside {slack} of best trial's {best:.4g}")
        for trial, y in ys.items()
        if worse(y, limit, goal)
    }
