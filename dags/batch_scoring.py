"""Follows production: runs whenever the stable endpoint's live model changes (an event of its Airflow asset,
which the deploy task emits only on ``created`` or ``promoted``), and scores a batch through the endpoint.

The example scores data_dir's test/ split and writes ``<workspace>/reports/batch_scoring/<model>.json`` with each
image's prediction; a team puts its own batch job here, scheduled the same way.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from mlrunway.airflow.assets import endpoint_asset

PROJECT = Path(__file__).resolve().parent.parent
ENDPOINT = os.environ.get("MLRUNWAY_ENDPOINT_NAME") or "digits-prod"
DATA = os.environ.get("MLRUNWAY_DATA_DIR") or str(PROJECT / "data" / "digits")

with DAG(dag_id="batch_scoring", schedule=[endpoint_asset(ENDPOINT)], start_date=datetime(2026, 1, 5),
         catchup=False, tags=["mlrunway", "production"],
         description=f"Score a batch through {ENDPOINT} whenever its production model changes") as dag:

    @task
    def score_batch(backend_conn_id: str = "mlrunway_default", triggering_asset_events=None) -> dict:
        from mlrunway.airflow.batch import score_test_split

        events = [e for events in (triggering_asset_events or {}).values() for e in events]
        model = events[-1].extra.get("model") if events else None
        return score_test_split(backend_conn_id, ENDPOINT, DATA, model)

    score_batch()
