"""The plugin's pages made from a backend, each through its template (``mlrunway/pages/templates``): a job's MLflow
run, a registered version, an endpoint; and what every page of the plugin shares (the way back, the headers, a
record the backend could not use). ``mlrunway/airflow/ui.py`` routes a request to them; nothing here reads a
request or Airflow, so a test renders a page over a workspace as its route would.
"""

from __future__ import annotations

import base64
from contextvars import ContextVar
from typing import Any

from fastapi import HTTPException
from fastapi.responses import HTMLResponse

from mlrunway.backend.protocol import Artifacts, Backend
from mlrunway.errors import MlrunwayError, NotFound

__all__ = ["CAME_FROM", "damaged", "endpoint_page", "headers", "job_page", "nav", "page", "tracking_uri",
           "version_page", "with_nav"]

# The page the reader came from, when it is of this server (set per request by the plugin's middleware).
CAME_FROM: ContextVar[str | None] = ContextVar("came_from", default=None)


def headers() -> dict[str, str]:
    """What every answer of the plugin carries, pages and errors alike: mlrunway's Content-Security-Policy (no
    script runs on its pages) and no content sniffing (a page is the type it says)."""
    from mlrunway.pages import CSP

    return {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}


def nav() -> str:
    """The way back: to Airflow, and to the page the reader came from (a link, not a script: the policy runs none)."""
    from mlrunway.pages import render

    return render("nav.html", came_from=CAME_FROM.get())


def page(template: str, title: str, status: int = 200, refresh_s: int | None = None, **values: Any) -> HTMLResponse:
    """A page of the plugin's own (a template extending ``plugin.html``: the layout, the way back on top)."""
    from mlrunway.pages import render

    return HTMLResponse(render(template, title=title, refresh_s=refresh_s, came_from=CAME_FROM.get(), **values),
                        status_code=status)


def damaged(title: str, subject: str, error: str | None) -> HTMLResponse:
    """A record the backend could not use (``error``: its words, naming the file and the fix), said as such: never
    shown as what an empty record would look like (a job without a run, a plain custom model)."""
    return page("damaged.html", title, subject=subject, error=error or "its record cannot be read")


def with_nav(html: str) -> HTMLResponse:
    """A page built elsewhere (a report, a model card: self-contained files), with the way back on top."""
    return HTMLResponse(html.replace("<body>", f"<body>{nav()}", 1))


def version_page(backend: Backend, name: str, version: str) -> HTMLResponse:
    """A version's page (a backend without a studio of its own); one whose record is damaged says so."""
    try:
        model = backend.models.get(name, version)
    except (NotFound, MlrunwayError) as exc:
        raise HTTPException(404, str(exc)) from exc
    if model.damaged:
        return damaged(f"{name}:{model.version}", f"Model {name}:{model.version}", model.error)
    aliases = [a for a in ("production", "previous") if (held := backend.models.alias(name, a)) and
               held.version == model.version]
    rows = sorted({**model.properties, **{f"tag {k}": v for k, v in model.tags.items()}}.items())
    return page("model_version.html", f"{name}:{model.version}", name=name, model=model, rows=rows, aliases=aliases,
                source=str(model.properties.get("source_job", "")), tracking_uri=tracking_uri(backend))


def tracking_uri(backend: Backend) -> str | None:
    """The backend's tracking store, where MLflow's own UI can open it on this machine (``mlflow_ui.html``)."""
    return backend.jobs.tracking_uri() if isinstance(backend.jobs, Artifacts) else None


def job_page(backend: Backend, job: str) -> HTMLResponse:
    """A job's MLflow run: params, metrics and their curves (a backend without a studio of its own)."""
    try:
        info = backend.jobs.get(job)
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    if info.damaged:  # what its run is cannot be read: not "no MLflow run"
        return damaged(job, f"Job {job}", info.error)
    if not info.mlflow_run_id:
        raise HTTPException(404, f"job {job} has no MLflow run")
    latest = backend.jobs.metrics(job)
    histories = {key: list(backend.jobs.metric_history(job, key)) for key in sorted(latest)}
    curves = [k for k, values in histories.items() if len(values) > 1]
    png = base64.b64encode(_curves_png(histories, curves)).decode() if curves else ""
    return page("mlflow_run.html", job, job=job, info=info, png=png, tracking_uri=tracking_uri(backend),
                params=sorted(backend.jobs.params(job).items()),
                metrics=[(k, f"{v:.6g}", len(histories[k])) for k, v in sorted(latest.items())])


def _curves_png(histories: dict[str, list[float]], keys: list[str]) -> bytes:
    """One small plot per metric of ``keys``, three to a row."""
    from mlrunway.report import new_figure, png_bytes

    rows, columns = (len(keys) + 2) // 3, min(len(keys), 3)
    fig = new_figure(figsize=(3.2 * columns, 2.6 * rows), dpi=100)
    for index, key in enumerate(keys):
        ax = fig.add_subplot(rows, columns, index + 1)
        ax.plot(range(1, len(histories[key]) + 1), histories[key])
        ax.set_title(key, fontsize=9)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return png_bytes(fig)


def endpoint_page(backend: Backend, name: str) -> HTMLResponse:
    """An endpoint's state, its deployments (why each that failed did) and how to call it; one whose record is
    damaged says so, naming the file."""
    try:
        info = backend.endpoints.get(name)
        if info.damaged:
            return damaged(name, f"Endpoint {name}", info.error)
        deployments = backend.endpoints.list_deployments(name)
    except NotFound as exc:
        raise HTTPException(404, f"{exc} (deleted by its run's cleanup, or never created)") from exc
    curl = (f"curl -X POST {info.scoring_uri} -H \"Authorization: Bearer $KEY\" "
            "-H \"Content-Type: application/json\" -d @sample_request.json")
    return page("endpoint.html", name, name=name, info=info, deployments=deployments, curl=curl)


