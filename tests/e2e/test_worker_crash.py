"""The worker dies mid-sweep (SIGKILL, no on_kill, no cleanup): the next try re-attaches and loses nothing.

The sweep task runs blocking (``deferrable=False``) in a real Airflow task process (``dag.test()`` in a
subprocess, the run pinned to one run id as a retry would be); the process is killed once a trial has ended.
The sweep's supervisor is detached, so the sweep runs on; the second try finds it by name, submits nothing,
and the trials that had ended stand as they were.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mlrunway.backend.naming import RunNames
from mlrunway.backend.types import JobStatus
from mlrunway.errors import NotFound
from mlrunway.local.backend import LocalBackend
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
RUN_ID = "manual__2026-11-01T00:00:00+00:00"

DAG_FILE = '''
import os, sys
from datetime import datetime
sys.path.insert(0, {repo!r})
from airflow.sdk import DAG
from mlrunway.operators import SweepOperator
from tests.tutorial import OBJECTIVE, SPACE, bandit, tutorial_job

with DAG(dag_id="sweep_crash", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
    SweepOperator(task_id="sweep", trial=tutorial_job({data!r}, epochs=4, code={code!r}), search_space=SPACE,
                  objective=OBJECTIVE, early_termination=bandit(delay_evaluation=1),
                  limits={{"max_total_trials": 3, "max_concurrent_trials": 1}}, deferrable=False,
                  poll_interval_s=0.5, name_prefix="crash")
'''
RUN = textwrap.dedent('''
    import sys
    from datetime import datetime, timezone
    sys.path.insert(0, sys.argv[1])
    from sweep_crash import dag
    when = datetime(2026, 11, 1, tzinfo=timezone.utc)
    print("RUN", dag.test(logical_date=when, run_after=when).state, flush=True)
''')


def test_a_worker_killed_mid_sweep_is_followed_by_a_try_that_reattaches(airflow_db, digits, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "sweep_crash.py").write_text(DAG_FILE.format(repo=str(REPO), code=str(REPO / "training"), data=str(digits)))
    env = {**os.environ, "MLRUNWAY_WORKSPACE": str(tmp_path / "ws"), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    backend = LocalBackend.at(tmp_path / "ws")
    sweep = RunNames.of("sweep_crash", RUN_ID, "crash").sweep

    def task(log: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", RUN, str(dags)], env=env, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)

    worker = task(tmp_path / "try1.log")
    ended = wait_for_an_ended_trial(backend, sweep, worker)
    os.killpg(worker.pid, signal.SIGKILL)  # the worker's whole process group: nothing of it runs on
    worker.wait()
    before = backend.jobs.get(sweep)
    assert before.status is JobStatus.RUNNING, "the sweep outlives the worker"

    retry = task(tmp_path / "try2.log")
    assert retry.wait(timeout=300) == 0
    log = (tmp_path / "try2.log").read_text()
    assert "RUN success" in log, log[-3000:]
    assert f"Re-attaching to {sweep}, already Running: nothing new is submitted" in log
    assert "submitted:" not in log

    after = backend.jobs.get(sweep)
    assert after.status is JobStatus.COMPLETED and after.created == before.created
    trials = {t.name: t for t in backend.jobs.sweep_result(sweep).trials}
    assert len(trials) == 3
    for trial in ended:  # what had ended before the kill stands as it was
        assert trials[trial.name] == trial
    assert [j.name for j in backend.jobs.list() if j.kind == "sweep"] == [sweep]
    assert backend.leftovers() == []


def wait_for_an_ended_trial(backend: LocalBackend, sweep: str, worker: subprocess.Popen) -> list:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert worker.poll() is None, "the first try ended before it could be killed"
        try:
            ended = [t for t in backend.jobs.sweep_result(sweep).trials if t.status.is_terminal()]
        except (NotFound, OSError, ValueError):  # not submitted yet, or sweep.json not yet written
            ended = []
        if ended:
            return ended
        time.sleep(0.5)
    raise AssertionError("no trial ended within 180 s")
