"""Prunes the local workspace weekly by its connection's retention policy (the connection extra ``retention``:
``{"keep_runs": 10, "keep_versions": 5, "capture_days": 30}``, these by default): old runs' jobs, MLflow runs and
reports, old model versions, and captured requests past their days. Nothing a run still going, a deployment, or a
version that ever held ``production`` or ``previous`` needs is removed. Trigger it with "Dry run" on to see what
would go. ``MLRUNWAY_PRUNE_SCHEDULE=none`` leaves it to manual triggers."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Param

from mlrunway.airflow.params import backend_param
from mlrunway.operators import PruneWorkspaceOperator

SCHEDULE = os.environ.get("MLRUNWAY_PRUNE_SCHEDULE", "@weekly")

with DAG(
    dag_id="prune_workspace",
    description="Removes what the local workspace's retention policy lets go of",
    schedule=None if SCHEDULE.lower() == "none" else SCHEDULE,
    start_date=datetime(2026, 1, 5),
    catchup=False,
    max_active_runs=1,
    tags=["mlrunway", "maintenance"],
    params={
        "dry_run": Param(False, type="boolean", title="Dry run", description="List what would go; remove nothing."),
        "backend_conn_id": backend_param(description="Only a backend that prunes its own store can be pruned."),
    },
) as dag:
    PruneWorkspaceOperator(task_id="prune", preview="{{ params.dry_run }}", backend_conn_id="{{ params.backend_conn_id }}")
