"""Airflow's own faults while a sweep waits deferred (issue 59, 6): regression guards for what an independent probe
found handled, under a real deployment (CeleryExecutor, PostgreSQL, Redis; scheduler, triggerer, dag-processor,
api-server and a Celery worker as separate processes, tests/e2e/stack.py).

- the triggerer SIGKILLed while it holds the sweep's trigger, then started again: a new triggerer takes the trigger
  over once the dead one's heartbeat is stale, and the task resumes;
- the scheduler SIGKILLed while the sweep is deferred, then started again: the trigger fires meanwhile, and the new
  scheduler queues the resumed task;
- the Celery worker running a stable endpoint's deploy task SIGKILLed mid-rollout (the challenger at 50%), then the
  task cleared.

Each run must end true: a sweep's run succeeds with one sweep and its trials (no duplicate submitted by a resumed
or retried try), every job ended, nothing left running (the per-run endpoint deleted); the killed rollout changes
no production record, its cleared try promotes, and one deployment serves. Airflow's timeouts are set low through
AIRFLOW__ variables so each runs in minutes (1.5 to 2.5 each here; make test-long, outside CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlrunway.local.backend import LocalBackend
from tests.e2e.stack import AirflowStack, query, run_states, wait_parsed

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long]
DAG = "train_sweep_deploy"
CONF = {"epochs": 3, "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1}


def task_state(database: str, run_id: str, task_id: str) -> str | None:
    rows = query(database, "SELECT state FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s",
                 DAG, run_id, task_id)
    return rows[0][0] if rows else None


def triggerer_of(database: str, run_id: str) -> int | None:
    """The triggerer job that holds the sweep task's trigger (None: none yet, or it is not deferred)."""
    rows = query(database, "SELECT t.triggerer_id FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id "
                           "WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.task_id = 'sweep'", DAG, run_id)
    return rows[0][0] if rows else None


def task_events(home: Path, run_id: str) -> list[dict]:
    """The sweep task's log lines, its triggers' included: each ``event`` with its time (``at``)."""
    events = []
    for log in (home / "logs").rglob(f"run_id={run_id}/task_id=sweep/*.log"):
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                events.append({"event": record["event"], "at": datetime.fromisoformat(record["timestamp"])})
    return events


def wait_until(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(1)


@pytest.mark.parametrize("component", ["triggerer", "scheduler"])
def test_a_sweep_deferred_when_a_component_is_killed_ends_true(component, database, broker, small_digits, tmp_path):
    workspace = tmp_path / "ws"
    stack = AirflowStack(tmp_path / "home", database, broker, {
        "MLRUNWAY_WORKSPACE": str(workspace), "MLRUNWAY_DATA_DIR": str(small_digits), "MLRUNWAY_SCHEDULE": "none",
        "MLRUNWAY_DEFER_AFTER_S": "2",  # the sweep defers at once
        # Low, so that a dead triggerer's triggers move and a lost task is seen within seconds, not minutes.
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5"})
    run_id = f"fault_{component}"
    try:
        stack.up(workers=1)
        wait_parsed(database, DAG)
        stack.cli("dags", "trigger", DAG, "--run-id", run_id, "--conf", json.dumps({**CONF, "data_dir": str(small_digits)}))
        wait_until("the sweep deferred", lambda: task_state(database, run_id, "sweep") == "deferred", 600)
        wait_until("a triggerer took the trigger", lambda: triggerer_of(database, run_id) is not None, 60)
        killed, killed_at = stack.procs[component], datetime.now(UTC)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        time.sleep(3)
        stack.start(f"{component}-restarted", component)
        wait_until("the run ended", lambda: run_states(database, DAG).get(run_id) in ("success", "failed"), 900)
        state = run_states(database, DAG)[run_id]
    finally:
        stack.down()

    tasks = dict(query(database, "SELECT task_id, state FROM task_instance WHERE dag_id = %s AND run_id = %s",
                       DAG, run_id))
    assert state == "success", tasks
    events = task_events(tmp_path / "home", run_id)
    if component == "triggerer":  # the trigger ran again, on the restarted triggerer, after the kill
        assert any(e["event"].endswith(" starting") and e["at"] > killed_at for e in events), events
    else:  # the trigger fired, and the restarted scheduler queued the resumed task, which read the sweep's end
        assert any(e["event"].startswith("Trigger fired event") for e in events), events
        assert any(e["event"].endswith("ended Completed") and e["at"] > killed_at for e in events), events
    backend = LocalBackend.at(workspace)
    jobs = backend.jobs.list()
    sweeps = [job for job in jobs if job.kind == "sweep"]
    assert len(sweeps) == 1, [job.name for job in jobs]  # no duplicate submitted by the resumed task
    trials = backend.jobs.sweep_result(sweeps[0].name).trials
    assert len(trials) == CONF["max_trials"] and len([j for j in jobs if "_trial_" in j.name]) == len(trials)
    assert all(job.status.is_terminal() for job in jobs)
    assert backend.endpoints.list() == [] and backend.leftovers() == []


ENDPOINT = "digits-prod"
DEPLOY_DAG = "deploy_model"


def deploy_state(database: str, run_id: str) -> str | None:
    rows = query(database, "SELECT state FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = "
                           "'deploy_blue'", DEPLOY_DAG, run_id)
    return rows[0][0] if rows else None


def kill_worker(stack: AirflowStack, name: str) -> None:
    """SIGKILL a Celery worker and every process under it (its task processes included, whatever group they are
    in), as a machine's death would."""
    import psutil

    worker = psutil.Process(stack.procs[name].pid)
    doomed = [worker, *worker.children(recursive=True)]
    for proc in doomed:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(doomed, timeout=10)
    stack.procs[name].wait()


def test_a_deploy_worker_killed_mid_rollout_then_the_task_cleared_ends_true(database, broker, digits, onnx_model,
                                                                            tmp_path):
    """The Celery worker running deploy_blue is SIGKILLed while the task runs between two steps of the staged rollout
    (version 2 at 50% beside version 1); the task fails (no retries) and its cleanup puts production back; then the
    task is cleared, and the new try rolls version 2 out. Production is unchanged until a decision records it."""
    from tests.production.test_stable_endpoint_local import perturbed, steady_load

    workspace = tmp_path / "ws"
    local = LocalBackend.at(workspace)
    for noise in (0.6, 0.0):  # version 1, fair; version 2, the trained model: better
        local.models.register("digits", perturbed(onnx_model, tmp_path / f"noise-{noise}", noise))
    stack = AirflowStack(tmp_path / "home", database, broker, {
        "MLRUNWAY_WORKSPACE": str(workspace), "MLRUNWAY_DATA_DIR": str(digits), "MLRUNWAY_SCHEDULE": "none",
        "MLRUNWAY_ENDPOINT_NAME": ENDPOINT, "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "0",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5"})
    conf = {"model_name": "digits", "data_dir": str(digits), "rollout": {"steps": [50, 100], "window_s": 6}}
    caught = None
    try:
        stack.up(workers=1)
        wait_parsed(database, DEPLOY_DAG)
        stack.cli("dags", "trigger", DEPLOY_DAG, "--run-id", "create", "--conf", json.dumps({**conf, "model_version": 1}))
        wait_until("version 1 created", lambda: run_states(database, DEPLOY_DAG).get("create") == "success", 600)
        with steady_load(local, limit_s=900):  # every window of the rollout has live evidence, as production's has
            stack.cli("dags", "trigger", DEPLOY_DAG, "--run-id", "promote", "--conf",
                      json.dumps({**conf, "model_version": 2}))
            deadline = time.monotonic() + 600
            while caught is None and time.monotonic() < deadline:  # the task running, the challenger taking traffic
                traffic = local.endpoints.get(ENDPOINT).traffic
                if deploy_state(database, "promote") == "running" and len([t for t in traffic.values() if t]) == 2:
                    caught = dict(traffic)
                    kill_worker(stack, "worker-a")
                assert run_states(database, DEPLOY_DAG).get("promote") != "success", "the rollout ended uncaught"
                time.sleep(0.1)
            assert caught, "the task was never caught running mid-rollout"
            assert local.models.alias("digits", "production").version == 1  # no decision yet: production unchanged
            stack.start("worker-b", "celery", "worker", "--celery-hostname", "worker-b@%h", env={
                "MLRUNWAY_TEST_WORKER": "worker-b", "AIRFLOW__CORE__HOSTNAME_CALLABLE": "worker_hostname.name"})
            wait_until("the killed try failed and its run ended",
                       lambda: run_states(database, DEPLOY_DAG).get("promote") in ("success", "failed"), 600)
            failed_run = run_states(database, DEPLOY_DAG)["promote"]
            after_failure = (local.models.alias("digits", "production").version, local.endpoints.get(ENDPOINT).traffic)
            stack.post(f"/api/v2/dags/{DEPLOY_DAG}/clearTaskInstances", {
                "dry_run": False, "dag_run_id": "promote", "task_ids": ["deploy_blue"], "only_failed": False,
                "include_downstream": True, "reset_dag_runs": True})
            wait_until("the cleared run ended", lambda: run_states(database, DEPLOY_DAG).get("promote") in (
                "success", "failed") and deploy_state(database, "promote") in ("success", "failed"), 600)
            final_run = run_states(database, DEPLOY_DAG)["promote"]
    finally:
        stack.down()
    try:
        assert failed_run == "failed" and after_failure[0] == 1, after_failure  # the killed try changed nothing
        assert final_run == "success"
        assert local.models.alias("digits", "production").version == 2
        info = local.endpoints.get(ENDPOINT)
        serving = [name for name, share in info.traffic.items() if share]
        assert len(serving) == 1 and info.traffic[serving[0]] == 100, info.traffic
        deployments = local.endpoints.list_deployments(ENDPOINT)
        assert [d.name for d in deployments] == serving and deployments[0].model == "digits:2"  # the loser deleted
        assert local.endpoints.lease(ENDPOINT, "a later run", 60) is None  # the lease was given back
    finally:
        local.endpoints.delete(ENDPOINT)
    assert local.endpoints.list() == [] and local.leftovers() == []
