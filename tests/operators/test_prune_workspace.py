"""PruneWorkspaceOperator through an Airflow connection: the connection's retention policy, a dry run that removes
nothing, a run that removes, and, on a backend that keeps its own workspace, its reports folder only."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

from mlrunway.ledger.reports import ReportsFolder
from mlrunway.operators import PruneWorkspaceOperator
from tests.mlrunway.local.test_formats import FIXTURE

CONTEXT = {"dag": SimpleNamespace(dag_id="prune_workspace"), "run_id": "manual__1"}


def test_the_connections_policy_prunes_a_dry_run_first(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    shutil.copytree(FIXTURE, root)  # one run, one version: both the newest, so both stay
    old = root / "modelDataCollector" / "old-ep" / "blue" / "model_inputs" / time.strftime(
        "%Y/%m/%d/%H", time.gmtime(time.time() - 3 * 86400))
    old.mkdir(parents=True)
    (old / "1-1.jsonl").write_text('{"data": []}\n')
    monkeypatch.setenv("AIRFLOW_CONN_LOCALWS", json.dumps({"conn_type": "mlrunway_local", "extra": {
        "workspace": str(root), "retention": json.dumps({"keep_runs": 1, "keep_versions": 1, "capture_days": 2})}}))
    dry = PruneWorkspaceOperator(task_id="prune", backend_conn_id="localws", preview="True").execute(CONTEXT)
    assert dry["dry_run"] is True and dry["removed"] == 1 and dry["summary"].startswith("dry run: 1 capture;")
    assert (old / "1-1.jsonl").exists()
    done = PruneWorkspaceOperator(task_id="prune", backend_conn_id="localws").execute(CONTEXT)
    assert done == {"summary": done["summary"], "bytes": 13, "removed": 1, "dry_run": False}
    assert not (root / "modelDataCollector" / "old-ep").exists()  # the emptied folders go too
    assert sorted(p.name for p in (root / "jobs").iterdir()) == [
        "old-0123abcd-sweep", "old-0123abcd-sweep_trial_0", "old-0123abcd-sweep_trial_1", "old-0123abcd-train"]


def test_a_backend_that_keeps_its_own_workspace_has_its_reports_folder_pruned_only(monkeypatch):
    """Azure ML keeps its workspace by its own retention; the reports folder is mlrunway's, on every backend: each
    DAG's newest runs' reports stay (by run.json), an undated one goes by age, so do old monitoring pages."""
    monkeypatch.setenv("AIRFLOW_CONN_FAKE", json.dumps({"conn_type": "mlrunway_fake", "extra": {"name": "prune"}}))
    task = PruneWorkspaceOperator(task_id="prune", backend_conn_id="fake",
                                  retention={"keep_runs": 1, "keep_versions": 1, "capture_days": 2})
    folder = ReportsFolder(Path(task.backend.reports))
    now = time.time()
    for day, run in ((5, "digits-00000001-sweep"), (4, "digits-00000002-sweep"), (3, "other-00000003-sweep")):
        folder.mark_run(run, "train_sweep_deploy" if run.startswith("digits") else "other", f"manual__{day}",
                        now=now - day * 86400)
    undated = folder.sweep("digits-0000000f-sweep")
    undated.mkdir()
    os.utime(undated, (now - 3 * 86400, now - 3 * 86400))
    monitoring = folder.monitoring("digits-prod")
    monitoring.mkdir(parents=True)
    old_page = monitoring / time.strftime("%Y%m%dT%H%M%SZ.html", time.gmtime(now - 3 * 86400))
    for page in (old_page, monitoring / "latest.html"):
        page.write_text("<html></html>")
    folder.card("digits-onnx", 1).mkdir(parents=True)

    plan = task.execute(CONTEXT)
    assert plan["removed"] == 3 and plan["dry_run"] is False
    assert sorted(p.name for p in folder.root.iterdir() if p.name.endswith("-sweep")) == [
        "digits-00000002-sweep", "other-00000003-sweep"]  # each DAG's newest run
    assert not old_page.exists() and (monitoring / "latest.html").exists() and folder.card("digits-onnx", 1).is_dir()
