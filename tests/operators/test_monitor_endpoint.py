"""MonitorEndpointOperator over a local workspace whose endpoint collected rows: drift adds an event to the
endpoint's drift asset, a stable window adds none, a window without evidence fails the task after saving its
report, and a backend that cannot read captures back is refused naming what to use."""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlrunway.errors import MlrunwayError, SpecError
from mlrunway.local.serving.state import DeploymentState, EndpointState
from mlrunway.operators import MonitorEndpointOperator
from mlrunway.serving import capture
from tests.operators.test_operators_on_fake import TaskInstance
from tests.operators.test_stable_endpoint import Events

ENDPOINT = "watched-prod"


def features(rng: np.random.Generator, n: int, shift: float = 0.0) -> tuple[list[dict], list[dict]]:
    inputs = [{"correlationid": str(i), "mean": float(m), "std": float(s)}
              for i, (m, s) in enumerate(zip(rng.normal(shift, 1, n), rng.normal(0, 1, n), strict=True))]
    outputs = [{"correlationid": str(i), "label": str(label)} for i, label in enumerate(rng.choice(3, n))]
    return inputs, outputs


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """A local workspace with an endpoint whose blue deployment has all the traffic (no server needed to read
    what it collected) and a reference folder of rows."""
    root = tmp_path / "ws"
    monkeypatch.setenv("AIRFLOW_CONN_LOCALWS", json.dumps({"conn_type": "mlrunway_local",
                                                           "extra": {"workspace": str(root)}}))
    folder = root / "endpoints" / ENDPOINT
    EndpointState(name=ENDPOINT, keys={"primary": "k1", "secondary": "k2"}, traffic={"blue": 100}, deployments={
        "blue": DeploymentState(name="blue", version=1, model_dir="m", code_dir="c", scoring_script="score.py",
                                model="digits:1")}).save(folder)
    inputs, outputs = features(np.random.default_rng(0), 600)
    reference = tmp_path / "reference"
    reference.mkdir()
    for name, rows in (("model_inputs", inputs), ("model_outputs", outputs)):
        (reference / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def collect(root: Path, inputs: list[dict], outputs: list[dict]) -> None:
    """What blue's score.py would have handed the collector, written as its worker writes it."""
    writer = capture.Writer(tick_s=3600)
    found = capture.target(root / "endpoints" / ENDPOINT, "blue", "digits:1", {"collections": {
        "model_inputs": True, "model_outputs": True}}, 10 ** 8, logging.getLogger("t"))
    for collection, rows in (("model_inputs", inputs), ("model_outputs", outputs)):
        payload = SimpleNamespace(content=lambda rows=rows: json.dumps(rows), correlation_id=lambda: "c",
                                  designation=lambda c=collection: c, time=lambda: int(time.time()),
                                  type=lambda: "pandas.core.frame.DataFrame", agent=lambda: "azureml-ai-monitoring/1.0.0")
        writer.put(("sdk", found, time.time(), payload))
    writer.flush()


def monitor(tmp_path: Path, conn: str = "localws") -> tuple[MonitorEndpointOperator, dict, Events, TaskInstance]:
    events, ti = Events(), TaskInstance()
    context = {"dag": SimpleNamespace(dag_id="monitor_endpoint"), "run_id": "manual__1", "ti": ti,
               "outlet_events": defaultdict(lambda: events)}
    task = MonitorEndpointOperator(task_id="check_drift", backend_conn_id=conn, endpoint_name=ENDPOINT,
                                   reference=str(tmp_path / "reference"), window_s=600)
    return task, context, events, ti


def test_drift_adds_an_event_to_the_endpoints_drift_asset_and_links_the_report(workspace, tmp_path):
    collect(workspace, *features(np.random.default_rng(1), 300, shift=1.0))
    task, context, events, ti = monitor(tmp_path)
    result = task.execute(context)
    assert result["status"] == "drifted" and "mean" in result["summary"]
    assert [(uri, extra["features"]) for uri, extra in events.added] == [
        (f"mlrunway://endpoints/{ENDPOINT}/drift", ["mean"])]
    assert ti.pushed["monitor_url"] == f"/mlrunway/monitor/localws/{ENDPOINT}"
    saved = json.loads((workspace / "reports" / "monitor" / ENDPOINT / "latest.json").read_text())
    assert saved["status"] == "drifted" and Path(result["page"]).is_file()


def test_a_stable_window_adds_no_event(workspace, tmp_path):
    collect(workspace, *features(np.random.default_rng(2), 300))
    task, context, events, _ = monitor(tmp_path)
    assert task.execute(context)["status"] == "stable" and events.added == []


def test_a_window_without_evidence_fails_after_saving_its_report(workspace, tmp_path):
    collect(workspace, *features(np.random.default_rng(3), 20))
    task, context, events, _ = monitor(tmp_path)
    with pytest.raises(MlrunwayError, match="NO EVIDENCE: .*20 production and 600 reference rows"):
        task.execute(context)
    assert events.added == []
    assert json.loads((workspace / "reports" / "monitor" / ENDPOINT / "latest.json").read_text())["status"] == \
        "no evidence"


def test_a_backend_that_reads_no_captures_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_FAKE", json.dumps({"conn_type": "mlrunway_fake", "extra": {"name": "mon"}}))
    (tmp_path / "reference").mkdir()
    task, context, _, _ = monitor(tmp_path, conn="fake")
    with pytest.raises(SpecError, match="^backend: the fake backend reads no captured data back here; on Azure ML"):
        task.execute(context)
