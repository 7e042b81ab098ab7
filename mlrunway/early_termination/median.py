"""Median stopping: stop a trial whose best value is worse than the median of all trials' running averages.

The median at interval k is over every trial that has logged a value, each averaged over its first k values
(or all it has, for a trial that ended or was stopped sooner), as in Vizier's rule that Azure ML follows.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from mlrunway.early_termination._common import Goal, Termination, best_so_far, check_intervals, worse


@dataclass(frozen=True, kw_only=True)
class MedianStoppingPolicy:
    """Stop trials whose best metric is worse than the median of all trials' running averages."""

    type: Literal["median_stopping"] = "median_stopping"
    evaluation_interval: int = 1
    delay_evaluation: int = 0

    def __post_init__(self) -> None:
        check_intervals("median_stopping", self.evaluation_interval, self.delay_evaluation)


def decide_at(
    policy: MedianStoppingPolicy, values: Mapping[str, Sequence[float]], goal: Goal, interval: int,
    everyone: Mapping[str, Sequence[float]],
) -> dict[str, Termination]:
    median = statistics.median(statistics.fmean(h[:interval]) for h in everyone.values() if h)
    decisions = {}
    for trial, v in values.items():
        y = best_so_far(v, goal)
        if worse(y, median, goal):
            reason = f"median_stopping: best {y:.4g} worse than median running average {median:.4g}"
            decisions[trial] = Termination(trial, interval, y, median, reason)
    return decisions
