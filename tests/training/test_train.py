"""training/train.py as a local job: metrics once per epoch, a model that loads without the training code, DDP."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlrunway.backend.types import JobStatus
from mlrunway.local import tracking
from mlrunway.specs import CommandJobSpec, Input, PyTorchDistribution
from tests.conftest import REPO

pytestmark = pytest.mark.slow

COMMAND = ("python train.py --data-dir ${{inputs.data}} --num-epochs ${{inputs.epochs}} "
           "--learning-rate ${{inputs.learning_rate}} --momentum ${{inputs.momentum}}")


def train_spec(digits, epochs=3, **kwargs) -> CommandJobSpec:
    return CommandJobSpec(code=str(REPO / "training"), command=COMMAND, experiment_name="train-test",
                          inputs={"data": Input(path=str(digits)), "epochs": epochs, "learning_rate": 0.05, "momentum": 0.9},
                          **kwargs)


LOAD_ALONE = """
import json, sys, torch
program = torch.export.load(sys.argv[1] + "/model.pt2")
sig = json.load(open(sys.argv[1] + "/signature.json"))
for batch in (1, 5):
    out = program.module()(torch.zeros(batch, *sig["inputs"][0]["shape"][1:]))
    assert tuple(out.shape) == (batch, len(sig["classes"])), out.shape
print("ok", sig["best_val_acc"])
"""


def assert_model_loads_alone(model_dir: Path) -> dict:
    # A fresh interpreter in another folder: nothing of train.py is importable there.
    out = subprocess.run([sys.executable, "-c", LOAD_ALONE, str(model_dir)], cwd="/", capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("ok"), (out.stdout, out.stderr, sorted(model_dir.parent.rglob("*")))
    return json.loads((model_dir / "signature.json").read_text())


def test_train_logs_the_primary_metric_once_per_epoch_and_saves_a_standalone_model(jobs, digits):
    jobs.submit("train", train_spec(digits, epochs=3))
    info = jobs.wait("train", poll_s=0.5)
    assert info.status is JobStatus.COMPLETED, info.error
    best = tracking.metric_history(jobs.workspace, info.mlflow_run_id, "best_val_acc")
    assert len(best) == 3 and best == sorted(best)
    assert len(tracking.metric_history(jobs.workspace, info.mlflow_run_id, "val_acc")) == 3
    signature = assert_model_loads_alone(Path(info.outputs) / "model")
    assert signature["classes"] == [str(i) for i in range(10)]
    assert signature["inputs"][0] == {"name": "input", "shape": [None, 1, 8, 8], "dtype": "float32"}
    assert signature["best_val_acc"] == pytest.approx(best[-1])
    assert best[-1] > 0.5  # 3 epochs on digits learn something real


def test_train_under_two_process_ddp_logs_once_and_rank_zero_saves(jobs, digits):
    jobs.submit("ddp", train_spec(digits, epochs=2, distribution=PyTorchDistribution(process_count_per_instance=2)))
    info = jobs.wait("ddp", poll_s=0.5)
    assert info.status is JobStatus.COMPLETED, info.error
    store = tracking.client(jobs.workspace)
    assert len(tracking.metric_history(jobs.workspace, info.mlflow_run_id, "best_val_acc")) == 2
    assert store.get_run(info.mlflow_run_id).data.params["world_size"] == "2"
    assert_model_loads_alone(Path(info.outputs) / "model")


@pytest.mark.parametrize("processes", [1, 2], ids=["single", "ddp"])
def test_canceled_training_stops_between_batches_and_saves_its_best_model(jobs, digits, processes):
    dist = PyTorchDistribution(process_count_per_instance=processes) if processes > 1 else None
    # The product's grace (10 s), not the fixture's short one: torch.export of the best model takes seconds on a
    # loaded two-core machine, and a SIGKILL inside it is what this test must not confuse with a lost model.
    jobs.kill_grace_s = 10.0
    jobs.submit("stopped", train_spec(digits, epochs=500, distribution=dist))
    deadline = time.monotonic() + 90
    while True:
        run_id = jobs.get("stopped").mlflow_run_id
        if run_id and len(tracking.metric_history(jobs.workspace, run_id, "best_val_acc")) >= 2:
            break
        assert time.monotonic() < deadline
        time.sleep(0.3)
    info = jobs.cancel("stopped", reason="early termination at interval 2")
    assert info.status is JobStatus.CANCELED
    assert any(line.startswith("SIGTERM: stopping in epoch") for line in jobs.logs("stopped"))  # not SIGKILLed
    assert_model_loads_alone(Path(info.outputs) / "model")
