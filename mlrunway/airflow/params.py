"""The trigger form's Params of the settings groups mlrunway declares once (:mod:`mlrunway.settings`): a DAG builds
each from its group's declaration, so the form's bounds, the validation and preflight never drift apart."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from mlrunway.production.rollout import RolloutPolicy
from mlrunway.settings import defaults, form_schema

__all__ = ["rollout_param"]


def rollout_param(*, section: str, description: str, title: str = "Staged rollout", default: Any = None) -> Param:
    """The ``rollout`` Param (:class:`~mlrunway.production.rollout.RolloutPolicy`); empty: its defaults, which its
    description states before ``description``."""
    return Param(default, **form_schema(RolloutPolicy, title=title, section=section,
                                        description=f"{defaults(RolloutPolicy)}; empty: these defaults. {description}"))
