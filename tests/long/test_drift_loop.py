"""The production loop with no person in it (issue 35), on a real Airflow (standalone: scheduler, triggerer,
dag-processor, API server; SQLite) and the local backend:

1. a first run of train_sweep_deploy makes the production endpoint (its deployments collect model_inputs and
   model_outputs: the default for a production endpoint);
2. clients send it the held-out test images; the monitor DAG, triggered, finds them stable;
3. the world shifts: a labelled batch of inverted digits joins the data (every split), and clients send inverted
   images; the monitor finds drift and adds an event to the endpoint's drift asset;
4. the scheduler starts train_sweep_deploy on that event, by itself; it retrains on the data with the shifted
   batch, the gate compares the new model with production on the test split (which now holds inverted digits),
   the staged rollout moves traffic under the clients' load, and production changes.

About 8 minutes: ``make test-long``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlrunway.local.backend import LocalBackend
from tests.conftest import REPO
from tests.e2e.stack import BIN, free_port
from tests.e2e.test_ui_recipe import answers, rows

pytestmark = [pytest.mark.long, pytest.mark.e2e, pytest.mark.slow]
ENDPOINT = "loop-prod"
FIRST = {"epochs": 4, "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1}


def until(condition, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not in {timeout:.0f} s:\n{log.read_text()[-3000:]}"
        time.sleep(2)


def invert(data: Path) -> int:
    """The shifted batch: every image of every split once more, inverted (dark digits on white), same label."""
    count = 0
    for path in sorted(data.glob("*/*/*.png")):
        pixels = np.asarray(Image.open(path).convert("L"))
        Image.fromarray(255 - pixels).save(path.with_name(f"inverted-{path.name}"))
        count += 1
    return count


def images(folder: Path, inverted: bool) -> list[str]:
    """The split's PNGs (only the inverted ones, or only the others) as base64, as a client sends them."""
    return [base64.b64encode(p.read_bytes()).decode() for p in sorted(folder.rglob("*.png"))
            if p.name.startswith("inverted-") == inverted]


class Clients:
    """Production traffic: single images, a few a second, from a thread, until stopped."""

    def __init__(self, backend: LocalBackend, pool: list[str]) -> None:
        self.backend, self.pool, self.sent, self.stop = backend, pool, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):  # a rollout moving traffic answers every request; keep going
                self.backend.endpoints.invoke(ENDPOINT, payload={"images": [self.pool[self.sent % len(self.pool)]]})
                self.sent += 1
            time.sleep(0.08)


def trigger(base: str, jwt: str, dag: str, conf: dict) -> str:
    request = urllib.request.Request(f"{base}/api/v2/dags/{dag}/dagRuns", method="POST", data=json.dumps(
        {"logical_date": None, "conf": conf}).encode(), headers={"Authorization": f"Bearer {jwt}",
                                                                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["dag_run_id"]


def finished(database: Path, dag: str, run_id: str, log: Path, timeout: float) -> str:
    until(lambda: (rows(database, "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag, run_id)
                   or [(None,)])[0][0] in ("success", "failed"), timeout, f"{dag} {run_id}", log)
    return rows(database, "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag, run_id)[0][0]


def serving(backend: LocalBackend) -> str:
    info = backend.endpoints.get(ENDPOINT)
    live = max(info.traffic, key=info.traffic.get)
    return backend.endpoints.get_deployment(ENDPOINT, live).model


def test_drift_retrains_and_the_gate_changes_production_with_no_person(digits, tmp_path):
    data, home, workspace, port = tmp_path / "data", tmp_path / "home", tmp_path / "ws", free_port()
    shutil.copytree(digits, data)
    home.mkdir()
    (home / "simple_auth_manager_passwords.json.generated").write_text('{"admin": "loop-admin"}')
    base, log, database = f"http://127.0.0.1:{port}", tmp_path / "standalone.log", home / "airflow.db"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "AIRFLOW_HOME": str(home),
           "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": base,
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5", "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
           "MLRUNWAY_WORKSPACE": str(workspace), "MLRUNWAY_DATA_DIR": str(data), "MLRUNWAY_ENDPOINT_NAME": ENDPOINT,
           "MLRUNWAY_SCHEDULE": "none", "MLRUNWAY_MONITOR_SCHEDULE": "none"}
    backend = LocalBackend.at(workspace)
    with log.open("w") as out:
        proc = subprocess.Popen(["airflow", "standalone"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    clients = None
    try:
        until(lambda: answers(f"{base}/api/v2/monitor/health"), 240, "Airflow", log)
        jwt = _token(base)
        until(lambda: len(rows(database, "SELECT dag_id FROM serialized_dag WHERE dag_id IN "
                                         "('train_sweep_deploy', 'monitor_endpoint')")) == 2, 180, "the DAGs", log)

        # 1. production, from a first run
        first = trigger(base, jwt, "train_sweep_deploy", FIRST)
        assert finished(database, "train_sweep_deploy", first, log, 900) == "success"
        before = serving(backend)

        # 2. ordinary traffic reads as stable
        clients = Clients(backend, images(data / "test", inverted=False))
        clients.thread.start()
        until(lambda: clients.sent >= 150, 120, "ordinary traffic", log)
        calm = trigger(base, jwt, "monitor_endpoint", {"window_s": 600})
        assert finished(database, "monitor_endpoint", calm, log, 300) == "success"
        report = json.loads((workspace / "reports" / "monitor" / ENDPOINT / "latest.json").read_text())
        assert report["status"] == "stable", report["summary"]

        # 3. the shift: labelled inverted digits join the data; clients send inverted images
        assert invert(data) == len(list(digits.glob("*/*/*.png")))
        clients.stop.set()
        clients.thread.join()
        time.sleep(2.5)  # the last ordinary rows are handed over (once a second) and land before the shift's window
        shifted_at = float(math.ceil(time.time()))  # records carry whole seconds
        time.sleep(shifted_at - time.time() + 0.05)
        clients = Clients(backend, images(data / "test", inverted=True))
        clients.thread.start()
        until(lambda: clients.sent >= 150, 120, "shifted traffic", log)
        time.sleep(2)  # the collector hands rows over once a second
        drifted = trigger(base, jwt, "monitor_endpoint", {"window_s": math.ceil(time.time() - shifted_at) + 1})
        assert finished(database, "monitor_endpoint", drifted, log, 300) == "success"
        report = json.loads((workspace / "reports" / "monitor" / ENDPOINT / "latest.json").read_text())
        assert report["status"] == "drifted", report["summary"]
        assert rows(database, "SELECT count(*) FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ?",
                    f"mlrunway://endpoints/{ENDPOINT}/drift")[0][0] == 1

        # 4. nobody triggers it: the scheduler does, on the drift asset
        until(lambda: rows(database, "SELECT run_id FROM dag_run WHERE dag_id = 'train_sweep_deploy' "
                                     "AND run_type = 'asset_triggered'"), 120, "the asset-triggered run", log)
        (retrain,) = rows(database, "SELECT run_id FROM dag_run WHERE dag_id = 'train_sweep_deploy' "
                                    "AND run_type = 'asset_triggered'")[0]
        assert finished(database, "train_sweep_deploy", retrain, log, 1500) == "success"
        after = serving(backend)
        assert after != before, "production did not change"
        decision = rows(database, "SELECT value FROM xcom WHERE dag_id = 'train_sweep_deploy' AND run_id = ? "
                                  "AND task_id = 'deploy_blue' AND key = 'decision'", retrain)
        assert decision and "promoted" in str(decision[0][0])
    finally:
        if clients is not None:
            clients.stop.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for info in backend.endpoints.list():
            backend.endpoints.delete(info.name)
        assert backend.leftovers() == []


def _token(base: str) -> str:
    request = urllib.request.Request(base + "/auth/token", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"username": "admin", "password": "loop-admin"}).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["access_token"]
