"""PruneWorkspaceOperator through an Airflow connection: the connection's retention policy, a dry run that removes
nothing, a run that removes, and a backend that keeps its own workspace refused by name."""

from __future__ import annotations

import json
import shutil
import time
from types import SimpleNamespace

import pytest

from mlrunway.errors import NotSupportedOnBackend
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


def test_a_backend_that_keeps_its_own_workspace_is_named(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_FAKE", json.dumps({"conn_type": "mlrunway_fake", "extra": {"name": "prune"}}))
    with pytest.raises(NotSupportedOnBackend, match="pruning: the fake backend keeps its workspace by its own"):
        PruneWorkspaceOperator(task_id="prune", backend_conn_id="fake").execute(CONTEXT)
