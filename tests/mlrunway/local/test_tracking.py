from __future__ import annotations

import subprocess
import sys

import pytest

from mlrunway.local import tracking
from mlrunway.local.workspace import Workspace

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
    assert tracking.metric_histories(workspace, [*runs, "no-such-run"], "m") == {
        **{run: [float(i) for i in range(40)] for run in runs}, "no-such-run": []}
    for run in runs:
        assert tracking.metric_history(workspace, run, "m") == [float(i) for i in range(40)]
        assert [m.value for m in store.get_metric_history(run, "m")] == [float(i) for i in range(40)]


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


def test_a_run_created_without_mlflow_reads_back_as_mlflows_own(workspace):
    """Controllers and supervisors create runs with plain SQL: MLflow's client reads them as the runs it creates
    itself (the pinned version's schema), finds them among the parent's children, and logs to and ends them."""
    store = tracking.client(workspace)
    experiment, parent = tracking.start_run(workspace, "parent", "created", None)
    mlflows = store.create_experiment("by-mlflow", artifact_location=(workspace.root / "artifacts").as_uri())
    a, b = store.get_experiment(experiment), store.get_experiment(mlflows)
    same = ("artifact_location", "lifecycle_stage", "tags")
    assert a.name == "created" and {k: getattr(a, k) for k in same} == {k: getattr(b, k) for k in same}
    assert abs(a.creation_time - b.creation_time) < 60_000 and a.last_update_time == a.creation_time
    assert store.get_experiment_by_name("created").experiment_id == experiment == str(int(mlflows) - 1)
    _, ours = tracking.start_run(workspace, "ours", "created", parent)
    tags = {"mlflow.runName": "theirs", "mlrunway.job": "theirs", "mlflow.parentRunId": parent}
    theirs = store.create_run(store.get_experiment_by_name("created").experiment_id, tags=tags, run_name="theirs").info.run_id
    a, b = store.get_run(ours), store.get_run(theirs)
    assert a.info.run_id == ours and a.info.run_name == "ours"
    same = ("experiment_id", "user_id", "status", "end_time", "lifecycle_stage")
    assert {k: getattr(a.info, k) for k in same} == {k: getattr(b.info, k) for k in same}
    assert abs(a.info.start_time - b.info.start_time) < 60_000
    assert a.info.artifact_uri == b.info.artifact_uri.replace(theirs, ours)
    assert {**a.data.tags, "mlflow.runName": "theirs", "mlrunway.job": "theirs"} == b.data.tags
    children = store.search_runs([a.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    assert {r.info.run_id for r in children} == {ours, theirs}
    for step, value in enumerate([0.5, float("nan"), 0.25]):
        store.log_metric(ours, "m", value, step=step)
    assert tracking.metric_history(workspace, ours, "m")[::2] == [0.5, 0.25]
    assert str(tracking.metric_history(workspace, ours, "m")) == str([m.value for m in store.get_metric_history(ours, "m")])
    store.log_metric(ours, "other", 3.0, step=7)
    assert tracking.latest_metrics(workspace, ours) == store.get_run(ours).data.metrics == {"m": 0.25, "other": 3.0}
    store.set_terminated(ours, "FINISHED")
    assert store.get_run(ours).info.status == "FINISHED"


def test_a_deleted_experiment_is_refused_as_mlflow_refuses_it(workspace):
    store = tracking.client(workspace)
    experiment, _ = tracking.start_run(workspace, "first", "gone", None)
    store.delete_experiment(experiment)
    with pytest.raises(Exception, match="deleted"):
        tracking.start_run(workspace, "second", "gone", None)


def test_a_store_at_another_revision_is_written_through_mlflow(workspace, monkeypatch):
    tracking.client(workspace)
    monkeypatch.setattr(tracking, "SCHEMA_REVISION", "not-this-one")
    _, run = tracking.start_run(workspace, "through-mlflow", "fallback", None)
    assert tracking.client(workspace).get_run(run).info.run_name == "through-mlflow"
    assert tracking.metric_history(workspace, run, "m") == [] and tracking.latest_metrics(workspace, run) == {}


def test_the_pinned_mlflow_migrates_a_store_to_the_revision_the_sql_was_checked_against(workspace):
    import sqlite3

    tracking.client(workspace)
    with sqlite3.connect(workspace.root / "mlflow.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (tracking.SCHEMA_REVISION,)


def test_artifacts_kept_without_mlflow_read_back_as_mlflows_own(workspace, tmp_path):
    store = tracking.client(workspace)
    _, ours = tracking.start_run(workspace, "ours", "artifacts", None)
    _, theirs = tracking.start_run(workspace, "theirs", "artifacts", None)
    folder = tmp_path / "report"
    (folder / "sub").mkdir(parents=True)
    (folder / "report.html").write_text("<html></html>")
    (folder / "sub" / "curves.png").write_bytes(b"\x89PNG")
    tracking.log_artifacts(workspace, ours, folder, "report")
    store.log_artifacts(theirs, str(folder), "report")

    def listed(run: str, path: str = "report") -> list[tuple[str, bool, int | None]]:
        found = []
        for item in store.list_artifacts(run, path):
            found.append((item.path, item.is_dir, item.file_size))
            if item.is_dir:
                found += listed(run, item.path)
        return found

    assert listed(ours) == listed(theirs) and len(listed(ours)) == 3
    local = store.download_artifacts(ours, "report/sub/curves.png", str(tmp_path))
    assert open(local, "rb").read() == b"\x89PNG"


def test_a_new_workspaces_first_run_copies_the_empty_store_without_importing_mlflow(workspace, tmp_path):
    tracking.client(Workspace.at(tmp_path / "other"))  # the machine's empty store exists once any store was made
    probe = ("import sys; from mlrunway.local import tracking; from mlrunway.local.workspace import Workspace; "
             f"print(tracking.start_run(Workspace.at({str(workspace.root)!r}), 'job', 'exp', None)[1], "
             "'mlflow' in sys.modules)")
    run_id, imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                      check=True).stdout.split()
    assert imported == "False" and (workspace.root / "mlflow.db").exists()
    assert tracking.client(workspace).get_run(run_id).info.run_name == "job"  # MLflow reads it as its own


def test_a_copied_stores_default_experiment_keeps_its_artifacts_in_the_workspace(workspace):
    store = tracking.client(workspace)
    assert store.get_experiment("0").artifact_location == (workspace.root / "artifacts").as_uri()
