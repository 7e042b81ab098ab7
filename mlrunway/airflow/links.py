"""Extra links from a task to what it created, on both backends.

- Azure ML: the studio page of each job, sweep, model and endpoint (``Azure ML studio``).
- Local: the pages the UI plugin serves inside the Airflow API server (``mlrunway/airflow/ui.py``): the job's
  MLflow run, the sweep report, the endpoint. The sweep report is shown on Azure too, built from the service.

Airflow 3 asks a link for its URL once, in the worker as the task ends, and the UI shows what it stored. So the
operator keeps the URLs of what it created (``links_for``) in ``operator.links`` (``show_links`` of the operators'
base; a resumed task records them again) and the link reads them from there: no XCom lookup, so no "XCom not found" in the log of a task that has no such link. The
URLs are also pushed as XComs under the links' keys at once: the run's "Sweep report" tab finds a running
sweep's report through ``report_url``. ``plugins/mlrunway_plugin.py`` registers the link classes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from mlrunway.backend.protocol import Backend, Studio

UI_PREFIX = "/mlrunway"  # where the plugin mounts its FastAPI app


class _RecordedLink(BaseOperatorLink):
    """A link whose URL the operator recorded under ``key`` in ``operator.links``; empty (not shown) without."""

    key = ""

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return (getattr(operator, "links", None) or {}).get(self.key, "")


class StudioLink(_RecordedLink):
    name = "Azure ML studio"
    key = "studio_url"


class MlflowRunLink(_RecordedLink):
    name = "MLflow run"
    key = "mlflow_url"


class SweepReportLink(_RecordedLink):
    name = "Sweep report"
    key = "report_url"


class EndpointLink(_RecordedLink):
    name = "Endpoint"
    key = "endpoint_url"


class ModelCardLink(_RecordedLink):
    name = "Model card"
    key = "model_card_url"


class MonitorLink(_RecordedLink):
    name = "Monitoring report"
    key = "monitor_url"


ALL_LINKS = (StudioLink(), MlflowRunLink(), SweepReportLink(), EndpointLink(), ModelCardLink(), MonitorLink())


def ui_path(*parts: str) -> str:
    """A path of the plugin's pages under the API server's base URL (``[api] base_url`` may hold a prefix)."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    base = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return base + UI_PREFIX + "/" + "/".join(quote(p, safe="") for p in parts)


def links_for(backend: Backend, conn_id: str, kind: str, name: str,
              version: int | str | None = None) -> dict[str, str]:
    """The links of what a task created, by key: ``kind`` is job, sweep, model, endpoint, model_card or monitor. A
    backend with a UI of its own links there; one without gets the plugin's MLflow and endpoint pages instead."""
    if kind == "model_card":  # the plugin serves the card from the backend's reports, whatever the backend
        return {ModelCardLink.key: ui_path("report", conn_id, "card", name, str(version))}
    if kind == "monitor":  # the monitoring report, saved with the backend's reports
        return {MonitorLink.key: ui_path("monitor", conn_id, name)}
    links: dict[str, str] = {}
    studio = isinstance(backend, Studio)
    if isinstance(backend, Studio):
        links[StudioLink.key] = backend.link(kind, name, version)
    if kind == "sweep":
        links[SweepReportLink.key] = ui_path("report", conn_id, name)
    if not studio and kind in ("job", "sweep"):
        links[MlflowRunLink.key] = ui_path("mlflow", conn_id, name)
    if not studio and kind == "endpoint":
        links[EndpointLink.key] = ui_path("endpoint", conn_id, name)
    return links
