"""Failure injection, one stage at a time: whatever fails, cleanup runs, the run fails, and nothing of the run
is left (no endpoint, deployment, server process, listening port or running job).

Each failure comes from the code a user would ship (a training script that crashes, a model that drifts from
its ONNX export, a scoring script that cannot start or answers nonsense), not from patching mlrunway.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from mlrunway.backend.types import JobStatus
from mlrunway.local.backend import LocalBackend
from tests.conftest import REPO
from tests.e2e.test_dag_local import assert_nothing_left, run_dag
from tests.tutorial import OBJECTIVE, SPACE, bandit, tutorial_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TINY = {"epochs": 3, "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1}

# A model whose output gets noise that ONNX Runtime draws differently from PyTorch: the parity gate must catch it.
NOISY_TRAIN = '''
import json, runpy, sys
from pathlib import Path
import torch

sys.argv[0] = "real_train.py"
runpy.run_path("real_train.py", run_name="__main__")
out = Path(sys.argv[sys.argv.index("--output-dir") + 1] if "--output-dir" in sys.argv else "outputs") / "model"
inner = torch.export.load(out / "model.pt2").module()

class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        y = self.inner(x)
        return y + torch.rand_like(y) * 10

example = torch.zeros([2, *json.loads((out / "signature.json").read_text())["inputs"][0]["shape"][1:]])
batch = torch.export.Dim("batch", min=1, max=4096)
torch.export.save(torch.export.export(Noisy(), (example,), dynamic_shapes=({0: batch},)), out / "model.pt2")
'''


def code_with(tmp_path: Path, **files: str) -> str:
    """training/ copied, with some files replaced (``real_train`` keeps the original train.py beside)."""
    code = tmp_path / "code"
    shutil.copytree(REPO / "training", code, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(code / "train.py", code / "real_train.py")
    for name, body in files.items():
        (code / f"{name}.py").write_text(body)
    return str(code)


def score_with(init: str = "", run: str | None = None) -> str:
    """training/score.py with a line added at the top of init(), or run() replaced."""
    text = (REPO / "training" / "score.py").read_text()
    if init:
        text = text.replace("def init() -> None:\n", f"def init() -> None:\n    {init}\n", 1)
    if run:
        text += f"\n\ndef run(raw_data):\n    return {run}\n"
    return text


CASES = {
    "training": ({"train": "import sys\nsys.exit('injected: the training script crashed')\n"},
                 {"train": "failed", "sweep": "upstream_failed", "pick_best": "upstream_failed",
                  "export_onnx": "upstream_failed", "deploy_blue": "upstream_failed", "cleanup": "failed"}),
    "parity": ({"train": NOISY_TRAIN},
               {"train": "success", "sweep": "success", "pick_best": "success", "export_onnx": "failed",
                "deploy_blue": "upstream_failed", "cleanup": "failed"}),
    "deployment": ({"score": score_with(init="raise RuntimeError('injected: the model store is unreachable')")},
                   {"train": "success", "sweep": "success", "pick_best": "success", "export_onnx": "success",
                    "deploy_blue": "failed", "cleanup": "failed"}),
    "smoke-test": ({"score": score_with(run="{'predictions': [{'label': 'not-a-class', 'probabilities': [1.0]}]}")},
                   {"train": "success", "sweep": "success", "pick_best": "success", "export_onnx": "success",
                    "deploy_blue": "failed", "cleanup": "failed"}),
}


def listening(tmp_path: Path) -> set[int]:
    """The ports listening in this test's processes: its own, its children's, and any process whose command line
    names its folder (a daemonized endpoint server). Other tests may run beside it (pytest-xdist): their ports are
    theirs."""
    me = psutil.Process()
    ours = {me.pid, *(child.pid for child in me.children(recursive=True))}
    found = set()
    for conn in psutil.net_connections("tcp"):
        if conn.status != psutil.CONN_LISTEN or conn.pid is None:
            continue
        try:
            if conn.pid in ours or str(tmp_path) in " ".join(psutil.Process(conn.pid).cmdline()):
                found.add(conn.laddr.port)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("stage", list(CASES))
def test_a_failure_at_each_stage_is_cleaned_up(stage, airflow_db, small_digits, tmp_path, monkeypatch):
    files, expected = CASES[stage]
    before = listening(tmp_path)
    run, _, states = run_dag({**TINY, "data_dir": str(small_digits), "code_dir": code_with(tmp_path, **files)},
                             tmp_path / "ws", monkeypatch)
    backend = LocalBackend.at(tmp_path / "ws")
    assert str(run.state) == "failed"
    assert states == expected, {j.name: j.error for j in backend.jobs.list() if j.error}
    assert_nothing_left(backend)
    assert all(j.status.is_terminal() for j in backend.jobs.list())
    after = listening(tmp_path)
    assert after <= before, f"ports left listening: {sorted(after - before)}"
    if stage == "parity":  # the ONNX model was never registered
        assert not [m for m in backend.models.list() if m.name.endswith("-onnx")]


def test_killing_the_sweep_task_cancels_the_sweep_and_its_trials(small_digits, tmp_path, monkeypatch):
    from mlrunway.operators import SweepOperator

    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    op = SweepOperator(task_id="sweep", trial=tutorial_job(str(small_digits), epochs=200), search_space=SPACE,
                       objective=OBJECTIVE, early_termination=bandit(),
                       limits={"max_total_trials": 2, "max_concurrent_trials": 2})
    context = {"dag": SimpleNamespace(dag_id="kill"), "run_id": "manual__kill", "ti": SimpleNamespace(
        xcom_push=lambda **_: None)}
    name = op.submit_job(context)
    backend = LocalBackend.at(tmp_path / "ws")
    deadline = time.monotonic() + 60
    while len(backend.jobs.sweep_result(name).trials) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)  # both trials started
    op.on_kill()
    assert backend.jobs.get(name).status is JobStatus.CANCELED
    assert all(j.status.is_terminal() for j in backend.jobs.list())
    assert_nothing_left(backend)
