"""Early-termination policies, named and defaulted like ``azure.ai.ml.sweep``.

``evaluation_interval`` defaults to 1 here (the YAML reference's value), not to the SDK's 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mlrunway import check

__all__ = [
    "BanditPolicy",
    "EarlyTerminationPolicy",
    "MedianStoppingPolicy",
    "TruncationSelectionPolicy",
    "policy_from_dict",
]


def _intervals(name: str, evaluation_interval: Any, delay_evaluation: Any) -> None:
    check.positive_int(f"{name}.evaluation_interval", evaluation_interval)
    check.positive_int(f"{name}.delay_evaluation", delay_evaluation, minimum=0)


@dataclass(frozen=True, kw_only=True)
class BanditPolicy:
    """Stop trials whose best metric, widened by the slack, falls short of the best trial's."""

    kind: Literal["bandit"] = "bandit"
    slack_factor: float | None = None
    slack_amount: float | None = None
    evaluation_interval: int = 1
    delay_evaluation: int = 0

    def __post_init__(self) -> None:
        _intervals("bandit", self.evaluation_interval, self.delay_evaluation)
        if (self.slack_factor is None) == (self.slack_amount is None):
            raise check.fail(
                "bandit", "needs exactly one of slack_factor and slack_amount", "pass one, e.g. slack_factor=0.15"
            )
        for name in ("slack_factor", "slack_amount"):
            value = getattr(self, name)
            if value is not None and check.number(f"bandit.{name}", value) <= 0:
                raise check.fail(f"bandit.{name}", f"{value} is not positive", f"pass {name} > 0")


@dataclass(frozen=True, kw_only=True)
class MedianStoppingPolicy:
    """Stop trials whose best metric is worse than the median of all trials' running averages."""

    kind: Literal["median_stopping"] = "median_stopping"
    evaluation_interval: int = 1
    delay_evaluation: int = 0

    def __post_init__(self) -> None:
        _intervals("median_stopping", self.evaluation_interval, self.delay_evaluation)


@dataclass(frozen=True, kw_only=True)
class TruncationSelectionPolicy:
    """At each evaluation, stop the lowest ``truncation_percentage`` percent of trials."""

    kind: Literal["truncation_selection"] = "truncation_selection"
    truncation_percentage: int = 10
    evaluation_interval: int = 1
    delay_evaluation: int = 0

    def __post_init__(self) -> None:
        _intervals("truncation_selection", self.evaluation_interval, self.delay_evaluation)
        check.positive_int("truncation_selection.truncation_percentage", self.truncation_percentage, maximum=99)


EarlyTerminationPolicy = BanditPolicy | MedianStoppingPolicy | TruncationSelectionPolicy
_KINDS: dict[str, type] = {"bandit": BanditPolicy, "median_stopping": MedianStoppingPolicy,
                           "truncation_selection": TruncationSelectionPolicy}


def policy_from_dict(data: Mapping[str, Any] | EarlyTerminationPolicy | None) -> EarlyTerminationPolicy | None:
    if data is None or isinstance(data, (BanditPolicy, MedianStoppingPolicy, TruncationSelectionPolicy)):
        return data
    kind = check.one_of("early_termination.kind", data.get("kind"), tuple(_KINDS))
    try:
        return _KINDS[kind](**data)
    except TypeError as exc:
        raise check.fail("early_termination", f"bad arguments for {kind} ({exc})", "see azure.ai.ml.sweep") from exc
