"""The trigger form's Params of the settings groups mlrunway declares once (:mod:`mlrunway.settings`): a DAG builds
each from its group's declaration, so the form's bounds, the validation and preflight never drift apart."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from airflow.sdk import Param

from mlrunway.airflow.hook import DEFAULT_CONN_ID
from mlrunway.backend.capture import Collecting
from mlrunway.backend.types import Instances
from mlrunway.deploy import Evaluation, Promotion, RolloutPolicy, SmokeTest
from mlrunway.ledger.budget import Budget
from mlrunway.monitoring.drift import Drift
from mlrunway.monitoring.monitor import MonitorSettings
from mlrunway.settings import defaults, form_field, form_schema

__all__ = ["backend_param", "budget_param", "data_collector_param", "drift_param", "evaluation_param", "instances_params",
           "promotion_params", "rollout_param", "setting_param", "setting_params", "smoke_test_params", "window_param"]


def _param(kind: type, default: Any, title: str, section: str | None, description: str,
           empty: str | None = None) -> Param:
    """A group's Param: its schema in the form's dialect, and after ``description`` what empty means (``empty``,
    else the defaults stated from the declaration)."""
    empty = empty or f"the defaults, {defaults(kind)}"
    return Param(default, **form_schema(kind, title=title, section=section,
                                        description=f"{description} Empty: {empty}."))


def rollout_param(*, section: str, description: str, title: str = "Staged rollout", default: Any = None) -> Param:
    """The ``rollout`` Param (:class:`~mlrunway.deploy.rollout.RolloutPolicy`)."""
    return _param(RolloutPolicy, default, title, section, description)


def evaluation_param(*, section: str, description: str, title: str = "Evaluation set and gate",
                     default: Any = None) -> Param:
    """The ``evaluation`` Param (:class:`~mlrunway.deploy.gate.Evaluation`): a team's set and the gate's
    settings."""
    return _param(Evaluation, default, title, section, description)


def drift_param(*, description: str, title: str = "Drift metrics and thresholds", section: str | None = None,
                default: Any = None) -> Param:
    """The ``drift`` Param (:class:`~mlrunway.monitoring.drift.Drift`), in azure-ai-ml's words."""
    return _param(Drift, default, title, section, description)


def data_collector_param(*, section: str, description: str, title: str = "Data collection",
                         default: Any = None) -> Param:
    """The ``data_collector`` Param (:class:`~mlrunway.backend.capture.Collecting`), in azure-ai-ml's shape; empty:
    nothing is collected."""
    return _param(Collecting, default, title, section, description, empty="nothing is collected")


def budget_param(*, section: str | None = None, title: str = "Budget", default: Any = None) -> Param:
    """The ``budget`` Param (:class:`~mlrunway.ledger.budget.Budget`): the most the run's jobs may spend."""
    return Param(default, **form_schema(Budget, title=title, section=section, description=(
        'The most this run\'s jobs (train, trials, export, reference) may spend: {"max_cost": 5} in the rate card\'s '
        'currency, or {"max_compute_hours": 2}; "reserve" (default 0.1) is kept for export and the reference. The '
        "sweep stops at it and still delivers its best model. Empty: the connection's budget, else no limit.")))


def setting_param(kind: type, name: str, *, title: str | None = None, section: str | None = None,
                  default: Any = None) -> Param:
    """One setting of the group ``kind`` as a Param of its own: its type, bounds, description and title from the
    declaration (``title``: another), its declared default unless ``default`` is given."""
    schema: dict[str, Any] = {**form_field(kind, name), **({"title": title} if title else {}),
                              **({"section": section} if section else {})}
    declared = schema.pop("default", None)
    return Param(declared if default is None else default, **schema)


def setting_params(kind: type, *, section: str | None = None, **own_defaults: Any) -> dict[str, Param]:
    """Every setting of the group ``kind`` as a Param of its own (:func:`setting_param`), by name; ``own_defaults``:
    a deployment's own defaults for some of them."""
    return {f.name: setting_param(kind, f.name, section=section, default=own_defaults.get(f.name))
            for f in fields(kind)}


def backend_param(*, section: str | None = None, description: str = "") -> Param:
    """The ``backend_conn_id`` Param every mlrunway DAG has: the Airflow connection of its backend."""
    schema: dict[str, Any] = {"type": "string", "minLength": 1, "title": "Backend connection",
                              **({"section": section} if section else {})}
    return Param(DEFAULT_CONN_ID, **schema, description=(
        f"The Airflow connection of the backend: {DEFAULT_CONN_ID} is the local one, with nothing to set up; an "
        f"azure_ml connection runs the same DAG on Azure ML. {description}").strip())


def smoke_test_params(*, section: str) -> dict[str, Param]:
    """The smoke test's fields (:class:`~mlrunway.deploy.smoke.SmokeTest`): ``sample_request``,
    ``expected_response``, ``ignore_keys``."""
    return setting_params(SmokeTest, section=section)


def promotion_params(*, section: str, endpoint_name: str | None = None) -> dict[str, Param]:
    """A production endpoint's fields (:class:`~mlrunway.deploy.gate.Promotion`): ``endpoint_name`` (default:
    the deployment's own), ``require_approval``, ``min_improvement``."""
    return setting_params(Promotion, section=section, endpoint_name=endpoint_name)


def instances_params(*, section: str) -> dict[str, Param]:
    """A deployment's size (:class:`~mlrunway.backend.types.Instances`): ``instance_type``, ``instance_count``."""
    return setting_params(Instances, section=section)


def window_param(*, title: str = "Window (seconds)") -> Param:
    """The endpoint monitor's ``window_s`` (:class:`~mlrunway.monitoring.monitor.MonitorSettings`)."""
    return setting_param(MonitorSettings, "window_s", title=title)
