"""Watches the production endpoint: each run compares what its deployments collected over the last day with the
reference (what the same score.py collects from the held-out validation images) and saves a report, the UI
plugin's "Monitoring report". Drift adds an event to the endpoint's drift asset, which train_sweep_deploy is
scheduled on as well as on its cadence (when ``MLRUNWAY_ENDPOINT_NAME`` names the endpoint): the endpoint retrains
itself, and the gate decides whether the new model serves. A day with too little traffic to judge fails the task.

The endpoint must collect: its deployments need a ``data_collector`` with ``model_inputs`` and ``model_outputs``
(train_sweep_deploy's "Data collection" field).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param

from mlrunway.airflow.params import backend_param, drift_param, window_param
from mlrunway.operators import MonitorEndpointOperator

PROJECT = Path(__file__).resolve().parent.parent
ENDPOINT = os.environ.get("MLRUNWAY_ENDPOINT_NAME") or "digits-prod"
DATA = os.environ.get("MLRUNWAY_DATA_DIR") or str(PROJECT / "data" / "digits")
SCHEDULE = os.environ.get("MLRUNWAY_MONITOR_SCHEDULE", "@daily")  # "none": manual triggers only
P = "{{ params.%s }}"

with DAG(
    dag_id="monitor_endpoint",
    description=f"Drift of {ENDPOINT}'s traffic from its reference; retrains it when it drifted",
    schedule=None if SCHEDULE.lower() == "none" else SCHEDULE,
    start_date=datetime(2026, 1, 5),
    catchup=False,
    max_active_runs=1,
    tags=["mlrunway", "production"],
    params={
        "endpoint_name": Param(ENDPOINT, type="string", pattern="^[A-Za-z][A-Za-z0-9-]{2,31}$",
                               title="Production endpoint", description="The endpoint to watch."),
        "code_dir": Param(str(PROJECT / "training"), type="string", minLength=1, title="Scoring script's folder",
                          description="The folder of its score.py, which makes the reference from the data."),
        "data_dir": Param(DATA, type="string", minLength=1, title="Training data",
                          description="Its val/ images are the reference (an image classifier's ImageFolder)."),
        "reference_requests": Param(None, type=["null", "string"], title="Reference requests",
                                    description="A file of request bodies (JSON lines) to make the reference of, "
                                                "instead of data_dir's images."),
        "window_s": window_param(),
        "drift": drift_param(description="In azure-ai-ml's words, e.g. {\"metric_thresholds\": {\"numerical\": "
                                         "{\"normalized_wasserstein_distance\": 0.1}}, \"min_rows\": 100}."),
        "backend_conn_id": backend_param(),
    },
) as dag:
    MonitorEndpointOperator(task_id="check_drift", endpoint_name=P % "endpoint_name", code_dir=P % "code_dir",
                            data_dir=P % "data_dir", reference_requests=P % "reference_requests",
                            window_s=P % "window_s", drift=P % "drift", backend_conn_id=P % "backend_conn_id")
