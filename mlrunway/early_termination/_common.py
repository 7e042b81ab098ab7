"""What every policy shares: the check of its two settings, the decision record and 'best so far' for a goal."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mlrunway import check

Goal = Literal["maximize", "minimize"]


def check_intervals(policy: str, evaluation_interval: Any, delay_evaluation: Any) -> None:
    """Every policy is applied each ``evaluation_interval`` intervals once ``delay_evaluation`` have passed."""
    check.positive_int(f"{policy}.evaluation_interval", evaluation_interval)
    check.positive_int(f"{policy}.delay_evaluation", delay_evaluation, minimum=0)


@dataclass(frozen=True)
class Termination:
    """Why a trial stops: at which interval, its value, and the threshold it missed."""

    trial: str
    interval: int
    value: float
    threshold: float
    reason: str

    def to_dict(self) -> dict[str, object]:
        return dict(vars(self))


def best_so_far(values: Sequence[float], goal: Goal) -> float:
    return max(values) if goal == "maximize" else min(values)


def worse(a: float, b: float, goal: Goal) -> bool:
    """True when ``a`` is strictly worse than ``b`` for this goal."""
    return a < b if goal == "maximize" else a > b
