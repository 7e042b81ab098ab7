"""Airflow Assets for stable endpoints, so downstream DAGs follow production, Airflow 3's way.

The deploy task declares one ``AssetAlias`` as its outlet and, only when the live model changed (``created`` or
``promoted``), adds an event for its endpoint's asset with the model version and decision in its extra; a held,
skipped or rolled-back run emits nothing. A batch-scoring DAG schedules on ``endpoint_asset("digits-prod")``.

The monitor task likewise adds an event for the endpoint's drift asset only when its check found drift; the
training DAG of a production endpoint is scheduled on that asset as well as on its cadence.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias

PRODUCTION_ALIAS = "mlrunway-production"


def production_alias() -> AssetAlias:
    return AssetAlias(PRODUCTION_ALIAS)


def endpoint_asset(endpoint: str) -> Asset:
    """The asset of a stable endpoint's production model."""
    return Asset(name=f"mlrunway-endpoint-{endpoint}", uri=f"mlrunway://endpoints/{endpoint}")


def emit_production(context: Any, endpoint: str, extra: dict[str, Any]) -> None:
    """Record a production change of ``endpoint`` as an event of its asset, through the task's alias outlet."""
    context["outlet_events"][production_alias()].add(endpoint_asset(endpoint), extra=extra)


DRIFT_ALIAS = "mlrunway-drift"


def drift_alias() -> AssetAlias:
    return AssetAlias(DRIFT_ALIAS)


def drift_asset(endpoint: str) -> Asset:
    """The asset a drifted production endpoint updates: its training DAG is scheduled on it (as well as on time)."""
    return Asset(name=f"mlrunway-drift-{endpoint}", uri=f"mlrunway://endpoints/{endpoint}/drift")


def emit_drift(context: Any, endpoint: str, extra: dict[str, Any]) -> None:
    """Record that ``endpoint`` drifted, as an event of its drift asset, through the task's alias outlet."""
    context["outlet_events"][drift_alias()].add(drift_asset(endpoint), extra=extra)
