"""Extra links from a task to what it created, on both backends.

- Azure ML: the studio page of each job, sweep, model and endpoint (``Azure ML studio``).
- Local: the pages the UI plugin serves inside the Airflow API server (``mlrunway/airflow/ui.py``): the job's
  MLflow run, the sweep report, the endpoint. The sweep report is shown on Azure too, built from the service.

A task pushes a link's URL under the link's XCom key once it has created the thing; the link reads it back and
Airflow shows it on the task's page. ``plugins/mlrunway_plugin.py`` registers the link classes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

UI_PREFIX = "/mlrunway"  # where the plugin mounts its FastAPI app


class _PushedLink(BaseOperatorLink):
    """A link whose URL the task pushed under ``key``; empty (not shown) until then."""

    key = ""

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return XCom.get_value(ti_key=ti_key, key=self.key) or ""


class StudioLink(_PushedLink):
    name = "Azure ML studio"
    key = "studio_url"


class MlflowRunLink(_PushedLink):
    name = "MLflow run"
    key = "mlflow_url"


class SweepReportLink(_PushedLink):
    name = "Sweep report"
    key = "report_url"


class EndpointLink(_PushedLink):
    name = "Endpoint"
    key = "endpoint_url"


ALL_LINKS = (StudioLink(), MlflowRunLink(), SweepReportLink(), EndpointLink())


def ui_path(*parts: str) -> str:
    """A path of the plugin's pages under the API server's base URL (``[api] base_url`` may hold a prefix)."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    base = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return base + UI_PREFIX + "/" + "/".join(quote(p, safe="") for p in parts)


def push_links(context: Any, backend: Any, conn_id: str, kind: str, name: str,
               version: int | str | None = None) -> dict[str, str]:
    """Push the links of what the task created: ``kind`` is job, sweep, model or endpoint. Return them by key."""
    links: dict[str, str] = {}
    studio = getattr(backend, "link", None)
    url = studio(kind, name, version) if studio is not None else None
    if url:
        links[StudioLink.key] = url
    if kind == "sweep":
        links[SweepReportLink.key] = ui_path("report", conn_id, name)
    if backend.kind == "local" and kind in ("job", "sweep"):
        links[MlflowRunLink.key] = ui_path("mlflow", conn_id, name)
    if backend.kind == "local" and kind == "endpoint":
        links[EndpointLink.key] = ui_path("endpoint", conn_id, name)
    for key, value in links.items():
        context["ti"].xcom_push(key=key, value=value)
    return links
