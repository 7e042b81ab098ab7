"""Scale-out and the UI, on real services: the DAG triggered from the Airflow UI's form in headless Chromium,
run by a real scheduler with the CeleryExecutor (PostgreSQL metadata database, Redis broker), two Celery
workers and a triggerer; then its sweep report opened from the run's page.

Checks: the run succeeds; its tasks ran on both workers; the sweep's wait was held by the triggerer; the report
tab shows the plot (a decoded picture, not a broken image) and the saved report has the endpoint as it served;
the tasks' links lead to pages that answer; nothing is left running. Screenshots: .test-artifacts/browser/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.parse
import urllib.request

import pytest

from mlrunway.backend.naming import RunNames
from mlrunway.local import tracking
from mlrunway.local.backend import LocalBackend
from tests.conftest import REPO
from tests.e2e.stack import AirflowStack, query, run_states, wait_parsed

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
DAG = "train_sweep_deploy"
FORM = {"Training job": {"epochs": "6"}, "Sweep": {"max_trials": "4", "max_concurrent_trials": "2"},
        "Early termination": {"delay_evaluation": "2"}}
SECTIONS = ("Code and data", "Training job", "Sweep", "Early termination", "Deployment", "Backend")
SHOTS = REPO / ".test-artifacts" / "browser"


def chromium() -> str:
    path = os.environ.get("MLRUNWAY_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail("no Chromium: `make setup` installs Debian's chromium, or set MLRUNWAY_CHROMIUM=<its path>")
    return path


def wait_for_run(database: str, run_id: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = run_states(database, DAG).get(run_id)
        if state in ("success", "failed"):
            return state
        assert time.monotonic() < deadline, f"run {run_id} still {state} after {timeout:.0f} s"
        time.sleep(3)


def task_instances(database: str, run_id: str) -> dict[str, tuple[str, str]]:
    rows = query(database, "SELECT task_id, state, hostname FROM task_instance WHERE dag_id = %s AND run_id = %s",
                 DAG, run_id)
    return {task: (state, host) for task, state, host in rows}


def api(stack: AirflowStack, token: str, path: str) -> dict:
    request = urllib.request.Request(stack.base_url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_triggered_from_the_ui_form_on_celery_workers_then_its_sweep_report(database, broker, digits, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    workspace = tmp_path / "ws"
    stack = AirflowStack(tmp_path / "home", database, broker, {
        "MLRUNWAY_WORKSPACE": str(workspace), "MLRUNWAY_DATA_DIR": str(digits),
        "MLRUNWAY_SCHEDULE": "none",  # only the run the form triggers
        "MLRUNWAY_DEFER_AFTER_S": "2"})  # the sweep defers (the demo's ends within the default 20 s)
    try:
        stack.up(workers=2)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(stack.base_url + "/")
            page.locator("input[name=username]").fill("admin")
            page.locator("input[name=password]").fill(stack.password)
            page.get_by_role("button", name=re.compile("sign in", re.I)).click()
            page.wait_for_url(re.compile(r".*/$"))
            token = next(c["value"] for c in page.context.cookies() if c["name"] == "_token")

            wait_parsed(database, DAG)  # the dag-processor's first parse
            page.goto(f"{stack.base_url}/dags/{DAG}")
            page.get_by_role("button", name=re.compile("^Trigger", re.I)).first.click()
            form = page.get_by_role("dialog")
            for section in SECTIONS:  # the form shows the DAG's Params in these sections, one open at a time
                expect(form.get_by_role("button", name=section, exact=True)).to_be_visible()
            for section, fields in FORM.items():
                header = form.get_by_role("button", name=section, exact=True)
                if header.get_attribute("aria-expanded") == "false":
                    header.click()
                for field, value in fields.items():
                    form.locator(f"input[name=element_{field}]").fill(value)
                if section == "Training job":  # its JSON fields: command, inputs, distribution, compute...
                    page.screenshot(path=SHOTS / "1-trigger-form.png", full_page=True)
            submit = form.get_by_role("button", name=re.compile("^Trigger$"))
            expect(submit).to_be_enabled()  # every default of the form is valid as it stands
            submit.click()
            page.wait_for_url(re.compile(f"/dags/{DAG}/runs/"))
            run_id = urllib.parse.unquote(page.url.rsplit("/runs/", 1)[1])

            state = wait_for_run(database, run_id, timeout=900)
            page.goto(f"{stack.base_url}/dags/{DAG}/runs/{urllib.parse.quote(run_id)}")
            page.get_by_role("link", name="Sweep report").click()
            frame = page.frame_locator("iframe").first
            curves = frame.locator("img#curves")
            expect(curves).to_be_visible(timeout=30_000)
            width = curves.evaluate("img => img.complete ? img.naturalWidth : 0")
            page.screenshot(path=SHOTS / "2-run-sweep-report-tab.png")

            links = {name: api(stack, token, f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id)}"
                                             f"/taskInstances/{name}/links")["extra_links"]
                     for name in ("train", "sweep", "deploy_blue", "cleanup")}
            report_url = links["sweep"]["Sweep report"]
            page.goto(stack.base_url + report_url)
            page.screenshot(path=SHOTS / "3-sweep-report.png", full_page=True)
            report_text = page.inner_text("body")
            page.locator("a#model-card").click()  # the served version's model card, linked from the report
            page.wait_for_url(re.compile("/report/mlrunway_default/card/"))
            card_text = page.inner_text("body")
            page.screenshot(path=SHOTS / "5-model-card.png", full_page=True)
            page.goto(stack.base_url + links["train"]["MLflow run"])
            mlflow_text = page.inner_text("body")
            page.screenshot(path=SHOTS / "4-mlflow-run.png", full_page=True)
            browser.close()
    finally:
        stack.down()

    instances = task_instances(database, run_id)
    assert state == "success", instances
    assert {s for s, _ in instances.values()} == {"success"}
    assert {host for _, host in instances.values()} == {"worker-a", "worker-b"}, instances

    names = RunNames.of_sweep(report_url.rsplit("/", 1)[1])
    task_log = "".join(p.read_text() for p in (tmp_path / "home" / "logs").rglob(f"run_id={run_id}/task_id=sweep/*.log"))
    # The worker deferred; the triggerer (only it runs triggers) wrote its lines into the task's log.
    assert "Pausing task as DEFERRED" in task_log
    assert re.search(rf"trigger {DAG}/{re.escape(run_id)}/sweep/-1/1 \(ID \d+\) starting", task_log)
    assert re.search(rf"Trigger fired event.*'job_name': '{names.sweep}', 'outcome': 'ended', 'status': 'Completed'", task_log)

    assert width > 400, "the report's plot did not render as a picture"
    assert "Sweep report: " + names.sweep in report_text and "stopped early" in report_text
    assert f"{names.model}:1 from trial" in report_text and "top-1 agreement 100.00%" in report_text
    assert f"{names.endpoint} Succeeded, traffic blue 100%" in report_text  # saved while blue still served
    assert "best_val_acc" in mlflow_text and "learning_rate" in mlflow_text
    assert f"Model card: {names.model}-onnx:1" in card_text and "Decision history" in card_text
    assert f"deployed on {names.endpoint}" in card_text and "--learning-rate" in card_text  # the command it ran
    assert links["deploy_blue"]["Model card"].endswith(f"/report/mlrunway_default/card/{names.model}-onnx/1")
    assert links["deploy_blue"]["Endpoint"].endswith(f"/endpoint/mlrunway_default/{names.endpoint}")
    assert links["cleanup"]["Sweep report"] == report_url

    backend = LocalBackend.at(workspace)
    sweep_run = backend.jobs.get(names.sweep).mlflow_run_id
    kept = {a.path for a in tracking.client(backend.workspace).list_artifacts(sweep_run, "report")}
    assert kept == {"report/report.html", "report/curves.png", "report/report.json"}
    assert backend.endpoints.list() == [] and backend.leftovers() == []
