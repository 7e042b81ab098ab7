"""The first-run tutorial's UI recipe (docs/tutorials/first-run.md) as a newcomer follows it: ``make ui`` on another port (airflow standalone, SQLite), sign
in, trigger the DAG from its form in headless Chromium, watch the run, open every link.

Checks: the recipe's own output (the URL, where the password is); the form opens on titled fields a first run
needs; one run only (the schedule is off); the preflight's warning is the train task's first words; the sweep
task's log says each trial's start, epochs and end; the report tab shows the live report and refreshes it by
itself; each link leads to a page that answers (a trial's run, the chosen model's version page, the model card,
the kept endpoint's page with a curl call and no key; a missing one's page says so with a way back); nothing is
left running. Screenshots:
.test-artifacts/browser/recipe-*.png.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from mlrunway.backend.naming import RunNames
from mlrunway.local.backend import LocalBackend
from tests.conftest import REPO
from tests.e2e.stack import free_port
from tests.e2e.test_celery_ui import DAG, SHOTS, chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long]  # 2 to 4 minutes: make test-long, outside CI
FORM = {"epochs": "3", "max_trials": "2", "max_concurrent_trials": "2"}  # the open section's own fields


def rows(database: Path, sql: str, *args: object) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(database, timeout=30)) as conn:
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError:  # the tables are not there yet (the migration runs)
            return []


def wait(condition, timeout: float, what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"make ui exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what} not in {timeout:.0f} s:\n{log.read_text()[-3000:]}"
        time.sleep(2)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except OSError:
        return False


def test_the_readmes_ui_recipe_from_the_form_to_each_link(digits, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    port, home, workspace = free_port(), tmp_path / "home", tmp_path / "ws"
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "make-ui.log"
    env = {**os.environ, "MLRUNWAY_WORKSPACE": str(workspace), "MLRUNWAY_DATA_DIR": str(digits),
           "MLRUNWAY_DEFER_AFTER_S": "2"}  # the sweep defers: its progress then comes from the triggerer
    with log.open("w") as out:  # as the tutorial writes it, on another port
        proc = subprocess.Popen(["make", "ui", f"UI_PORT={port}", f"UI_HOME={home}"], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    database = home / "airflow.db"
    try:
        wait(lambda: answers(f"{base}/api/v2/monitor/health") and (
            home / "simple_auth_manager_passwords.json.generated").is_file(), 240, "the UI", proc, log)
        printed = log.read_text()
        assert f"mlrunway UI: http://127.0.0.1:{port}" in printed and "Schedule: none" in printed
        assert "simple_auth_manager_passwords.json.generated" in printed
        password = re.search(r'"admin": "([^"]+)"', (home / "simple_auth_manager_passwords.json.generated")
                             .read_text()).group(1)
        wait(lambda: rows(database, "SELECT 1 FROM serialized_dag WHERE dag_id = ?", DAG), 180, "the DAG's parse",
             proc, log)

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(base + "/")
            page.locator("input[name=username]").fill("admin")
            page.locator("input[name=password]").fill(password)
            page.get_by_role("button", name=re.compile("sign in", re.I)).click()
            page.wait_for_url(re.compile(r".*/$"))

            page.goto(f"{base}/dags/{DAG}")
            page.get_by_role("button", name=re.compile("^Trigger", re.I)).first.click()
            form = page.get_by_role("dialog")
            expect(form.get_by_text("Trials at once")).to_be_visible()  # open: what a first run needs, titled
            for field, value in FORM.items():
                form.locator(f"input[name=element_{field}]").fill(value)
            switch = form.locator("input[name=element_keep_endpoint]")
            switch.locator("xpath=..").click()  # the switch (its label); its endpoint's page is looked at below
            expect(switch).to_be_checked()
            page.screenshot(path=SHOTS / "recipe-1-form.png", full_page=True)
            form.get_by_role("button", name=re.compile("^Trigger$")).click()
            page.wait_for_url(re.compile(f"/dags/{DAG}/runs/"))
            run_id = urllib.parse.unquote(page.url.rsplit("/runs/", 1)[1])

            page.get_by_role("link", name="Sweep report").click()  # the run's tab, while the sweep runs
            frame = page.frame_locator("iframe").first
            expect(frame.locator("#live")).to_be_visible(timeout=240_000)
            first = frame.locator("#summary").inner_text()
            deadline = time.monotonic() + 120  # the page asks again by itself: its figures move with no reload
            while frame.locator("#summary").inner_text() == first:
                assert time.monotonic() < deadline, f"the live report never refreshed: {first}"
                time.sleep(1)
            page.screenshot(path=SHOTS / "recipe-2-live-report.png")

            wait(lambda: rows(database, "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG, run_id)
                 in ([("success",)], [("failed",)]), 900, "the run's end", proc, log)
            names = RunNames.of(DAG, run_id, "digits")
            page.goto(f"{base}/mlrunway/report/mlrunway_default/{names.sweep}")
            page.screenshot(path=SHOTS / "recipe-3-report.png", full_page=True)
            page.locator("a.run").first.click()  # a trial leads to its MLflow run
            run_page = page.inner_text("body")
            page.go_back()
            page.locator("a.version").first.click()  # the chosen model to its version page
            version_page = page.inner_text("body")
            page.go_back()
            page.locator("a#model-card").click()
            card_page = page.inner_text("body")
            page.goto(f"{base}/mlrunway/endpoint/mlrunway_default/{names.endpoint}")  # kept: keep_endpoint
            endpoint_page = page.inner_text("body")
            page.screenshot(path=SHOTS / "recipe-4-endpoint.png", full_page=True)
            page.goto(f"{base}/mlrunway/endpoint/mlrunway_default/{names.endpoint}x")  # none such
            gone = page.inner_text("body")
            page.screenshot(path=SHOTS / "recipe-5-error-page.png", full_page=True)
            page.get_by_role("link", name="Airflow").click()  # an error page leads back
            page.wait_for_url(re.compile(f"^{re.escape(base)}/?$"))
            browser.close()
        served = LocalBackend.at(workspace).endpoints
        key, uri = served.get_keys(names.endpoint)["primary"], served.get(names.endpoint).scoring_uri
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as the recipe says
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kept = [e.name for e in LocalBackend.at(workspace).endpoints.list()]  # keep_endpoint: its server outlives
        for name in kept:  # the run, and a failed test must not leave it serving
            LocalBackend.at(workspace).endpoints.delete(name)

    runs = rows(database, "SELECT run_id, state FROM dag_run WHERE dag_id = ?", DAG)
    assert runs == [(run_id, "success")], runs  # one run: the schedule was off, unpausing started no other
    logs = {task: "".join(p.read_text() for p in (home / "logs").rglob(f"run_id={run_id}/task_id={task}/*.log"))
            for task in ("train", "sweep")}
    assert "early termination can never stop a trial: bandit first looks after epoch 10" in logs["train"]
    for trial in (f"{names.sweep}_trial_0", f"{names.sweep}_trial_1"):
        assert re.search(rf"trial {trial} started: learning_rate=", logs["sweep"]), logs["sweep"][-3000:]
        assert re.search(rf"trial {trial} epoch 1: best_val_acc = \d", logs["sweep"])
        assert re.search(rf"trial {trial} completed after 3 epochs, best best_val_acc", logs["sweep"])
    assert "MLflow run of" in run_page and "mlflow ui --backend-store-uri" in run_page
    assert f"Model {names.model}" in version_page and "from job" in version_page
    assert "Model card:" in card_page
    backend = LocalBackend.at(workspace)
    assert f"KEY=$(.venv/bin/python -m mlrunway.local keys {names.endpoint})" in endpoint_page
    assert f"curl -X POST {uri}" in endpoint_page
    assert key not in endpoint_page
    assert "404" in gone and "deleted by its run's cleanup" in gone
    assert kept == [names.endpoint]  # the endpoint the form asked to keep, deleted above
    assert backend.leftovers() == []
    assert not answers(f"{base}/api/v2/monitor/health")  # Ctrl-C stopped every component
