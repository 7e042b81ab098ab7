"""JobTrigger: serializable, waits on a real local job in an event loop, cancels it at its deadline."""

from __future__ import annotations

import asyncio
import importlib
import time

import pytest

from mlrunway.backend.types import JobStatus
from mlrunway.local.backend import LocalBackend
from mlrunway.specs import CommandJobSpec
from tests.conftest import write_script


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
    assert event["status"] == "timeout" and "canceled" in event["error"]
    assert backend.jobs.get("j-slow").status is JobStatus.CANCELED
