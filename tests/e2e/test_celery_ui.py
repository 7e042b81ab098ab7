"""Scale-out on real services: the DAG triggered through Airflow's REST API and run by a real scheduler with the
CeleryExecutor (PostgreSQL metadata database, Redis broker), two Celery workers and a triggerer. (The UI as a
newcomer meets it, form and browser included, is tests/e2e/test_ui_recipe.py.)

Checks: the run succeeds; its tasks ran on both workers; the sweep's wait was held by the triggerer, which wrote
the trials' progress into the task's log; the saved report has the endpoint as it served; the tasks' links lead
to pages that answer behind Airflow's auth; nothing is left running.
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

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long]  # 2 to 4 minutes: make test-long, outside CI
DAG = "train_sweep_deploy"
CONF = {"epochs": 4, "max_trials": 3, "max_concurrent_trials": 2, "delay_evaluation": 1}
SHOTS = REPO / ".test-artifacts" / "browser"  # the browser tests' screenshots (tests/e2e/test_ui_recipe.py)


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


def text(stack: AirflowStack, jwt: str, path: str) -> str:
    request = urllib.request.Request(stack.base_url + path, headers={"Authorization": f"Bearer {jwt}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return re.sub(r"<[^>]+>", "", response.read().decode())


def test_a_triggered_run_on_celery_workers_and_its_pages(database, broker, digits, tmp_path):
    workspace = tmp_path / "ws"
    stack = AirflowStack(tmp_path / "home", database, broker, {
        "MLRUNWAY_WORKSPACE": str(workspace), "MLRUNWAY_DATA_DIR": str(digits),
        "MLRUNWAY_SCHEDULE": "none",  # only the run the test triggers
        "MLRUNWAY_DEFER_AFTER_S": "2"})  # the sweep defers (the demo's ends within the default 20 s)
    try:
        stack.up(workers=2)
        jwt = stack.token()
        wait_parsed(database, DAG)  # the dag-processor's first parse
        request = urllib.request.Request(f"{stack.base_url}/api/v2/dags/{DAG}/dagRuns", method="POST", headers={
            "Authorization": f"Bearer {jwt}", "Content-Type": "application/json"},
            data=json.dumps({"logical_date": None, "conf": CONF}).encode())
        with urllib.request.urlopen(request, timeout=30) as response:
            run_id = json.loads(response.read())["dag_run_id"]
        state = wait_for_run(database, run_id, timeout=900)
        links = {name: api(stack, jwt, f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id)}"
                                       f"/taskInstances/{name}/links")["extra_links"]
                 for name in ("train", "sweep", "deploy_blue", "cleanup")}
        report_url = links["sweep"]["Sweep report"]
        report_text = text(stack, jwt, report_url)
        card_text = text(stack, jwt, links["deploy_blue"]["Model card"])
        mlflow_text = text(stack, jwt, links["train"]["MLflow run"])
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
    assert re.search(rf"trial {names.sweep}_trial_0 epoch 1: best_val_acc = \d", task_log)  # the trigger's progress

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
