"""Truncation selection: at each evaluation, stop the lowest ``truncation_percentage`` percent of trials.

Trials are ranked by their best value up to the same interval; ties keep the trial listed earlier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from mlrunway import check
from mlrunway.early_termination._common import Goal, Termination, best_so_far, check_intervals


@dataclass(frozen=True, kw_only=True)
class TruncationSelectionPolicy:
    """At each evaluation, stop the lowest ``truncation_percentage`` percent of trials."""

    type: Literal["truncation_selection"] = "truncation_selection"
    truncation_percentage: int = 10
    evaluation_interval: int = 1
    delay_evaluation: int = 0

    def __post_init__(self) -> None:
        check_intervals("truncation_selection", self.evaluation_interval, self.delay_evaluation)
        check.positive_int("truncation_selection.truncation_percentage", self.truncation_percentage, maximum=99)


def decide_at(
    policy: TruncationSelectionPolicy, values: Mapping[str, Sequence[float]], goal: Goal, interval: int,
    everyone: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, Termination]:
    ys = {trial: best_so_far(v, goal) for trial, v in values.items()}
    cut = len(ys) * policy.truncation_percentage // 100
    if cut == 0:
        return {}
    sign = 1 if goal == "maximize" else -1
    order = {trial: i for i, trial in enumerate(ys)}
    ranked = sorted(ys, key=lambda t: (sign * ys[t], -order[t]))  # worst first; among equals, later first
    survivors_floor = ys[ranked[cut]]
    return {
        trial: Termination(
            trial, interval, ys[trial], survivors_floor,
            f"truncation_selection: in the lowest {policy.truncation_percentage}% of {len(ys)} trials",
        )
        for trial in ranked[:cut]
    }

