"""The plugin's pages through FastAPI's client, behind Airflow's own auth: a token from the auth manager."""

from __future__ import annotations

import base64
import html
import io
import json
import re

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from mlrunway.local.backend import LocalBackend
from mlrunway.report import save
from mlrunway.specs import CommandJobSpec
from tests.conftest import write_script
from tests.mlrunway.test_report import SWEEP, report

pytestmark = pytest.mark.slow  # a migrated Airflow database for the auth manager

LOGS_EPOCHS = """
import mlflow
mlflow.log_param("learning_rate", 0.05)
for epoch in range(4):
    mlflow.log_metric("val_acc", 0.2 * epoch, step=epoch)
mlflow.log_metric("best_val_acc", 0.6)
"""


@pytest.fixture
def client(airflow_db, tmp_path, monkeypatch):
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from mlrunway.airflow.ui import app

    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setenv("AIRFLOW_CONN_MLRUNWAY_TEST", json.dumps({"conn_type": "mlrunway_local",
                                                                 "extra": {"workspace": str(tmp_path / "ws")}}))
    token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="reader", role="viewer"))
    signed_in = TestClient(app, cookies={"_token": token})
    return signed_in


def test_pages_need_an_airflow_session(client):
    anonymous = TestClient(client.app)
    refused = anonymous.get(f"/report/mlrunway_test/{SWEEP}")
    assert refused.status_code == 401 and "Sign in to Airflow first" in refused.text
    assert TestClient(client.app, cookies={"_token": "forged"}).get(f"/report/mlrunway_test/{SWEEP}").status_code == 403


def test_the_saved_report_is_served_with_its_plot(client, tmp_path):
    save(report(), tmp_path / "ws" / "reports" / SWEEP)
    page = client.get(f"/report/mlrunway_test/{SWEEP}")
    assert page.status_code == 200 and "Sweep report: digits-0123abcd-sweep" in page.text
    assert page.text.count('id="nav"') == 1  # the saved file, with the way back on top
    assert f'<a class="run" href="run/{SWEEP}_trial_0">' in page.text  # each trial leads to its run
    assert '<a class="version" href="model/digits-0123abcd/1">digits-0123abcd:1</a>' in page.text
    png = base64.b64decode(re.search(r'id="curves"[^>]*src="data:image/png;base64,([^"]+)"', page.text).group(1))
    assert Image.open(io.BytesIO(png)).format == "PNG"


def test_a_run_without_a_sweep_is_a_404_that_says_why(client):
    page = client.get("/report/mlrunway_test/digits-89abcdef-sweep")
    assert page.status_code == 404 and "sweep 'digits-89abcdef-sweep' does not exist" in html.unescape(page.text)
    assert page.headers["content-type"].startswith("text/html") and 'id="error"' in page.text
    assert '<a href="/">Airflow</a>' in page.text and "javascript:" not in page.text  # an error page leads back
    assert client.get("/report/no_such_conn/digits-89abcdef-sweep").status_code == 404
    assert client.get("/endpoint/mlrunway_test/digits-89abcdef").status_code == 404


def test_the_mlflow_page_shows_a_real_jobs_params_metrics_and_curves(client, tmp_path):
    backend = LocalBackend.at(tmp_path / "ws")
    code = write_script(tmp_path / "code", LOGS_EPOCHS)
    backend.jobs.submit("epochs-job", CommandJobSpec(code=str(code), command="python script.py", experiment_name="e"))
    backend.jobs.wait("epochs-job", poll_s=0.2)
    page = client.get("/mlflow/mlrunway_test/epochs-job")
    assert page.status_code == 200, page.text
    assert "<td>learning_rate</td><td>0.05</td>" in page.text
    assert "<td>val_acc</td><td>0.6</td><td>4</td>" in page.text and "<td>best_val_acc</td><td>0.6</td><td>1</td>" in page.text
    assert 'id="curves"' in page.text  # val_acc has a curve; best_val_acc, one value, has none
    assert "mlflow ui --backend-store-uri sqlite:///" in page.text  # and how to open MLflow's own UI on it
    assert client.get("/report/mlrunway_test/run/epochs-job").text == page.text  # where a report's trial leads

    backend.models.register("digits", code, properties={"source_job": "epochs-job"})
    backend.models.set_alias("digits", 1, "production")
    version = client.get("/report/mlrunway_test/model/digits/1")
    assert version.status_code == 200, version.text
    assert 'from job <a id="source" href="../../run/epochs-job">epochs-job</a>; aliases: production' in version.text
    assert "<code>models:/digits/1</code>" in version.text
    assert client.get("/report/mlrunway_test/model/digits/7").status_code == 404


def test_no_schema_page_answers_without_a_session(client):
    anonymous = TestClient(client.app)
    assert [anonymous.get(page).status_code for page in ("/docs", "/redoc", "/openapi.json")] == [404, 404, 404]


def test_a_model_card_is_served_beside_the_reports_and_a_missing_one_says_why(client, tmp_path):
    from mlrunway.deploy import card
    from mlrunway.ledger.reports import CARDS

    card.save(card.ModelCard(model="digits-0123abcd-onnx:2", history=[
        {"at": "2026-11-26T10:00:00Z", "decision": "deployed", "endpoint": "digits-0123abcd", "reason": "smoke test"}]),
        tmp_path / "ws" / "reports" / CARDS / "digits-0123abcd-onnx" / "2")
    page = client.get("/report/mlrunway_test/card/digits-0123abcd-onnx/2")
    assert page.status_code == 200 and "Model card: digits-0123abcd-onnx:2" in page.text
    assert "deployed on digits-0123abcd: smoke test" in page.text
    missing = client.get("/report/mlrunway_test/card/digits-0123abcd-onnx/3")
    assert missing.status_code == 404 and "has no model card" in missing.text
    assert TestClient(client.app).get("/report/mlrunway_test/card/digits-0123abcd-onnx/2").status_code == 401


def test_the_endpoint_page_shows_how_to_call_it_without_its_key(airflow_db, monkeypatch):
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from mlrunway.airflow.ui import app
    from mlrunway.backend.fake import FakeBackend
    from mlrunway.backend.types import EndpointSettings

    monkeypatch.setenv("AIRFLOW_CONN_FAKE_UI", json.dumps({"conn_type": "mlrunway_fake", "extra": {"name": "ui"}}))
    fake = FakeBackend.named("ui")
    try:
        fake.endpoints.create_or_update("digits-prod", EndpointSettings())
        token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="reader", role="viewer"))
        page = TestClient(app, cookies={"_token": token}).get("/endpoint/fake_ui/digits-prod")
    finally:
        FakeBackend.forget("ui")
    assert page.status_code == 200, page.text
    uri = fake.endpoints.get("digits-prod").scoring_uri
    assert "KEY=$(.venv/bin/python -m mlrunway.local keys digits-prod)" in page.text
    assert f"curl -X POST {uri} -H \"Authorization: Bearer $KEY\"" in html.unescape(page.text)  # escaped as text
    assert all(key not in page.text for key in fake.endpoints.get_keys("digits-prod").values())


def test_the_monitoring_page_shows_the_latest_report_and_lists_the_earlier_ones(client, tmp_path):
    from mlrunway.monitoring import drift, monitor

    reference = [{"mean": float(i % 10), "label": str(i % 3)} for i in range(300)]
    shifted = [{"mean": float(i % 10) + 4, "label": str(i % 3)} for i in range(300)]
    folder = tmp_path / "ws" / "reports"
    for end, rows in ((1_800_000_000, reference), (1_800_003_600, shifted)):
        found = drift.signal("data_drift", "model_inputs", reference, rows, drift.DriftSettings())
        monitor.save(monitor.MonitorReport("digits-prod", ("blue",), end - 3600, end, (found,), {
            "drift": drift.DriftSettings().to_dict()}), folder)
    page = client.get("/monitor/mlrunway_test/digits-prod")
    assert page.status_code == 200 and "Monitor: endpoint digits-prod" in page.text and 'id="nav"' in page.text
    assert "DRIFTED" in page.text and "data:image/png;base64," in page.text
    assert '<a href="digits-prod/20270115T080000Z">' in page.text  # the earlier stable one, a click away
    earlier = client.get("/monitor/mlrunway_test/digits-prod/20270115T080000Z")
    assert earlier.status_code == 200 and "STABLE" in earlier.text
    missing = client.get("/monitor/mlrunway_test/other-prod")
    assert missing.status_code == 404 and "monitor_endpoint DAG" in missing.text
    assert client.get("/monitor/mlrunway_test/digits-prod/..%2Flatest").status_code == 404


def test_routes_stay_inside_the_reports_folder_and_every_failure_is_a_page(client, tmp_path):
    """Before: /report/<conn>/card/../.. served the workspace's card.html, /report/<conn>/.. its report.html, and
    /endpoint/<conn>/.. or a version that is not a number were plain-text 500s. (%2E%2E: a client resolves a
    literal ``..`` before sending; the server decodes it into the path parameter.)"""
    reports = tmp_path / "ws" / "reports"
    save(report(), reports / SWEEP)
    (tmp_path / "ws" / "report.html").write_text("<html><body>outside the reports folder</body></html>")
    (tmp_path / "ws" / "card.html").write_text("<html><body>outside the reports folder</body></html>")
    for path, words in (("/report/mlrunway_test/%2E%2E", "sweep: '..' is not a valid name"),
                        ("/report/mlrunway_test/card/%2E%2E/%2E%2E", "model: '..' is not a valid model name"),
                        ("/report/mlrunway_test/card/digits/%2E%2E", "version: '..' is not a version number"),
                        ("/endpoint/mlrunway_test/%2E%2E", "endpoint: '..' is not a valid endpoint name"),
                        ("/monitor/mlrunway_test/%2E%2E", "endpoint: '..' is not a valid endpoint name"),
                        ("/mlflow/mlrunway_test/%2E%2E", "job: '..' is not a valid name"),
                        ("/report/mlrunway_test/model/digits/abc", "version: 'abc' is not a version number")):
        page = client.get(path)
        assert page.status_code == 404 and 'id="error"' in page.text, (path, page.status_code, page.text[:300])
        assert words in html.unescape(page.text) and "outside the reports folder" not in page.text, path
    (reports / SWEEP / "report.html").write_bytes(b"\xff\xfe damaged")  # a file that cannot be read as a page
    as_served = TestClient(client.app, cookies=client.cookies, raise_server_exceptions=False)  # as uvicorn answers
    broken = as_served.get(f"/report/mlrunway_test/{SWEEP}")
    assert broken.status_code == 500 and 'id="error"' in broken.text and "API server's log" in broken.text
    assert broken.headers["content-type"].startswith("text/html")
