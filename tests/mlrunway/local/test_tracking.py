from __future__ import annotations

import subprocess
import sys

import pytest

from mlrunway.local import tracking

pytestmark = pytest.mark.slow

WRITER = """
import os, sys, mlflow
for step in range(int(sys.argv[1])):
    mlflow.log_metric("m", step, step=step)
"""


def test_concurrent_writers_lose_no_metric(workspace):
    runs = [tracking.start_run(workspace, f"w{i}", "concurrency", None)[1] for i in range(6)]
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, "40"],
                         env={"MLFLOW_TRACKING_URI": workspace.tracking_uri, "MLFLOW_RUN_ID": run, "PATH": "/usr/bin:/bin"})
        for run in runs
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    store = tracking.client(workspace)
    for run in runs:
        assert tracking.metric_history(store, run, "m") == [float(i) for i in range(40)]
