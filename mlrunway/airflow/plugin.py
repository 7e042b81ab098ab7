"""mlrunway's Airflow plugin: the operators' extra links, and the pages behind them in the Airflow 3 UI.

Registered through the package's ``airflow.plugins`` entry point (pyproject.toml), so it loads however Airflow is
started (``make ui``, ``airflow standalone``, each component of a deployment, ``airflow dags test``) with no
plugins folder to point at. The pages (``mlrunway/airflow/ui.py``) are a FastAPI app that the API server mounts
under ``/mlrunway``; the "Sweep report" tab of a DAG run's page shows that run's report.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from mlrunway.airflow.links import ALL_LINKS, UI_PREFIX
from mlrunway.airflow.ui import app


class MlrunwayPlugin(AirflowPlugin):
    name = "mlrunway"
    operator_extra_links = list(ALL_LINKS)
    fastapi_apps = [{"app": app, "url_prefix": UI_PREFIX, "name": "mlrunway pages"}]
    external_views = [{
        "name": "Sweep report",
        "href": UI_PREFIX.lstrip("/") + "/runs/{DAG_ID}/{RUN_ID}",
        "destination": "dag_run",
        "url_route": "sweep-report",
    }]
