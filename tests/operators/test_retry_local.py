"""Retry semantics over real local jobs: the first attempt of a training job fails on purpose, and the task's
retry (the same operator executed again, as Airflow's retry does) submits attempt 2, which succeeds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlrunway.backend.naming import RunNames
from mlrunway.backend.types import JobStatus
from mlrunway.errors import JobFailed
from mlrunway.local.backend import LocalBackend
from mlrunway.operators import TrainModelOperator
from tests.conftest import write_script

pytestmark = pytest.mark.slow

FLAKY_TRAIN = """
import argparse, pathlib, sys
parser = argparse.ArgumentParser()
parser.add_argument("--data-dir")
args = parser.parse_args()
marker = pathlib.Path(args.data_dir) / "first-attempt-ran"
if not marker.exists():
    marker.write_text("x")
    sys.exit("the node was preempted")  # the first attempt fails, as a transient fault would
model = pathlib.Path("outputs/model")
model.mkdir(parents=True)
(model / "model.pt2").write_text("weights")
(model / "signature.json").write_text('{"file": "model.pt2", "inputs": [{"name": "x", "shape": [null, 4]}]}')
print("trained")
"""


class TaskInstance:
    stats_tags: dict[str, str] = {}

    def xcom_push(self, key: str, value: str) -> None:
        pass


class StateStore(dict):
    def set(self, key: str, value: str) -> None:
        self[key] = value


def test_a_failed_first_attempt_is_followed_by_a_second_that_succeeds(tmp_path, monkeypatch):
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    code = write_script(tmp_path / "code", FLAKY_TRAIN, "train.py")
    (tmp_path / "data").mkdir()
    store = StateStore()  # Airflow's task state store, kept across the task's tries
    context = {"dag": SimpleNamespace(dag_id="retry_dag"), "run_id": "manual__1", "ti": TaskInstance(),
               "task_state_store": store}
    name = RunNames.of("retry_dag", "manual__1", "retry").train_job

    def task() -> TrainModelOperator:
        job = {"command": "python train.py --data-dir ${{inputs.data}}", "code": str(code),
               "inputs": {"data": {"type": "uri_folder", "path": str(tmp_path / "data")}}}
        return TrainModelOperator(task_id="train", name_prefix="retry", job=job, deferrable=False,
                                  poll_interval_s=0.2, retries=1)

    with pytest.raises(JobFailed, match="the node was preempted"):
        task().execute(context)  # try 1
    retry = task()
    result = retry.execute(context)  # try 2: Airflow runs the task again
    assert result["job_name"] == f"{name}-a2" and result["status"] == "Completed"
    assert retry.attempt.describe().startswith(f"{name} ended Failed (exit code 1")
    jobs = LocalBackend.at(tmp_path / "ws").jobs
    assert [(j.name, j.status) for j in jobs.list(name)] == [(name, JobStatus.FAILED), (f"{name}-a2", JobStatus.COMPLETED)]
    assert store == {"mlrunway_job_name": f"{name}-a2"}
    assert task().execute(context)["job_name"] == f"{name}-a2"  # a third try finds the completed attempt
