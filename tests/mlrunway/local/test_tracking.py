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


@pytest.mark.parametrize(("job_status", "mlflow_status"), [("Completed", "FINISHED"), ("Failed", "FAILED"),
                                                           ("Canceled", "KILLED")])
def test_ending_a_run_without_mlflow_reads_back_as_mlflows_own_end(workspace, job_status, mlflow_status):
    """The supervisor ends a job's run with one UPDATE (no MLflow import at the end of every trial); MLflow's
    client, the pinned version's schema, reads it as set_terminated would leave it."""
    store = tracking.client(workspace)
    _, ours = tracking.start_run(workspace, "ours", "ending", None)
    _, theirs = tracking.start_run(workspace, "theirs", "ending", None)
    tracking.end_run_quickly(workspace, ours, job_status)
    tracking.end_run(workspace, theirs, job_status)
    a, b = store.get_run(ours).info, store.get_run(theirs).info
    assert a.status == b.status == mlflow_status and a.end_time and abs(a.end_time - b.end_time) < 60_000
    assert store.search_runs([a.experiment_id], f"attributes.status = '{mlflow_status}'", max_results=5)
    with pytest.raises(LookupError, match="is not in"):
        tracking.end_run_quickly(workspace, "0" * 32, job_status)
