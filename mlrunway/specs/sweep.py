"""The sweep spec, shaped like ``command(...)(**search_space).sweep(...)`` in azure-ai-ml."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from mlrunway.errors import SpecError
from mlrunway.specs import check
from mlrunway.specs.job import PLACEHOLDER, CommandJobSpec
from mlrunway.specs.policies import EarlyTerminationPolicy, policy_from_dict
from mlrunway.specs.search_space import SearchExpression, expression_from_dict, to_dict

__all__ = ["Objective", "SweepLimits", "SweepSpec"]

Goal = Literal["maximize", "minimize"]
SAMPLING = ("random", "grid", "bayesian")


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


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A hyperparameter search over a command job.

    :param trial: the command job each trial runs, its search-space inputs replaced per trial.
    :param search_space: input name -> expression; each name must reach the command as ``${{inputs.name}}``.
    :param sampling_algorithm: ``random``, ``grid`` (Choice only) or ``bayesian`` (Azure only).
    :param seed: makes random sampling reproducible.
    """

    trial: CommandJobSpec
    search_space: Mapping[str, SearchExpression]
    objective: Objective
    sampling_algorithm: Literal["random", "grid", "bayesian"] = "random"
    seed: int | None = None
    limits: SweepLimits = field(default_factory=SweepLimits)
    early_termination: EarlyTerminationPolicy | None = None

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
        check.one_of("sweep.sampling_algorithm", self.sampling_algorithm, SAMPLING)
        if self.seed is not None:
            check.positive_int("sweep.seed", self.seed, minimum=0)
        if self.sampling_algorithm == "grid":
            from mlrunway.specs.search_space import grid_values

            for name, expr in space.items():
                grid_values(f"sweep.search_space.{name}", expr)
        if self.limits.max_concurrent_trials > self.limits.max_total_trials:  # type: ignore[operator]
            raise check.fail(
                "sweep.limits.max_concurrent_trials",
                f"{self.limits.max_concurrent_trials} is more than max_total_trials {self.limits.max_total_trials}",
                "lower it to at most max_total_trials",
            )
        object.__setattr__(self, "search_space", MappingProxyType(space))

    def to_dict(self) -> dict[str, Any]:
        policy = self.early_termination
        return {
            "trial": self.trial.to_dict(),
            "search_space": {name: to_dict(e) for name, e in self.search_space.items()},
            "objective": {"primary_metric": self.objective.primary_metric, "goal": self.objective.goal},
            "sampling_algorithm": self.sampling_algorithm,
            "seed": self.seed,
            "limits": dict(vars(self.limits)),
            "early_termination": None if policy is None else dict(vars(policy)),
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
            )
        except KeyError as exc:
            raise SpecError(f"sweep.{exc.args[0]}: is missing; pass it") from exc
