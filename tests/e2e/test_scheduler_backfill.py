"""The DAG under a real scheduler: `airflow standalone` (scheduler, triggerer, dag-processor, api-server,
LocalExecutor) on PostgreSQL, a backfill of the latest two weekly intervals, run at once (at most two run together).

Checks: every run succeeds; each has its own jobs, models and (deleted) endpoint; the sweeps waited in the
triggerer (the task logs say DEFERRED, the trigger fired); the data interval reached train.py; nothing is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mlrunway.local.backend import LocalBackend
from tests.conftest import REPO
from tests.e2e.stack import free_port, run_states, wait_parsed

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long]  # 2 to 4 minutes: make test-long, outside CI
TINY = {"epochs": 2, "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1}
BIN = Path(sys.executable).parent


def airflow(env: dict, *args: str) -> str:
    done = subprocess.run([str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def latest_weekly_run(now: datetime) -> datetime:
    """The logical date of @weekly's latest run by ``now``: Airflow 3 reads a cron schedule as a trigger
    (CronTriggerTimetable), so that is the latest Sunday 00:00 UTC, today's on a Sunday."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - timedelta(days=(midnight.weekday() + 1) % 7)


def test_backfill_of_two_intervals_under_the_scheduler(database, small_digits, tmp_path):
    # Created paused, backfilled up to the latest run, then unpaused: the scheduler finds its latest run taken and
    # adds none of its own (a scheduled run would take the DAG's production defaults: minutes more of this suite).
    latest = latest_weekly_run(datetime.now(UTC))
    port = free_port()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "AIRFLOW_HOME": str(tmp_path / "home"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database, "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
           "AIRFLOW__API__PORT": str(port), "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5", "MLRUNWAY_WORKSPACE": str(tmp_path / "ws"),
           # Each run's sweep defers, however fast this machine runs it (what ends within 20 s never defers).
           "MLRUNWAY_DEFER_AFTER_S": "2",
           # As a deployment would: a task whose worker cannot reach the still-starting API server is retried,
           # and the retry re-attaches to whatever the first try started (names derive from the run).
           "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "1", "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
           "MLRUNWAY_DATA_DIR": str(small_digits)}
    airflow(env, "db", "migrate")
    log = open(tmp_path / "standalone.log", "w")
    server = subprocess.Popen([str(BIN / "airflow"), "standalone"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        wait_parsed(database, "train_sweep_deploy")
        conf = json.dumps({**TINY, "data_dir": str(small_digits)})
        airflow(env, "backfill", "create", "--dag-id", "train_sweep_deploy", "--from-date",
                (latest - timedelta(days=7)).date().isoformat(), "--to-date", latest.date().isoformat(),
                "--dag-run-conf", conf)
        airflow(env, "dags", "unpause", "train_sweep_deploy")
        deadline = time.monotonic() + 900
        while True:
            states = run_states(database, "train_sweep_deploy")
            if len(states) >= 2 and set(states.values()) <= {"success", "failed"}:
                break
            assert time.monotonic() < deadline, f"runs still going after 15 min: {states}"
            time.sleep(3)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()

    runs = states
    backfills = sorted(run for run in runs if run.startswith("backfill__"))
    assert backfills == [f"backfill__{(latest - timedelta(days=d)).isoformat()}" for d in (7, 0)]
    assert len(runs) == 2, "the latest run is the backfill's: the scheduler adds none of its own"
    assert set(runs.values()) == {"success"}, runs

    backend = LocalBackend.at(tmp_path / "ws")
    trains = [j for j in backend.jobs.list() if j.name.endswith("-train")]
    assert len(trains) == len(runs) == len({j.name.split("-")[1] for j in trains})  # one pipeline per run
    assert len({m.name for m in backend.models.list()}) == 2 * len(runs)  # its model and its ONNX model
    intervals = {next(line for line in backend.jobs.logs(j.name) if line.startswith("data interval ")) for j in trains}
    assert len(intervals) == len(runs)  # each run trained with its own interval
    assert backend.endpoints.list() == [] and backend.leftovers() == []

    task_logs = "".join(p.read_text() for p in (tmp_path / "home" / "logs").rglob("task_id=sweep/*.log"))
    assert task_logs.count("Pausing task as DEFERRED") >= len(runs) and "Trigger fired event" in task_logs
