"""The early-termination policies, by the name azure-ai-ml gives each.

A policy is one module: its spec, a frozen dataclass named and defaulted like ``azure.ai.ml.sweep``'s
(``evaluation_interval`` defaults to 1, the YAML reference's value, not the SDK's 0), and its ``decide_at``.
Adding one is that module and its line in :data:`POLICIES`; the specs, the operators' vocabulary and the local
controller find it here. A backend whose service lacks it refuses it before any job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from mlrunway import check
from mlrunway.compat import type_from_kind
from mlrunway.early_termination import bandit, median, truncation
from mlrunway.early_termination._common import Goal, Termination

__all__ = ["POLICIES", "EarlyTerminationPolicy", "Policy", "policy_from_dict"]


class EarlyTerminationPolicy(Protocol):
    """What every policy's spec has: its name and where it is applied."""

    @property
    def type(self) -> str: ...
    @property
    def evaluation_interval(self) -> int: ...
    @property
    def delay_evaluation(self) -> int: ...


class Policy(NamedTuple):
    """A policy's spec class and its decision at one interval: ``decide_at(policy, active, goal, interval,
    everyone)`` -> the active trials it stops (``active``: each one's first ``interval`` values)."""

    spec: type[EarlyTerminationPolicy]
    decide_at: Callable[[Any, Mapping[str, Sequence[float]], Goal, int, Mapping[str, Sequence[float]]],
                        dict[str, Termination]]


POLICIES: dict[str, Policy] = {
    "bandit": Policy(bandit.BanditPolicy, bandit.decide_at),
    "median_stopping": Policy(median.MedianStoppingPolicy, median.decide_at),
    "truncation_selection": Policy(truncation.TruncationSelectionPolicy, truncation.decide_at),
}


def policy_from_dict(data: Mapping[str, Any] | EarlyTerminationPolicy | None) -> EarlyTerminationPolicy | None:
    """A policy from ``to_dict`` output (``{"type": "bandit", ...}``), or a policy as it is."""
    if data is None or not isinstance(data, Mapping):
        return data
    fields = type_from_kind("early_termination", data)
    name = check.one_of("early_termination.type", fields.get("type"), tuple(POLICIES))
    try:
        return POLICIES[name].spec(**fields)
    except TypeError as exc:
        raise check.fail("early_termination", f"bad arguments for {name} ({exc})", "see azure.ai.ml.sweep") from exc
