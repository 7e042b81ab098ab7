"""The DAG under a real scheduler: `airflow standalone` (scheduler, triggerer, dag-processor, api-server,
LocalExecutor) on PostgreSQL, a backfill of three weekly intervals plus the scheduled run, at most two at once.

Checks: every run succeeds; each has its own jobs, models and (deleted) endpoint; the sweeps waited in the
triggerer (the task logs say DEFERRED, the trigger fired); the data interval reached train.py; nothing is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlrunway.airflow.summary import leftovers
from mlrunway.local.backend import LocalBackend
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PG = "postgresql+psycopg2://postgres@127.0.0.1:5432"
TINY = {"epochs": 2, "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1}
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def database():
    psycopg2 = pytest.importorskip("psycopg2")
    name = f"mlrunway_e2e_{os.getpid()}"
    try:
        admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres")
    except psycopg2.OperationalError as exc:
        pytest.skip(f"PostgreSQL is not running on 127.0.0.1:5432 ({exc})")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
        cur.execute(f"CREATE DATABASE {name}")
    yield f"{PG}/{name}"
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.close()


def airflow(env: dict, *args: str) -> str:
    done = subprocess.run([str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_backfill_of_three_intervals_under_the_scheduler(database, small_digits, tmp_path):
    port = free_port()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "AIRFLOW_HOME": str(tmp_path / "home"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database, "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
           "AIRFLOW__API__PORT": str(port), "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5", "MLRUNWAY_WORKSPACE": str(tmp_path / "ws"),
           # As a deployment would: a task whose worker cannot reach the still-starting API server is retried,
           # and the retry re-attaches to whatever the first try started (names derive from the run).
           "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "1", "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
           "MLRUNWAY_DATA_DIR": str(small_digits)}
    airflow(env, "db", "migrate")
    log = open(tmp_path / "standalone.log", "w")
    server = subprocess.Popen([str(BIN / "airflow"), "standalone"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "train_sweep_deploy" not in airflow(env, "dags", "list", "-o", "plain"):
            assert time.monotonic() < deadline, "the DAG was never parsed"
            time.sleep(3)
        conf = json.dumps({**TINY, "data_dir": str(small_digits)})
        airflow(env, "backfill", "create", "--dag-id", "train_sweep_deploy", "--from-date", "2026-10-26",
                "--to-date", "2026-11-15", "--dag-run-conf", conf)
        deadline = time.monotonic() + 900
        while True:
            out = airflow(env, "dags", "list-runs", "train_sweep_deploy", "-o", "json")
            runs = json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("[")))
            if len(runs) >= 4 and all(r["state"] in ("success", "failed") for r in runs):
                break
            assert time.monotonic() < deadline, f"runs still going after 15 min: {runs}"
            time.sleep(5)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()

    backfills = sorted(r["run_id"] for r in runs if r["run_id"].startswith("backfill__"))
    assert backfills == [f"backfill__2026-11-{d}T00:00:00+00:00" for d in ("01", "08", "15")]
    assert {r["state"] for r in runs} == {"success"}, runs

    backend = LocalBackend.at(tmp_path / "ws")
    trains = [j for j in backend.jobs.list() if j.name.endswith("-train")]
    assert len(trains) == len(runs) == len({j.name.split("-")[1] for j in trains})  # one pipeline per run
    assert len({m.name for m in backend.models.list()}) == 2 * len(runs)  # its model and its ONNX model
    intervals = {next(line for line in backend.jobs.logs(j.name) if line.startswith("data interval ")) for j in trains}
    assert len(intervals) == len(runs)  # each run trained with its own interval
    assert backend.endpoints.list() == [] and leftovers(str(tmp_path / "ws")) == []

    task_logs = "".join(p.read_text() for p in (tmp_path / "home" / "logs").rglob("task_id=sweep/*.log"))
    assert task_logs.count("Pausing task as DEFERRED") >= len(runs) and "Trigger fired event" in task_logs
