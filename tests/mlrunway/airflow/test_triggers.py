"""JobTrigger and DeploymentTrigger: serializable; they wait on real local jobs and deployments in an event loop,
stop them at their deadline, and a user's kill cancels the job."""

from __future__ import annotations

import asyncio
import importlib
import time

import pytest

from mlrunway.backend.types import EndpointSettings, JobStatus
from mlrunway.local.backend import LocalBackend
from mlrunway.specs import CommandJobSpec
from tests.conftest import deployment, write_script


def first_event(trigger):
    async def run():
        async for event in trigger.run():
            return event.payload
    return asyncio.run(asyncio.wait_for(run(), timeout=120))


def start_job(tmp_path, monkeypatch, name: str, script: str) -> LocalBackend:
    """A job of the default connection's local workspace, running ``script``."""
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    backend = LocalBackend.at(tmp_path / "ws")
    backend.jobs.submit(name, CommandJobSpec(code=str(write_script(tmp_path / name, script)), command="python script.py"))
    return backend


def test_trigger_serializes_to_a_class_path_and_plain_values():
    from mlrunway.airflow.triggers import JobTrigger

    trigger = JobTrigger("mlrunway_default", "run-train", poll_interval_s=3.0, deadline=1_900_000_000.0)
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert kwargs == {"backend_conn_id": "mlrunway_default", "job_name": "run-train", "poll_interval_s": 3.0,
                      "deadline": 1_900_000_000.0}


@pytest.mark.slow
def test_trigger_fires_when_the_job_ends_and_carries_its_error(tmp_path, monkeypatch):
    from mlrunway.airflow.triggers import JobTrigger

    start_job(tmp_path, monkeypatch, "j-fail", "import sys, time\ntime.sleep(1)\nsys.exit('disk full')\n")
    event = first_event(JobTrigger("mlrunway_default", "j-fail", poll_interval_s=0.2))
    assert event["job_name"] == "j-fail" and event["status"] == "Failed"
    assert "disk full" in event["error"]


@pytest.mark.slow
def test_trigger_cancels_the_job_at_its_deadline(tmp_path, monkeypatch):
    from mlrunway.airflow.triggers import JobTrigger

    backend = start_job(tmp_path, monkeypatch, "j-slow", "import time\ntime.sleep(300)\n")
    event = first_event(JobTrigger("mlrunway_default", "j-slow", poll_interval_s=0.2, deadline=time.time() + 2))
    assert event["outcome"] == "timeout" and "canceled" in event["error"]
    assert backend.jobs.get("j-slow").status is JobStatus.CANCELED


def test_deployment_trigger_serializes_to_a_class_path_and_plain_values():
    from mlrunway.airflow.triggers import DeploymentTrigger

    operation = "https://management.azure.com/subscriptions/s/providers/Microsoft.MachineLearningServices/" \
                "locations/westeurope/mfeOperationsStatus/od:1?api-version=2024-04-01"
    trigger = DeploymentTrigger("aml", "digits-1a2b3c4d", "blue", poll_interval_s=5.0, deadline=1_900_000_000.0,
                                operation=operation)
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    assert getattr(importlib.import_module(module), name)(**kwargs).serialize() == (path, kwargs)
    assert kwargs == {"backend_conn_id": "aml", "endpoint": "digits-1a2b3c4d", "deployment": "blue",
                      "poll_interval_s": 5.0, "deadline": 1_900_000_000.0, "operation": operation}


@pytest.mark.slow
def test_job_trigger_on_kill_cancels_the_job(tmp_path, monkeypatch):
    """What the triggerer runs when a user marks the deferred task failed or clears it."""
    from mlrunway.airflow.triggers import JobTrigger

    backend = start_job(tmp_path, monkeypatch, "j-killed", "import time\ntime.sleep(300)\n")
    asyncio.run(JobTrigger("mlrunway_default", "j-killed").on_kill())
    info = backend.jobs.get("j-killed")
    assert info.status is JobStatus.CANCELED and "killed while deferred" in info.error


@pytest.mark.slow
@pytest.mark.parametrize("tag", ["good", "broken"])
def test_deployment_trigger_fires_when_provisioning_ends_and_carries_the_failure(tmp_path, monkeypatch, tag):
    from mlrunway.airflow.triggers import DeploymentTrigger
    from tests.mlrunway.local.serving.test_provision import GATED_SCORE

    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    endpoints = LocalBackend.at(tmp_path / "ws").endpoints
    endpoints.create_or_update("trig-ep", EndpointSettings(workers=1))
    (tmp_path / "model").mkdir()
    (tmp_path / "gate").touch()
    try:
        endpoints.begin_create_or_update_deployment("trig-ep", "blue", deployment(
            endpoints.workspace, tmp_path / "model", write_script(tmp_path / "code", GATED_SCORE, "score.py"),
            environment_variables={"TAG": tag, "GATE": str(tmp_path / "gate")}))
        event = first_event(DeploymentTrigger("mlrunway_default", "trig-ep", "blue", poll_interval_s=0.1))
    finally:
        endpoints.delete("trig-ep")
    assert (event["endpoint"], event["deployment"]) == ("trig-ep", "blue")
    if tag == "good":
        assert event["status"] == "Succeeded" and event["error"] is None
    else:
        assert event["status"] == "Failed" and "weights do not match the graph" in event["error"]


@pytest.mark.slow
def test_deployment_trigger_deletes_the_deployment_at_its_deadline(tmp_path, monkeypatch):
    from mlrunway.airflow.triggers import DeploymentTrigger
    from tests.mlrunway.local.serving.test_provision import GATED_SCORE

    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    endpoints = LocalBackend.at(tmp_path / "ws").endpoints
    endpoints.create_or_update("late-ep", EndpointSettings(workers=1))
    (tmp_path / "model").mkdir()
    try:
        endpoints.begin_create_or_update_deployment(  # the gate never opens: provisioning outlives the deadline
            "late-ep", "blue", deployment(
                endpoints.workspace, tmp_path / "model", write_script(tmp_path / "code", GATED_SCORE, "score.py"),
                environment_variables={"TAG": "v1", "GATE": str(tmp_path / "gate")}))
        event = first_event(DeploymentTrigger("mlrunway_default", "late-ep", "blue", poll_interval_s=0.1,
                                              deadline=time.time() + 1))
        assert event["outcome"] == "timeout" and event["error"] == "still Creating at the deadline; it was deleted"
        assert "blue" not in endpoints.state("late-ep").deployments
        assert not (tmp_path / "ws" / "endpoints" / "late-ep" / "deployments" / "blue").exists()
    finally:
        endpoints.delete("late-ep")


@pytest.mark.slow
def test_a_deferred_trains_trigger_copies_the_jobs_new_log_lines_at_most_a_thousand_a_poll(tmp_path, monkeypatch):
    from mlrunway.airflow.triggers import JobTrigger, LogCopy

    script = "import time\nfor i in range(1500):\n    print(f'epoch {i}')\ntime.sleep(1.5)\nprint('done')\n"
    start_job(tmp_path, monkeypatch, "j-logs", script)
    trigger = JobTrigger("mlrunway_default", "j-logs", poll_interval_s=0.5, follow_logs=True)
    path, kwargs = trigger.serialize()
    assert kwargs["follow_logs"] is True and getattr(importlib.import_module(path.rpartition(".")[0]),
                                                     path.rpartition(".")[2])(**kwargs).follow_logs
    said: list[str] = []

    class TaskLog:  # what the triggerer writes into the deferred task's log
        def info(self, message: str, *args: object) -> None:
            said.append(message % args)

        warning = info

    assert trigger.logs is not None
    trigger.logs.log = TaskLog()
    event = first_event(trigger)
    assert event["status"] == "Completed"
    copied = [line for line in said if line.startswith("[j-logs] ")]
    assert copied[0] == "[j-logs] epoch 0" and copied[-1] == "[j-logs] done"
    skipped = [line for line in copied if "more lines skipped" in line]
    assert skipped == [f"[j-logs] ... {1500 - LogCopy.MAX_LINES} more lines skipped here (the job's own log has them)"]
    assert len(copied) == LogCopy.MAX_LINES + 2  # the first poll's thousand, the skip, then "done" once
