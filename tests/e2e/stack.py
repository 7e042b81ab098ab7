"""A real Airflow deployment on this machine for the scale-out test: the CeleryExecutor, PostgreSQL as the
metadata database, Redis as the broker; api-server, scheduler, dag-processor, triggerer and Celery workers as
separate processes, each with its own log file."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import REPO

BIN = Path(sys.executable).parent
PG = "postgresql+psycopg2://postgres@127.0.0.1:5432"
# Each Celery worker reports this as its tasks' hostname, so the test can tell two workers on one machine apart.
HOSTNAME_MODULE = "import os\n\ndef name():\n    return os.environ['MLRUNWAY_TEST_WORKER']\n"


def query(database: str, sql: str, *args: object) -> list[tuple]:
    """Rows of ``sql`` on the metadata database. The tests wait on the database itself: each ``airflow`` CLI call
    costs 3-5 s of CPU (Airflow's import), which a poll every few seconds takes from the scheduler and its tasks."""
    import contextlib

    import psycopg2

    with contextlib.closing(psycopg2.connect(database.replace("postgresql+psycopg2://", "postgresql://"))) as conn:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()


def wait_parsed(database: str, dag_id: str, timeout: float = 180) -> None:
    """Until the dag-processor has serialized ``dag_id`` (what ``airflow dags list`` and the UI read)."""
    deadline = time.monotonic() + timeout
    while not query(database, "SELECT 1 FROM serialized_dag WHERE dag_id = %s", dag_id):
        assert time.monotonic() < deadline, f"the DAG {dag_id} was never parsed"
        time.sleep(2)


def run_states(database: str, dag_id: str) -> dict[str, str | None]:
    """Each run of ``dag_id`` and its state."""
    return dict(query(database, "SELECT run_id, state FROM dag_run WHERE dag_id = %s", dag_id))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AirflowStack:
    def __init__(self, home: Path, database: str, broker: str, extra_env: dict[str, str]) -> None:
        self.home, self.port = home, free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        home.mkdir(parents=True, exist_ok=True)
        (home / "worker_hostname.py").write_text(HOSTNAME_MODULE)
        self.env = {
            **os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "AIRFLOW_HOME": str(home),
            "PYTHONPATH": os.pathsep.join([str(home), str(REPO)]),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database,
            "AIRFLOW__CELERY__BROKER_URL": broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + database,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),  # the UI plugin loads through its entry point
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__API__PORT": str(self.port), "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "1", "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
            **extra_env,
        }
        self.password = secrets.token_urlsafe(12)
        (home / "simple_auth_manager_passwords.json.generated").write_text(f'{{"admin": "{self.password}"}}')
        self.procs: dict[str, subprocess.Popen] = {}

    def cli(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([str(BIN / "airflow"), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        log = open(self.home / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen([str(BIN / "airflow"), *args], env={**self.env, **(env or {})},
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def token(self) -> str:
        """A JWT from the simple auth manager, as the UI's sign-in gets one."""
        import json

        request = urllib.request.Request(self.base_url + "/auth/token", method="POST", headers={
            "Content-Type": "application/json"}, data=json.dumps({"username": "admin", "password": self.password}).encode())
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(json.loads(response.read())["access_token"])

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` to the REST API at ``path``, signed in as admin; its answer."""
        import json

        request = urllib.request.Request(self.base_url + path, method="POST", data=json.dumps(body).encode(), headers={
            "Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")

    def up(self, workers: int = 2) -> None:
        self.cli("db", "migrate")
        self.start("api-server", "api-server")
        self.start("scheduler", "scheduler")
        self.start("dag-processor", "dag-processor")
        self.start("triggerer", "triggerer")
        for index in range(workers):
            worker = f"worker-{'ab'[index]}"
            self.start(worker, "celery", "worker", "--celery-hostname", f"{worker}@%h", env={
                "MLRUNWAY_TEST_WORKER": worker, "AIRFLOW__CORE__HOSTNAME_CALLABLE": "worker_hostname.name"})
        self.wait_http("/api/v2/monitor/health", 180)

    def wait_http(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{self.log(name)[-3000:]}"
            try:
                with urllib.request.urlopen(self.base_url + path, timeout=5):
                    return
            except OSError:
                assert time.monotonic() < deadline, f"{path} did not answer in {timeout:.0f} s"
                time.sleep(2)

    def down(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_shipped_dag(file: str, conf: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The DAG of ``dags/<file>.py`` run once by ``dag.test`` with ``conf`` (its tasks' params restored after:
    dag.test writes the run's conf into them); return the run and each task's result."""
    import copy

    from mlrunway.airflow.summary import run_results

    dags = str(Path(__file__).resolve().parents[2] / "dags")
    if dags not in sys.path:
        sys.path.insert(0, dags)
    dag = __import__(file).dag
    defaults = {task.task_id: copy.deepcopy(task.params) for task in dag.tasks}
    try:
        run = dag.test(run_conf=conf)
    finally:
        for task in dag.tasks:
            task.params = defaults[task.task_id]
    return run, run_results(dag.dag_id, run.run_id)
