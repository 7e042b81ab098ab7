"""The sweep spec, shaped like ``command(...)(**search_space).sweep(...)`` in azure-ai-ml."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.early_termination import EarlyTerminationPolicy, policy_from_dict
from mlrunway.errors import SpecError
from mlrunway.settings import (
    ANY_CASE,
    MAX_PRICE,
    NOT_A_FLAG,
    PRICE_WORDS,
    SettingsError,
    limit_setting,
    parse,
    price_setting,
    setting,
    worded,
)
from mlrunway.specs.job import PLACEHOLDER, CommandJobSpec
from mlrunway.specs.search_space import SearchExpression, expression_from_dict, to_dict

__all__ = ["Objective", "SamplingAlgorithm", "SweepBudget", "SweepLimits", "SweepSpec"]

Goal = Literal["maximize", "minimize"]
Sampling = Literal["random", "grid", "bayesian"]
Rule = Literal["random", "sobol"]
SAMPLING: tuple[str, ...] = get_args(Sampling)
RULES: tuple[str, ...] = get_args(Rule)
BAYESIAN_EXPRESSIONS = ("choice", "uniform", "quniform")  # Azure ML's rule for bayesian sampling


def _base(value: Any) -> float | str | None:
    """A base of logarithms: ``"e"``, or a positive finite number other than 1 (a numeric string, as a template
    renders it, is read as its number)."""
    if value in (None, "", "e"):
        return value or None
    base = float(value) if not isinstance(value, bool) and isinstance(value, int | float | str) else math.nan
    if not (base > 0 and base != 1 and math.isfinite(base)):
        raise ValueError("not a base of logarithms")
    return base


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid", defer_build=True))
class SamplingAlgorithm:
    """azure-ai-ml's ``sampling_algorithm``: ``"random"`` (``RandomSamplingAlgorithm(rule=, seed=, logbase=)``),
    ``"grid"`` or ``"bayesian"``, declared once (:mod:`mlrunway.settings`). The seed is the sweep's
    (``SweepSpec.seed``); the object form's ``seed`` lands there (:meth:`parse`)."""

    type: Annotated[Sampling, ANY_CASE] = setting(
        "random", description="random, grid (Choice only) or bayesian (choice, uniform and quniform only).",
        problem="{value!r} is not supported", fix=f"use one of {', '.join(SAMPLING)}")
    rule: Annotated[Rule, ANY_CASE] = setting(
        "random", description="random, or sobol (a scrambled, seeded Sobol sequence); random sampling only.",
        problem="{value!r} is not supported", fix=f"use one of {', '.join(RULES)}")
    logbase: Annotated[float | str | None, BeforeValidator(_base)] = setting(
        None, description='The base of log-scaled expressions (loguniform gives logbase**uniform(min, max)): a '
                          'positive number other than 1, or "e" (the default); random sampling only.',
        problem="{value!r} is not a base of logarithms", fix='pass a positive number other than 1, e.g. 10, or "e"')

    @model_validator(mode="after")
    def _random_only(self) -> SamplingAlgorithm:
        if self.type != "random" and (self.rule != "random" or self.logbase is not None):
            raise SettingsError("rule" if self.rule != "random" else "logbase",
                                f"applies to random sampling only, not {self.type}", "drop it, or use type 'random'")
        return self

    @property
    def base(self) -> float:
        """The base log-scaled expressions are drawn in."""
        return math.e if self.logbase in (None, "e") else float(self.logbase)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "rule": self.rule, "logbase": self.logbase}

    @classmethod
    def parse(cls, value: Any) -> tuple[SamplingAlgorithm, int | None]:
        """The algorithm and the seed it names, from ``"random"``, ``{"type": "random", "rule": "sobol", "seed":
        999, "logbase": "e"}``, a SamplingAlgorithm, or azure-ai-ml's ``RandomSamplingAlgorithm`` and kin."""
        if isinstance(value, SamplingAlgorithm):
            return value, None
        if isinstance(value, str):
            return cls(type=check.one_of("sweep.sampling_algorithm", value.lower(), SAMPLING)), None  # type: ignore[arg-type]
        if not isinstance(value, Mapping) and hasattr(value, "type"):  # the SDK's objects
            value = {k: v for k, v in vars(value).items() if v is not None and not k.startswith("_")}
        if not isinstance(value, Mapping):
            raise check.fail("sweep.sampling_algorithm", f"{value!r} is not a sampling algorithm",
                             'pass "random", "grid", "bayesian" or e.g. {"type": "random", "rule": "sobol", "seed": 7}')
        given = parse(SamplingObject, {str(k): v for k, v in value.items()}, "sweep.sampling_algorithm",
                      noun="sampling algorithm")
        return cls(type=given.type, rule=given.rule, logbase=given.logbase), given.seed


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid", defer_build=True))
class SamplingObject(SamplingAlgorithm):
    """azure-ai-ml's object form, ``RandomSamplingAlgorithm(rule=, seed=, logbase=)``: the algorithm and its seed."""

    seed: Annotated[int, Field(ge=0)] | None = setting(
        None, description="Makes random sampling reproducible.", problem="{value!r} is not an integer",
        fix="pass a whole number >= 0")


@dataclass(frozen=True, kw_only=True)
class Objective:
    """The metric the sweep optimizes; it must match the name the script logs with mlflow exactly."""

    primary_metric: str
    goal: Goal = "maximize"

    def __post_init__(self) -> None:
        if not isinstance(self.primary_metric, str) or not self.primary_metric.strip():
            raise check.fail("sweep.objective.primary_metric", "is empty", "pass the metric name the script logs")
        check.one_of("sweep.objective.goal", self.goal, ("maximize", "minimize"))


@dataclass(frozen=True, kw_only=True)
class SweepLimits:
    """Whichever limit comes first ends the sweep; timeouts are seconds."""

    max_total_trials: int = 20
    max_concurrent_trials: int | None = None
    timeout: float | None = None
    trial_timeout: float | None = None

    def __post_init__(self) -> None:
        check.positive_int("sweep.limits.max_total_trials", self.max_total_trials, maximum=1000)
        if self.max_concurrent_trials is None:
            object.__setattr__(self, "max_concurrent_trials", self.max_total_trials)
        check.positive_int("sweep.limits.max_concurrent_trials", self.max_concurrent_trials, maximum=1000)
        check.optional_seconds("sweep.limits.timeout", self.timeout)
        check.optional_seconds("sweep.limits.trial_timeout", self.trial_timeout)


@worded("sweep.budget", "sweep budget")
@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))  # built now: worded wraps its __init__
class SweepBudget:
    """What a sweep may spend (:mod:`mlrunway.ledger.budget` derives it from the run's budget): ``limit`` of
    ``measure`` (``cost`` in ``currency``, or ``hours`` of compute); ``rates`` the prices it was admitted with, by VM
    size (``<size>`` or ``<size>:<tier>``, per node-hour) and ``local_rate`` (per core-hour), which every watcher and
    controller prices its trials from; ``basis`` how it was derived, for the record. Validated when it is built,
    with the connection's rules and words (:mod:`mlrunway.settings`): a hand-built ``SweepSpec(budget=...)`` too."""

    limit: Annotated[float, NOT_A_FLAG] = limit_setting(
        ..., description="What the sweep may spend, in measure's unit.",
        problem="{value!r} is not an amount above 0", fix="give what the sweep may spend, e.g. 5")
    measure: Literal["cost", "hours"] = setting(
        ..., description="cost (money, in currency) or hours (of compute).",
        problem="{value!r} is not what a budget counts", fix="use cost or hours")
    currency: str = setting(
        "USD", pattern=r"^[A-Z]{3}$", description="The currency of limit and of every rate (ISO 4217).",
        problem="{value!r} is not a currency code", fix="use three capital letters, e.g. USD or EUR")
    local_rate: Annotated[float | None, NOT_A_FLAG] = price_setting(
        None, description="The price of a core-hour where the local backend's controller prices its trials.")
    rates: dict[Annotated[str, Field(min_length=1, max_length=100)], Annotated[float, NOT_A_FLAG, Field(
        ge=0, le=MAX_PRICE, allow_inf_nan=False, json_schema_extra=PRICE_WORDS)]] = setting(
        {}, description="The price of a node-hour of each VM size the sweep was admitted with.",
        problem="{value!r} is not a card of prices", fix='give {"<VM size>": <price per hour>, ...}')
    basis: str = setting("", description="How the limit was derived, for the record.",
                         problem="{value!r} is not text", fix="give the basis as text")

    def amount(self, value: float) -> str:
        """``4.93 USD`` or ``1.2 compute-hours``."""
        return f"{value:.4g} {self.currency if self.measure == 'cost' else 'compute-hours'}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A hyperparameter search over a command job.

    :param trial: the command job each trial runs, its search-space inputs replaced per trial.
    :param search_space: input name -> expression; each name must reach the command as ``${{inputs.name}}``.
    :param sampling_algorithm: ``random``, ``grid`` (Choice only) or ``bayesian`` (choice, uniform and
        quniform only, no early termination, as on Azure); or azure-ai-ml's object form, ``{"type": "random",
        "rule": "sobol", "seed": 999, "logbase": "e"}`` (see :class:`SamplingAlgorithm`).
    :param seed: makes random sampling reproducible (the object form's seed lands here).
    :param budget: what the sweep may spend (None: no budget), enforced where its trials start.
    """

    trial: CommandJobSpec
    search_space: Mapping[str, SearchExpression]
    objective: Objective
    sampling_algorithm: SamplingAlgorithm | Literal["random", "grid", "bayesian"] | Mapping[str, Any] = "random"
    seed: int | None = None
    limits: SweepLimits = field(default_factory=SweepLimits)
    early_termination: EarlyTerminationPolicy | None = None
    budget: SweepBudget | None = None

    def __post_init__(self) -> None:
        if not self.search_space:
            raise check.fail("sweep.search_space", "is empty", "pass at least one input to search over")
        space = {name: expression_from_dict(f"sweep.search_space.{name}", e) for name, e in self.search_space.items()}
        used = {name for section, name in PLACEHOLDER.findall(self.trial.command) if section == "inputs"}
        for name in space:
            if name not in used:
                raise check.fail(
                    f"sweep.search_space.{name}",
                    "never reaches the trial's command line",
                    f"add an argument such as --{name.replace('_', '-')} ${{{{inputs.{name}}}}} to the command",
                )
        sampling, seed = SamplingAlgorithm.parse(self.sampling_algorithm)
        if seed is not None and self.seed not in (None, seed):
            raise check.fail("sweep.seed", f"{self.seed} differs from sampling_algorithm.seed {seed}", "pass one seed")
        object.__setattr__(self, "sampling_algorithm", sampling)
        object.__setattr__(self, "seed", self.seed if seed is None else seed)
        if self.seed is not None:
            check.positive_int("sweep.seed", self.seed, minimum=0)
        if sampling.type == "grid":
            from mlrunway.specs.search_space import grid_values

            for name, expr in space.items():
                grid_values(f"sweep.search_space.{name}", expr)
        if sampling.type == "bayesian":
            _check_bayesian(space, self.early_termination)
        if self.limits.max_concurrent_trials > self.limits.max_total_trials:  # type: ignore[operator]
            raise check.fail(
                "sweep.limits.max_concurrent_trials",
                f"{self.limits.max_concurrent_trials} is more than max_total_trials {self.limits.max_total_trials}",
                "lower it to at most max_total_trials",
            )
        object.__setattr__(self, "search_space", MappingProxyType(space))

    @property
    def sampling(self) -> SamplingAlgorithm:
        """``sampling_algorithm``, always the object (``__post_init__`` turned any form into one)."""
        return self.sampling_algorithm  # type: ignore[return-value]

    def to_dict(self) -> dict[str, Any]:
        policy = self.early_termination
        return {
            "trial": self.trial.to_dict(),
            "search_space": {name: to_dict(e) for name, e in self.search_space.items()},
            "objective": {"primary_metric": self.objective.primary_metric, "goal": self.objective.goal},
            "sampling_algorithm": self.sampling.to_dict(),
            "seed": self.seed,
            "limits": dict(vars(self.limits)),
            "early_termination": None if policy is None else dict(vars(policy)),
            **({"budget": self.budget.to_dict()} if self.budget is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepSpec:
        try:
            return cls(
                trial=CommandJobSpec.from_dict(data["trial"]),
                search_space=dict(data["search_space"]),
                objective=Objective(**data["objective"]),
                sampling_algorithm=data.get("sampling_algorithm", "random"),
                seed=data.get("seed"),
                limits=SweepLimits(**data.get("limits", {})),
                early_termination=policy_from_dict(data.get("early_termination")),
                budget=SweepBudget(**data["budget"]) if data.get("budget") else None,
            )
        except KeyError as exc:
            raise SpecError(f"sweep.{exc.args[0]}: is missing; pass it") from exc


def _check_bayesian(space: Mapping[str, SearchExpression], policy: EarlyTerminationPolicy | None) -> None:
    """Azure ML's rules for bayesian sampling, enforced before launch on both backends."""
    for name, expr in space.items():
        if expr.type not in BAYESIAN_EXPRESSIONS:
            raise check.fail(f"sweep.search_space.{name}", f"bayesian sampling takes choice, uniform and quniform "
                             f"only, not {expr.type} (Azure ML's rule)",
                             "use one of those (a log range as uniform over its logs in the script), or random sampling")
    if policy is not None:
        raise check.fail("sweep.early_termination", "bayesian sampling takes no early-termination policy (Azure ML's "
                         "rule)", "drop early_termination, or use random sampling")
