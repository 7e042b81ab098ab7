"""The pages the UI plugin serves inside the Airflow API server, under ``/mlrunway`` (``mlrunway/airflow/plugin.py``).

- ``report/<conn_id>/<sweep>``: the sweep report (``mlrunway.report``): the saved one once the run's cleanup
  wrote it, else built live from the backend, so a sweep can be watched while it runs;
- ``runs/<dag_id>/<run_id>``: the report of a DAG run (the "Sweep report" tab of the run's page);
- ``mlflow/<conn_id>/<job>``: a job's MLflow run: params, metrics and their curves;
- ``endpoint/<conn_id>/<name>``: an endpoint's state, deployments and traffic (never its keys);
- ``report/<conn_id>/card/<model>/<version>``: the model card of a version that reached an endpoint
  (:mod:`mlrunway.deploy.card`), on both backends; beside the sweep reports, which link to it relatively;
- ``report/<conn_id>/run/<job>`` and ``report/<conn_id>/model/<name>/<version>``: what a report's trial and model
  link to: the job's MLflow run and the version's page, or the backend's own (Azure ML studio, by redirect);
- ``monitor/<conn_id>/<endpoint>``: the endpoint's latest monitoring report (:mod:`mlrunway.monitoring.monitor`),
  with the earlier ones listed; ``monitor/<conn_id>/<endpoint>/<time>`` one of them.

Each page starts with a way back (to Airflow, and to the page before); an error is such a page too, with its
status and what to do, never a JSON body; every answer, a 500 too, carries the same headers (the policy). A record
the backend could not use is shown as damaged, naming its file. The pages made from a backend are in
:mod:`mlrunway.airflow.views`; this module routes requests to them.

The last two stand in for a backend's own UI: where it has one (:class:`~mlrunway.backend.protocol.Studio`, Azure ML studio),
they answer 404 and the task's studio link is the way there.

Every page needs a signed-in Airflow user allowed to read DAG runs, checked by Airflow's own security
dependency: plugin apps are not protected by default.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from mlrunway import check
from mlrunway.airflow import views
from mlrunway.backend.protocol import Backend, Studio
from mlrunway.errors import MlrunwayError, NotFound
from mlrunway.ledger.reports import ReportsFolder

# No schema pages: /docs, /redoc and /openapi.json would answer without Airflow's authentication.
app = FastAPI(title="mlrunway", description="Sweep reports, MLflow runs and endpoints of mlrunway's pipeline runs",
              docs_url=None, redoc_url=None, openapi_url=None)


def can_read_runs() -> Any:
    """Airflow's own check: a signed-in user (JWT in the Authorization header, or the UI's ``_token`` cookie
    that an iframe sends) allowed to read the DAG's runs (``dag_id`` of the path; any DAG where there is none)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return Depends(requires_access_dag("GET", DagAccessEntity.RUN))


def _backend(conn_id: str) -> Backend:
    from mlrunway.airflow.hook import MlrunwayHook

    try:
        return MlrunwayHook(conn_id).get_backend()
    except Exception as exc:
        raise HTTPException(404, f"connection {conn_id!r}: {exc}") from exc


@app.middleware("http")
async def _policy(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Every answer carries :func:`~mlrunway.airflow.views.headers` (a 500 too: see :func:`_broken_page`); the page
    the reader came from, when it is of this server, is kept for the nav's way back."""
    referer = urlsplit(request.headers.get("referer", ""))
    views.CAME_FROM.set(referer.geturl() if referer.scheme in ("http", "https")
                        and referer.netloc == request.url.netloc else None)
    response = await call_next(request)
    response.headers.update(views.headers())
    return response


def _file(path: Path) -> HTMLResponse:
    return views.with_nav(path.read_text(encoding="utf-8"))


def _inside(root: str | Path, path: Path) -> Path:
    """``path`` resolved, when it stays inside ``root``; a 404 naming it otherwise (a ``..`` segment, a link out):
    the pages serve files of the reports folder and nothing else."""
    resolved = path.resolve()
    if not resolved.is_relative_to(Path(root).resolve()):
        raise HTTPException(404, f"{path} is not a page of the reports folder: open a report from its task's link")
    return resolved


def _named(kind: Callable[[str, str], Any], field: str, value: str) -> Any:
    """``value`` of a URL, checked as the name it must be (a job's, a model's, a version number); a 404 page
    naming the field and what it takes otherwise."""
    try:
        return kind(field, value)
    except MlrunwayError as exc:
        raise HTTPException(404, str(exc)) from exc


@app.exception_handler(MlrunwayError)
def _refused_page(request: Request, exc: MlrunwayError) -> HTMLResponse:
    """What a backend refused or could not read (a damaged record, a name that is not one): its words, as a page."""
    return _error_page(request, HTTPException(404 if isinstance(exc, NotFound) else 400, str(exc)))


@app.exception_handler(Exception)
def _broken_page(request: Request, exc: Exception) -> HTMLResponse:
    """Anything else (a report file that cannot be read, a bug): a 500 page that says what to do, never a bare
    ``Internal Server Error``; the traceback is in the API server's log."""
    response = _error_page(request, HTTPException(500, f"this page could not be made ({type(exc).__name__}); the "
                                                       "Airflow API server's log has the details"))
    # Starlette answers with this handler from its outermost middleware, outside _policy: the headers go on here.
    response.headers.update(views.headers())
    return response


@app.exception_handler(HTTPException)
def _error_page(request: Request, exc: HTTPException) -> HTMLResponse:
    """An error as a page: its status, what it means, and the way back (a 401 also says where to sign in)."""
    response = views.page("error.html", f"{exc.status_code}", status=exc.status_code, code=exc.status_code,
                          detail=str(exc.detail))
    for key, value in (exc.headers or {}).items():
        response.headers[key] = value
    return response


@app.get("/report/{conn_id}/{sweep}", response_class=HTMLResponse, dependencies=[can_read_runs()])
def sweep_report(conn_id: str, sweep: str) -> Any:
    from mlrunway.backend.naming import RunNames, endpoint_salt
    from mlrunway.report import collect, plot_curves, render_html, saved_report

    _named(check.job_name, "sweep", sweep)
    backend = _backend(conn_id)
    saved = saved_report(sweep, backend.reports)
    if saved is not None:
        return _file(_inside(backend.reports, saved))
    try:
        report = collect(backend, RunNames.of_sweep(sweep, endpoint_salt(backend)))
    except (NotFound, MlrunwayError) as exc:
        raise HTTPException(404, str(exc)) from exc
    return views.with_nav(render_html(report, plot_curves(report)))


@app.get("/runs/{dag_id}/{run_id}", dependencies=[can_read_runs()])
def run_report(dag_id: str, run_id: str) -> Any:
    """Redirect to the report the run's sweep task linked; a page that says so while there is none yet."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from mlrunway.airflow.links import SweepReportLink

    with create_session() as session:
        row = (session.query(XComModel)
               .filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == SweepReportLink.key)
               .first())
        url = XComModel.deserialize_value(row) if row is not None else None
    if not url:  # asks again by itself: the tab shows the live report as soon as the sweep exists
        from mlrunway.report import LIVE_REFRESH_S

        return views.page("waiting.html", "no sweep yet", refresh_s=LIVE_REFRESH_S, run_id=run_id, dag_id=dag_id)
    return RedirectResponse(url)


def _backend_without_studio(conn_id: str, elsewhere: str) -> Backend:
    """The connection's backend when it has no UI of its own; a 404 that says where to look when it has."""
    backend = _backend(conn_id)
    if isinstance(backend, Studio):
        raise HTTPException(404, elsewhere)
    return backend


@app.get("/report/{conn_id}/run/{job}", dependencies=[can_read_runs()])
def report_run(conn_id: str, job: str) -> Any:
    """A report's trial (or the chosen model's source job): its MLflow run here, or its studio page."""
    _named(check.job_name, "job", job)
    backend = _backend(conn_id)
    if isinstance(backend, Studio):
        return RedirectResponse(backend.link("job", job))
    return views.job_page(backend, job)


@app.get("/report/{conn_id}/model/{name}/{version}", dependencies=[can_read_runs()])
def model_version(conn_id: str, name: str, version: str) -> Any:
    """A registered version: where it came from, its properties, tags and aliases; or its studio page."""
    _named(check.model_name, "model", name)
    _named(check.model_version, "version", version)
    backend = _backend(conn_id)
    if isinstance(backend, Studio):
        return RedirectResponse(backend.link("model", name, version))
    return views.version_page(backend, name, version)


@app.get("/mlflow/{conn_id}/{job}", response_class=HTMLResponse, dependencies=[can_read_runs()])
def mlflow_run(conn_id: str, job: str) -> Any:
    _named(check.job_name, "job", job)
    return views.job_page(
        _backend_without_studio(conn_id, "MLflow runs of Azure ML jobs are on the job's studio page"), job)


@app.get("/endpoint/{conn_id}/{name}", response_class=HTMLResponse, dependencies=[can_read_runs()])
def endpoint(conn_id: str, name: str) -> Any:
    _named(lambda field, value: check.endpoint_name(value, field), "endpoint", name)
    return views.endpoint_page(_backend_without_studio(conn_id, "Azure ML endpoints are on their studio page"), name)


@app.get("/monitor/{conn_id}/{name}", response_class=HTMLResponse, dependencies=[can_read_runs()])
def monitoring(conn_id: str, name: str) -> Any:
    return _monitoring_page(conn_id, name, "latest")


@app.get("/monitor/{conn_id}/{name}/{stamp}", response_class=HTMLResponse, dependencies=[can_read_runs()])
def monitoring_at(conn_id: str, name: str, stamp: str) -> Any:
    return _monitoring_page(conn_id, name, stamp)


def _monitoring_page(conn_id: str, name: str, stamp: str) -> HTMLResponse:
    import re

    _named(lambda field, value: check.endpoint_name(value, field), "endpoint", name)
    reports = _backend(conn_id).reports
    folder = _inside(reports, ReportsFolder(Path(reports)).monitoring(name))
    if not re.fullmatch(r"latest|\d{8}T\d{6}Z", stamp) or not (folder / f"{stamp}.html").is_file():
        raise HTTPException(404, f"endpoint {name} has no monitoring report {stamp}: the monitor_endpoint DAG "
                                 "writes one each time it runs")
    from mlrunway.pages import render

    earlier = sorted((p.stem for p in folder.glob("*T*Z.html")), reverse=True)[:30]
    listed = render("earlier.html", name=name, earlier=earlier, linked=stamp == "latest")
    page = (folder / f"{stamp}.html").read_text(encoding="utf-8")
    return views.with_nav(page.replace("</body>", f"{listed}</body>", 1))


@app.get("/report/{conn_id}/card/{name}/{version}", response_class=HTMLResponse, dependencies=[can_read_runs()])
def model_card(conn_id: str, name: str, version: str) -> Any:
    from mlrunway.deploy import card_page

    _named(check.model_name, "model", name)
    reports = _backend(conn_id).reports
    page = card_page(reports, name, _named(check.model_version, "version", version))
    if page is None:
        raise HTTPException(404, f"{name}:{version} has no model card: a card is written when a version reaches an "
                                 "endpoint")
    return _file(_inside(reports, page))
