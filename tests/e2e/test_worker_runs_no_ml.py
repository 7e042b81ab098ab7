"""The Airflow side runs no ML (issue 64, 4): the demo DAG, run whole in a fresh process as ``airflow dags test``
runs it (every task in that one process), imports no torch, onnx, onnxscript, onnxruntime nor the team's code
(train.py, score.py), and downloads no model: training, the sweep, export and its parity gate, the smoke test's
reference answer and serving are the backend's jobs and processes. The suite's own process has imported torch (its
fixtures train a model), so the DAG runs in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ML = ("torch", "onnx", "onnxscript", "onnxruntime", "train", "score")
PROBE = """
import json, sys
sys.path.insert(0, {dags!r})
from mlrunway.local.registry import LocalModels

downloads = []
_download = LocalModels.download


def download(self, name, version, dest):  # recorded, then done as ever
    downloads.append(f"{{name}}:{{version}}")
    return _download(self, name, version, dest)


LocalModels.download = download
from train_sweep_deploy import dag

run = dag.test(run_conf=json.loads(sys.argv[1]))
ml = sorted({{m.split(".")[0] for m in sys.modules}} & set({ml!r}))
print(json.dumps({{"state": str(run.state), "ml": ml, "downloads": downloads}}))
"""


def test_the_demo_dag_imports_no_ml_package_nor_the_teams_code_and_downloads_no_model(airflow_db, small_digits,
                                                                                        tmp_path):
    conf = {"epochs": 2, "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1,
            "data_dir": str(small_digits)}
    env = {**os.environ, "MLRUNWAY_WORKSPACE": str(tmp_path / "ws"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", PROBE.format(dags=str(REPO / "dags"), ml=ML), json.dumps(conf)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["state"] == "success", done.stderr[-3000:]
    assert found["ml"] == [], f"the Airflow side imported {found['ml']}"
    assert found["downloads"] == [], f"the Airflow side downloaded {found['downloads']}"
