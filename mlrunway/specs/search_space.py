"""Search-space expressions with the names and semantics of ``azure.ai.ml.sweep``.

``LogUniform`` and ``QLogUniform`` take their bounds in log space (values range over e^min..e^max), as on
Azure. ``LogUniform.from_range(low, high)`` takes the values themselves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mlrunway import check
from mlrunway.compat import type_from_kind
from mlrunway.errors import SpecError

__all__ = [
    "Choice",
    "LogNormal",
    "LogUniform",
    "Normal",
    "QLogNormal",
    "QLogUniform",
    "QNormal",
    "QUniform",
    "Randint",
    "SearchExpression",
    "Uniform",
    "expression_from_dict",
]


class _Expression:
    """Validate on construction; SweepSpec prefixes the error with the parameter's name."""

    def __post_init__(self) -> None:
        self.validate(self.type)  # type: ignore[attr-defined]


def _bounds(field: str, low: Any, high: Any) -> None:
    low, high = check.number(f"{field}.min_value", low), check.number(f"{field}.max_value", high)
    if low >= high:
        raise check.fail(field, f"min_value {low} is not less than max_value {high}", "swap or widen the bounds")


def _step(field: str, q: Any) -> None:
    if check.number(f"{field}.q", q) <= 0:
        raise check.fail(f"{field}.q", f"{q} is not positive", "pass a step q > 0")


@dataclass(frozen=True, kw_only=True)
class Choice(_Expression):
    type: Literal["choice"] = "choice"
    values: tuple[Any, ...]

    def validate(self, field: str) -> None:
        if not isinstance(self.values, (tuple, list)) or not self.values:
            raise check.fail(field, "Choice has no values", "pass at least one value, e.g. Choice(values=[16, 32])")
        object.__setattr__(self, "values", tuple(self.values))


@dataclass(frozen=True, kw_only=True)
class Uniform(_Expression):
    type: Literal["uniform"] = "uniform"
    min_value: float
    max_value: float

    def validate(self, field: str) -> None:
        _bounds(field, self.min_value, self.max_value)


@dataclass(frozen=True, kw_only=True)
class LogUniform(_Expression):
    """exp(Uniform(min_value, max_value)): bounds are natural logs of the values."""

    type: Literal["loguniform"] = "loguniform"
    min_value: float
    max_value: float

    def validate(self, field: str) -> None:
        _bounds(field, self.min_value, self.max_value)

    @classmethod
    def from_range(cls, low: float, high: float) -> LogUniform:
        """Build from the values' own range, e.g. ``from_range(1e-4, 1e-1)`` for a learning rate."""
        for name, value in (("low", low), ("high", high)):
            if check.number(f"LogUniform.from_range.{name}", value) <= 0:
                raise check.fail(f"LogUniform.from_range.{name}", f"log of non-positive {value}", "pass values > 0")
        return cls(min_value=math.log(low), max_value=math.log(high))


@dataclass(frozen=True, kw_only=True)
class QUniform(_Expression):
    type: Literal["quniform"] = "quniform"
    min_value: float
    max_value: float
    q: float

    def validate(self, field: str) -> None:
        _bounds(field, self.min_value, self.max_value)
        _step(field, self.q)


@dataclass(frozen=True, kw_only=True)
class QLogUniform(_Expression):
    type: Literal["qloguniform"] = "qloguniform"
    min_value: float
    max_value: float
    q: float

    def validate(self, field: str) -> None:
        QUniform.validate(self, field)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Normal(_Expression):
    type: Literal["normal"] = "normal"
    mu: float
    sigma: float

    def validate(self, field: str) -> None:
        check.number(f"{field}.mu", self.mu)
        if check.number(f"{field}.sigma", self.sigma) <= 0:
            raise check.fail(f"{field}.sigma", f"{self.sigma} is not positive", "pass sigma > 0")


@dataclass(frozen=True, kw_only=True)
class LogNormal(_Expression):
    type: Literal["lognormal"] = "lognormal"
    mu: float
    sigma: float

    def validate(self, field: str) -> None:
        Normal.validate(self, field)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class QNormal(_Expression):
    """round(Normal(mu, sigma) / q) * q."""

    type: Literal["qnormal"] = "qnormal"
    mu: float
    sigma: float
    q: float

    def validate(self, field: str) -> None:
        Normal.validate(self, field)  # type: ignore[arg-type]
        _step(field, self.q)


@dataclass(frozen=True, kw_only=True)
class QLogNormal(_Expression):
    """round(exp(Normal(mu, sigma)) / q) * q."""

    type: Literal["qlognormal"] = "qlognormal"
    mu: float
    sigma: float
    q: float

    def validate(self, field: str) -> None:
        QNormal.validate(self, field)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Randint(_Expression):
    """Integers in [0, upper)."""

    type: Literal["randint"] = "randint"
    upper: int

    def validate(self, field: str) -> None:
        check.positive_int(f"{field}.upper", self.upper)


SearchExpression = (Choice | Uniform | LogUniform | QUniform | QLogUniform | Normal | LogNormal | QNormal | QLogNormal
                    | Randint)
_TYPES: dict[str, type] = {
    cls.type: cls
    for cls in (Choice, Uniform, LogUniform, QUniform, QLogUniform, Normal, LogNormal, QNormal, QLogNormal, Randint)
}
EXPRESSIONS: tuple[str, ...] = tuple(_TYPES)  # the expressions' type names, as a form lists them


def expression_from_dict(field: str, data: Mapping[str, Any] | SearchExpression) -> SearchExpression:
    """Build an expression from ``{"type": "uniform", "min_value": ..., ...}`` (or pass one through)."""
    if isinstance(data, tuple(_TYPES.values())):
        return data  # type: ignore[return-value]
    if not isinstance(data, Mapping):
        raise check.fail(field, f"{data!r} is not a search expression", "pass e.g. Uniform(min_value=0.001, max_value=0.1)")
    fields = type_from_kind(field, data)
    name = check.one_of(f"{field}.type", fields.get("type"), tuple(_TYPES))
    try:
        return _TYPES[name](**fields)
    except TypeError as exc:
        raise check.fail(field, f"bad arguments for {name} ({exc})", "see azure.ai.ml.sweep for its arguments") from exc
    except SpecError as exc:
        raise SpecError(f"{field}.{exc}") from exc


def to_dict(expr: SearchExpression) -> dict[str, Any]:
    data = dict(vars(expr))
    if isinstance(expr, Choice):
        data["values"] = list(expr.values)
    return data


def grid_values(field: str, expr: SearchExpression) -> Sequence[Any]:
    if not isinstance(expr, Choice):
        raise check.fail(field, f"grid sampling needs Choice, got {expr.type}", "use Choice or sampling_algorithm='random'")
    return expr.values
