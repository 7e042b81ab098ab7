"""The champion/challenger strategy's settings (:mod:`mlrunway.deploy.champion_challenger`), declared once
(:mod:`mlrunway.settings`): the deploy task's ``production`` object, which the task hands over as it rendered it.

The promotion's own fields (``endpoint_name``, ``require_approval``, ``min_improvement``) are
:class:`~mlrunway.deploy.gate.Promotion`'s; ``rollout`` is a :class:`~mlrunway.deploy.rollout.RolloutPolicy`, its
window defaulting to the backend's and checked against its metrics lag; ``evaluation`` is the gate's set
(:class:`~mlrunway.deploy.gate.Evaluation`), kept as given for the gate to read; then how long a person may take
to answer and the alias a rollback deploys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Strict, ValidationInfo, field_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.backend.protocol import Backend
from mlrunway.deploy.gate import Promotion
from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.settings import EMPTY_IS_NONE, NOT_A_FLAG, parse, setting

__all__ = ["APPROVAL_TIMEOUT_S", "ProductionSettings"]

APPROVAL_TIMEOUT_S = 7 * 24 * 3600.0  # a week for a person's answer; past it the challenger is held
_WEEK_IF_EMPTY = BeforeValidator(lambda value: APPROVAL_TIMEOUT_S if value in ("", 0) else value)  # as 0.2.x read it


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class ProductionSettings(Promotion):
    """A stable endpoint's settings: the promotion (:class:`~mlrunway.deploy.gate.Promotion`), the evaluation set,
    the staged rollout, how long an approval may take and a rollback's target. :meth:`read` reads the deploy task's
    ``production`` object; a bad field is a SpecError naming it and the fix."""

    evaluation: dict[str, Any] | None = setting(
        None, description="The gate's evaluation set and how sure it must be (mlrunway.deploy.gate.Evaluation); "
                          "empty: an image classifier's test/ split.",
        problem="{value!r} is not a mapping",
        fix="give the evaluation settings as an object, or leave it empty for the defaults")
    rollout: RolloutPolicy = setting(
        None, validate_default=True, description="The staged rollout (mlrunway.deploy.rollout.RolloutPolicy); its "
                                                 "window_s defaults to the backend's.",
        problem="{value!r} is not a mapping", fix="give the rollout settings as an object, or leave it empty")
    rollback_to: Annotated[Annotated[str, Strict()] | None, EMPTY_IS_NONE] = setting(
        None, min_length=1, description="A registry alias (previous): deploy the version holding it, through the "
                                        "same staged rollout, without the gate.",
        problem="{value!r} is not an alias", fix="name an alias a promotion set (previous, production)")
    approval_timeout_s: Annotated[float, NOT_A_FLAG, _WEEK_IF_EMPTY] = setting(
        APPROVAL_TIMEOUT_S, gt=0, allow_inf_nan=False,
        description="How long a person may take to answer (with require_approval); no answer by then: held.",
        problem="{value!r} is not a number of seconds > 0", fix=f"write e.g. {APPROVAL_TIMEOUT_S:.0f} (a week)")

    @field_validator("rollout", mode="before")
    @classmethod
    def _policy(cls, value: Any, info: ValidationInfo) -> Any:
        """The rollout through its own group's parse: its words (``rollout.steps: ...``), its window defaulting to
        the backend's (``rollout_window_s`` in the validation context) and checked against its metrics lag."""
        if isinstance(value, RolloutPolicy):
            return value
        context = info.context or {}
        return RolloutPolicy.parse(value, default_window_s=context.get("rollout_window_s"),
                                   metrics_lag_s=float(context.get("metrics_lag_s") or 0.0))

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The settings' names, the promotion's first."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def endpoint_of(cls, given: Mapping[str, Any], field: str = "deploy.production") -> str | None:
        """The stable endpoint ``given`` names (None: the run's own), once each key is one of :meth:`keys` (a
        SpecError naming the stray one otherwise)."""
        if unknown := sorted(set(given) - set(cls.keys())):
            raise check.fail(f"{field}.{unknown[0]}", "is not a production endpoint setting",
                             f"use {', '.join(cls.keys())}")
        return given.get("endpoint_name") or None

    @classmethod
    def read(cls, given: Mapping[str, Any] | None, backend: Backend | None = None) -> ProductionSettings:
        """The settings from the deploy task's ``production`` object, as rendered (None or empty: the defaults);
        ``backend``: the rollout's window defaults to its and is checked against its metrics lag."""
        given = dict(given or {})
        cls.endpoint_of(given)
        capabilities = backend.capabilities if backend is not None else None
        context = {"rollout_window_s": getattr(capabilities, "rollout_window_s", None),
                   "metrics_lag_s": getattr(capabilities, "metrics_lag_s", 0.0)}
        return parse(cls, {k: v for k, v in given.items() if v is not None}, "", noun="production endpoint",
                     context=context)
