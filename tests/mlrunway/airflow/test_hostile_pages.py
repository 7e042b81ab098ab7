"""Every page the plugin serves, and every report mlrunway saves, rendered with hostile strings in every field a
user, job, model, tag, property, metric, endpoint or captured request can set (issue 60, 1): no live markup.

Each case renders its page twice, once with a plain value and once with the hostile one in the same fields; the
two must have the same elements with the same attributes (parsed with html.parser), no ``on*`` attribute, no
``<script>``, and no link that is a ``javascript:`` URL. Every route the plugin registers must have a case, so a
route added without one fails here. This holds whatever renders the pages (a later issue moves them to templates).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from mlrunway.backend.fake import FakeBackend
from mlrunway.backend.types import DeploymentSettings, EndpointSettings, JobStatus, ProvisioningState, TrialInfo
from mlrunway.ledger.reports import ReportsFolder
from mlrunway.local.backend import LocalBackend
from mlrunway.pages import CSP
from mlrunway.report import render_html, save
from mlrunway.specs import CommandJobSpec
from tests.conftest import write_script
from tests.mlrunway.test_report import report

pytestmark = pytest.mark.slow  # a migrated Airflow database for the auth manager

HOSTILE = ("<script>document.title='PWNED'</script>\"><img src=x onerror=alert(1)>'</title><svg onload=alert(1)>"
           "javascript:alert(1)")
PLAIN = "plain value"
URL = "javascript:alert(1)"  # where a whole value could become a link


class Markup(HTMLParser):
    """Each element's tag and attribute names, in order; and what of it could run."""

    def __init__(self) -> None:
        super().__init__()
        self.shape: list[tuple[str, tuple[str, ...]]] = []
        self.live: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.shape.append((tag, tuple(sorted(name for name, _ in attrs))))
        if tag in ("script", "svg", "iframe", "object", "embed", "base"):
            self.live.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                self.live.append(f"<{tag} {name}>")
            if name in ("href", "src", "action") and (value or "").strip().lower().startswith("javascript:"):
                self.live.append(f"<{tag} {name}={value}>")


def parsed(page: str) -> Markup:
    markup = Markup()
    markup.feed(page)
    return markup


def job_name(v: str) -> str:
    return f"job-{len(v)}"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local workspace with a real job per value, each holding it as a param's value in its MLflow run (run
    together, once for the module)."""
    root = tmp_path_factory.mktemp("hostile")
    local = LocalBackend.at(root / "ws")
    for v in (PLAIN, HOSTILE):
        code = write_script(root / job_name(v), f"import mlflow\nmlflow.log_param('p', {v!r})\n"
                                                "mlflow.log_metric('m', 0.1, step=0)\nmlflow.log_metric('m', 0.2, step=1)\n")
        local.jobs.submit(job_name(v), CommandJobSpec(code=str(code), command="python script.py", experiment_name="e",
                                                      display_name=v))
    assert all(local.jobs.wait(job_name(v), poll_s=0.1).status is JobStatus.COMPLETED for v in (PLAIN, HOSTILE))
    return root / "ws"


@pytest.fixture
def site(airflow_db, workspace, tmp_path, monkeypatch):
    """The plugin's app signed in over a fake backend (``fake_hostile``) and the local workspace (``local_hostile``);
    the fake, and a folder of the test's own."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from mlrunway.airflow.ui import app

    monkeypatch.setenv("AIRFLOW_CONN_FAKE_HOSTILE", json.dumps({"conn_type": "mlrunway_fake",
                                                                "extra": {"name": "hostile"}}))
    monkeypatch.setenv("AIRFLOW_CONN_LOCAL_HOSTILE", json.dumps({"conn_type": "mlrunway_local",
                                                                 "extra": {"workspace": str(workspace)}}))
    token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="reader", role="viewer"))
    fake = FakeBackend.named("hostile")
    try:
        yield TestClient(app, cookies={"_token": token}), fake, tmp_path
    finally:
        FakeBackend.forget("hostile")


def sweep_report(v: str) -> Any:
    """A sweep report with ``v`` in every field a job, model, property or endpoint sets."""
    trials = [TrialInfo(name=f"digits-0123abcd-sweep_trial_{i}", params={v: v, "lr": 0.1}, status=JobStatus.FAILED,
                        history=(0.1, 0.2), error=v, early_termination={"interval": 1, "reason": v})
              for i in range(2)]
    return report(trials=trials, sweep_status=v, error=v, stopped_because=v,
                  model={"name": v, "version": v, "properties": {"source_job": v, "params": {v: v}}},
                  onnx={"name": v, "version": v, "tags": {"mlrunway.model_card": v},
                        "properties": {"opset": v, "parity": {"samples": v, "inputs": v}}},
                  endpoint={"name": v, "provisioning_state": v, "traffic": {v: 100}, "scoring_uri": URL},
                  production={"decision": v, "endpoint": v, "reason": v,
                              "windows": [{"phase": v, "ok": False, "reason": v}]})


def saved_sweep_report(site: Any, v: str) -> str:
    client, fake, _ = site
    save(sweep_report(v), Path(fake.reports) / "digits-0123abcd-sweep")
    return client.get("/report/fake_hostile/digits-0123abcd-sweep").text


def model_version_page(site: Any, v: str) -> str:
    client, fake, tmp_path = site
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "m.onnx").write_text("x")
    name = f"digits-{len(v)}"  # one model per value: the fake keeps each version's files
    fake.models.register(name, tmp_path / "model", format=v, tags={v: v}, description=v,
                         properties={"source_job": v, v: v})
    return client.get(f"/report/fake_hostile/model/{name}/1").text


def mlflow_page(site: Any, v: str, route: str) -> str:
    return site[0].get(route.format(job=job_name(v))).text


def endpoint_page(site: Any, v: str) -> str:
    client, fake, _ = site
    fake.endpoints.endpoints.clear()
    fake.endpoints.create_or_update("digits-prod", EndpointSettings())
    for name in ("blue", "green"):
        fake.endpoints.create_or_update_deployment("digits-prod", name, DeploymentSettings(model=v, code_dir="."))
    deployments = fake.endpoints.endpoints["digits-prod"].deployments  # green failed: why, in the service's words
    deployments["green"] = replace(deployments["green"], provisioning_state=ProvisioningState.FAILED, error=v)
    return client.get("/endpoint/fake_hostile/digits-prod").text


def damaged_version_page(site: Any, v: str) -> str:
    """A version whose record the backend could not use, its words (``error``) holding ``v``."""
    client, fake, tmp_path = site
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "m.onnx").write_text("x")
    name = f"damaged-{len(v)}"
    version = fake.models.register(name, tmp_path / "model")
    fake.models.versions[name] = [replace(version, damaged=True, error=v)]
    return client.get(f"/report/fake_hostile/model/{name}/1").text


def damaged_sweep_report(v: str) -> Any:
    """A sweep report whose versions' records are damaged and whose every section could not read something, each
    in ``v``'s words."""
    fields = sweep_report(v)
    return replace(fields, model={**fields.model, "damaged": v}, onnx={**fields.onnx, "damaged": v},
                   problems={section: v for section in ("model", "onnx", "endpoint", "production")})


def monitoring_page(site: Any, v: str, route: str) -> str:
    from mlrunway.monitoring import drift, monitor

    client, fake, _ = site
    rows = [{v: float(i % 10), "label": v} for i in range(60)]
    found = drift.signal(v, "model_inputs", rows, rows, drift.DriftSettings(min_rows=10))
    monitor.save(monitor.MonitorReport("digits-prod", (v,), 1_800_000_000 - 3600, 1_800_000_000, (found,),
                                       {"drift": drift.DriftSettings(min_rows=10).to_dict(), "note": v}),
                 Path(fake.reports))
    return client.get(route).text


def model_card_page(site: Any, v: str) -> str:
    from mlrunway.deploy import card

    client, fake, _ = site
    card.save(card.ModelCard(model=f"{v}:2", intended_use=v, data=[(v, v)], training=[(v, v)], evaluation=[(v, v)],
                             parity=[(v, v)], lineage=[(v, URL)], history=[{"at": v, "decision": v, "endpoint": v,
                                                                            "reason": v}]),
              ReportsFolder(Path(fake.reports)).card("digits-onnx", 2))
    return client.get("/report/fake_hostile/card/digits-onnx/2").text


def run_page(site: Any, v: str) -> str:
    client = site[0]
    return client.get(f"/runs/{quote(v.replace('/', ''), safe='')}/{quote(v.replace('/', ''), safe='')}").text


def error_page(site: Any, v: str) -> str:
    client = site[0]
    return client.get(f"/report/fake_hostile/{quote(v.replace('/', ''), safe='')}").text


# Each route the plugin registers, and how a page of it is made with a value in every field that can be set.
CASES: dict[str, Callable[[Any, str], str]] = {
    "/report/{conn_id}/{sweep}": saved_sweep_report,
    "/runs/{dag_id}/{run_id}": run_page,
    "/report/{conn_id}/run/{job}": lambda site, v: mlflow_page(site, v, "/report/local_hostile/run/{job}"),
    "/report/{conn_id}/model/{name}/{version}": model_version_page,
    "/mlflow/{conn_id}/{job}": lambda site, v: mlflow_page(site, v, "/mlflow/local_hostile/{job}"),
    "/endpoint/{conn_id}/{name}": endpoint_page,
    "/monitor/{conn_id}/{name}": lambda site, v: monitoring_page(site, v, "/monitor/fake_hostile/digits-prod"),
    "/monitor/{conn_id}/{name}/{stamp}": lambda site, v: monitoring_page(
        site, v, "/monitor/fake_hostile/digits-prod/20270115T080000Z"),
    "/report/{conn_id}/card/{name}/{version}": model_card_page,
}


def test_every_route_of_the_plugin_has_a_case():
    from mlrunway.airflow.ui import app

    assert {route.path for route in app.routes if hasattr(route, "methods")} == set(CASES)


# What a page shows of a record that is not whole: a damaged one, a section that could not be read (issue 76).
DAMAGED: dict[str, Callable[[Any, str], str]] = {
    "damaged version page": damaged_version_page,
    "damaged sweep report": lambda _, v: render_html(damaged_sweep_report(v), b""),
}


@pytest.mark.parametrize("route", [*CASES, "error page", "live sweep report", *DAMAGED])
def test_a_page_with_hostile_values_has_no_live_markup(site, route):
    make = {"error page": error_page, "live sweep report": lambda _, v: render_html(sweep_report(v), b""),
            **DAMAGED}.get(route) or CASES[route]
    plain, hostile = parsed(make(site, PLAIN)), parsed(make(site, HOSTILE))
    assert hostile.live == [], hostile.live
    assert hostile.shape == plain.shape  # no element or attribute that the page's own markup does not have
    assert any(tag == "meta" and "http-equiv" in attrs for tag, attrs in hostile.shape)  # the policy, in the page


def test_every_answer_of_the_plugin_carries_the_policy(site):
    client = site[0]
    for path in ("/report/fake_hostile/digits-0123abcd-sweep", "/endpoint/fake_hostile/nothing-here",
                 "/report/fake_hostile/card/x/abc"):
        assert client.get(path).headers["content-security-policy"] == CSP
    assert "script-src 'none'" in CSP and "object-src 'none'" in CSP and "base-uri 'none'" in CSP


def test_a_page_that_fails_carries_the_same_headers_as_every_other_answer(site):
    """Before: a 500 was answered by Starlette's outermost middleware, outside the one that sets the headers: the
    page's own meta policy held, the header was missing."""
    from mlrunway.airflow.views import headers

    client, fake, _ = site
    folder = Path(fake.reports) / "digits-89abcdef-sweep"
    folder.mkdir(parents=True)
    (folder / "report.html").write_bytes(b"\xff\xfe not a page")  # the route raises reading it
    as_served = TestClient(client.app, cookies=client.cookies, raise_server_exceptions=False)  # as uvicorn answers
    broken = as_served.get("/report/fake_hostile/digits-89abcdef-sweep")
    assert broken.status_code == 500 and 'id="error"' in broken.text
    answers = [broken, as_served.get("/endpoint/fake_hostile/nothing-here"), as_served.get("/runs/d/r")]
    assert [a.status_code for a in answers] == [500, 404, 200]
    assert "Content-Security-Policy" in headers() and headers()["Content-Security-Policy"] == CSP
    for answer in answers:
        assert {key: answer.headers.get(key) for key in headers()} == headers(), answer.status_code
