"""The workspace's MLflow tracking store: every job is one MLflow run, sweep trials nested under the sweep's.

The store is SQLite (MLflow 3's file store is in maintenance mode). It is created once under a lock and put
in WAL mode, so concurrent trials write metrics without 'database is locked' errors or lost rows.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mlrunway.local.files import locked
from mlrunway.local.workspace import Workspace

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

_MLFLOW_STATUS = {"Completed": "FINISHED", "Failed": "FAILED", "Canceled": "KILLED"}


@functools.cache
def client(workspace: Workspace) -> MlflowClient:
    """An MlflowClient on the workspace store (one per process), creating the store the first time."""
    from mlflow.tracking import MlflowClient

    db = workspace.root / "mlflow.db"
    with locked(workspace.root / ".mlflow.lock"):
        fresh = not db.exists()
        tracking = MlflowClient(workspace.tracking_uri)
        tracking.search_experiments(max_results=1)  # creates and migrates the schema on first use
        if fresh:
            _enable_wal(db)
    return tracking


def _enable_wal(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def start_run(workspace: Workspace, job_name: str, experiment: str, parent_run_id: str | None) -> tuple[str, str]:
    """Create the job's run; return (experiment_id, run_id)."""
    tracking = client(workspace)
    with locked(workspace.root / ".mlflow.lock"):
        found = tracking.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else tracking.create_experiment(
            experiment, artifact_location=(workspace.root / "artifacts").as_uri())
    tags = {"mlflow.runName": job_name, "mlrunway.job": job_name}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run = tracking.create_run(experiment_id, tags=tags, run_name=job_name)
    return experiment_id, run.info.run_id


def resume_run(workspace: Workspace, run_id: str) -> tuple[str, str]:
    """Mark a recovered job's run RUNNING again; return (experiment_id, run_id)."""
    tracking = client(workspace)
    tracking.update_run(run_id, status="RUNNING")
    return tracking.get_run(run_id).info.experiment_id, run_id


def end_run(workspace: Workspace, run_id: str, status: str) -> None:
    """Close the run with the MLflow status matching the job's, overriding what the script's atexit set."""
    client(workspace).set_terminated(run_id, _MLFLOW_STATUS.get(status, "FAILED"))


def end_run_quickly(workspace: Workspace, run_id: str, status: str) -> None:
    """:func:`end_run` without importing MLflow (seconds of a job's supervisor, at the end of every trial): the
    one row ``MlflowClient.set_terminated`` updates in the SQLite store (``runs.status`` and ``end_time``, in
    MLflow's schema since 1.x; a test holds it to what MlflowClient then reads). Raises when no run matched."""
    with contextlib.closing(sqlite3.connect(workspace.root / "mlflow.db", timeout=30)) as conn, conn:
        changed = conn.execute("UPDATE runs SET status = ?, end_time = ? WHERE run_uuid = ?",
                               (_MLFLOW_STATUS.get(status, "FAILED"), int(time.time() * 1000), run_id)).rowcount
    if changed != 1:
        raise LookupError(f"MLflow run {run_id} is not in {workspace.root / 'mlflow.db'}")


def metric_history(tracking: MlflowClient, run_id: str, key: str) -> list[float]:
    """Values of ``key`` in logging order (step, then time)."""
    metrics = tracking.get_metric_history(run_id, key)
    return [m.value for m in sorted(metrics, key=lambda m: (m.step, m.timestamp))]


def latest_metrics(tracking: MlflowClient, run_id: str) -> dict[str, float]:
    return dict(tracking.get_run(run_id).data.metrics)
