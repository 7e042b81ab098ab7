"""A deployment's data collector: azure-ai-ml's settings, the real azureml-ai-monitoring SDK collecting into a worker,
payload logging, rolling files, the size cap, and reading the records back."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from mlrunway.backend.capture import DataCollector
from mlrunway.errors import SpecError
from mlrunway.local.backend import LocalBackend
from mlrunway.local.serving.state import DeploymentState
from mlrunway.serving import capture
from mlrunway.serving.runtime import load_deployment

ON = {"collections": {"model_inputs": {"enabled": "true"}, "model_outputs": {"enabled": "true"}}}

COLLECTING = """
import json
import pandas as pd
from azureml.ai.monitoring import Collector

def init():
    global inputs, outputs
    inputs = Collector(name="model_inputs")
    outputs = Collector(name="Model_Outputs")  # the SDK compares names in lower case

def run(raw):
    frame = pd.DataFrame(json.loads(raw)["data"], columns=["a", "b"])
    context = inputs.collect(frame)
    outputs.collect(pd.DataFrame({"y": frame.sum(axis=1)}), context)
    return context.get_id()
"""

REFUSED = """
from azureml.ai.monitoring import Collector

errors = []

def init():
    global inputs
    inputs = Collector(name="model_inputs", on_error=lambda e: errors.append(str(e)))

def run(raw):
    return errors
"""


@pytest.fixture
def writer(monkeypatch):
    """A writer of this test's own, flushed by the test (the module's is the worker's)."""
    fresh = capture.Writer(tick_s=3600)
    monkeypatch.setattr(capture, "WRITER", fresh)
    return fresh


def endpoint_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "ws" / "endpoints" / "ep"
    folder.mkdir(parents=True)
    return folder


def load(folder: Path, tmp_path: Path, name: str, script: str, collector: dict | None, **state) -> object:
    code = tmp_path / f"code-{name}"
    code.mkdir()
    (code / "score.py").write_text(script)
    return load_deployment(folder, DeploymentState(name=name, version=1, model_dir=str(code), code_dir=str(code),
                                                   scoring_script="score.py", model=f"{name}-model:1",
                                                   data_collector=collector, **state))


def records(folder: Path, deployment: str, collection: str) -> list[dict]:
    return capture.read(capture.capture_root(folder), deployment, collection, 0, time.time() + 60)


@pytest.mark.parametrize(("value", "field"), [
    ("yes", "data_collector"),
    ({"collections": {}}, "data_collector.collections"),
    ({"collections": {"model inputs": {"enabled": "true"}}}, "data_collector.collections.model inputs"),
    ({"collections": {"model_inputs": {"enabled": "maybe"}}}, "data_collector.collections.model_inputs.enabled"),
    ({"collections": {"model_inputs": {"enabled": "true", "data": "azureml:x:1"}}},
     "data_collector.collections.model_inputs.data"),
    ({**ON, "sampling_rate": 0}, "data_collector.sampling_rate"),
    ({**ON, "sampling_rate": 1.5}, "data_collector.sampling_rate"),
    ({**ON, "sampling_rate": True}, "data_collector.sampling_rate"),
    ({**ON, "rolling_rate": "week"}, "data_collector.rolling_rate"),
    ({**ON, "request_logging": {}}, "data_collector.request_logging"),
    ({"collections": {f"c{i}": True for i in range(6)}}, "data_collector.collections"),
])
def test_bad_settings_name_their_field(value, field):
    with pytest.raises(SpecError, match=f"^{field}"):
        DataCollector.parse(value)


def test_settings_read_azure_ai_mls_shape():
    parsed = DataCollector.parse({"collections": {"Model_Inputs": {"enabled": "True"}, "request": True,
                                                  "model_outputs": {"enabled": "false"}},
                                  "sampling_rate": 0.25, "rolling_rate": "Minute"})
    assert parsed == DataCollector(("model_inputs", "request"), 0.25, "minute")
    assert parsed.custom == ("model_inputs",) and parsed.payload == ("request",)
    assert DataCollector.parse(parsed.to_dict()) == parsed
    assert DataCollector.parse(None) is None and DataCollector.parse({"collections": {"x": False}}) is None


def test_the_sdks_collectors_write_azures_records_per_deployment(tmp_path, writer):
    folder = endpoint_dir(tmp_path)
    blue = load(folder, tmp_path, "blue", COLLECTING, ON)
    green = load(folder, tmp_path, "green", REFUSED, None)  # shares the worker, collects nothing
    ids = [blue.module.run(json.dumps({"data": [[1, 2], [3, 4]]})) for _ in range(3)]
    assert green.module.run("{}") == ["custom logging is not enabled, drop the data"]  # the SDK's own refusal
    writer.flush()

    inputs, outputs = records(folder, "blue", "model_inputs"), records(folder, "blue", "model_outputs")
    assert [r["correlationid"] for r in inputs] == ids == [r["correlationid"] for r in outputs]
    first = inputs[0]
    assert first["data"] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}] and outputs[0]["data"] == [{"y": 3}, {"y": 7}]
    assert first["type"] == "azureml.inference.model_inputs" and first["specversion"] == "1.0"
    assert first["source"] == "/onlineEndpoints/ep/deployments/blue" and first["modelversion"] == "blue-model:1"
    assert first["agent"].startswith("azureml-ai-monitoring/") and first["contentrange"] == "bytes 0-28/29"
    assert not (capture.capture_root(folder) / "green").exists()
    # Azure's layout: <endpoint>/<deployment>/<collection>/yyyy/MM/dd/HH/<instance>.jsonl
    (path,) = (capture.capture_root(folder) / "blue" / "model_inputs").rglob("*.jsonl")
    assert [len(p) for p in path.relative_to(capture.capture_root(folder)).parts[2:6]] == [4, 2, 2, 2]


def test_sampling_keeps_its_share_of_collect_calls(tmp_path, writer):
    folder = endpoint_dir(tmp_path)
    blue = load(folder, tmp_path, "blue", COLLECTING, {**ON, "sampling_rate": 0.3})
    for _ in range(400):
        blue.module.run(json.dumps({"data": [[1, 2]]}))
    writer.flush()
    kept = len(records(folder, "blue", "model_inputs"))
    assert 84 <= kept <= 156  # 120 expected; outside is under 1 in 10^5 for a fair 30% (binomial, sd 9.2)


def test_payload_logging_keeps_bodies_as_json_or_text(tmp_path, writer):
    folder = endpoint_dir(tmp_path)
    found = capture.target(folder, "blue", "m:1", {"collections": {"request": True, "response": True},
                                                   "rolling_rate": "day"}, 10 ** 6, logging.getLogger("t"))
    writer.payload(found, b'{"data": [[1, 2]]}', 200, b'{"predictions": [1]}')
    writer.payload(found, b"not json \xff", 400, b'{"error": "bad"}')
    writer.flush()
    requests, responses = records(folder, "blue", "request"), records(folder, "blue", "response")
    assert [r["data"] for r in requests] == [{"data": [[1, 2]]}, "not json \ufffd"]
    assert [(r["data"], r["statuscode"]) for r in responses] == [({"predictions": [1]}, 200), ({"error": "bad"}, 400)]
    assert [r["correlationid"] for r in requests] == [r["correlationid"] for r in responses]
    assert requests[0]["method"] == "POST" and requests[0]["contentrange"] == "bytes 0-17/18"
    (path,) = (capture.capture_root(folder) / "blue" / "request").rglob("*.jsonl")
    assert len(path.relative_to(capture.capture_root(folder)).parts) == 6  # blue/request/yyyy/MM/dd/<file>


def test_the_cap_removes_the_oldest_files_first_then_drops(tmp_path, writer, caplog):
    folder = endpoint_dir(tmp_path)
    found = capture.target(folder, "blue", "m:1", {"collections": {"request": True}}, 6000, logging.getLogger("cap"))
    old = [found.path("request", time.time() - 3600 * (5 - i), f"old{i}") for i in range(4)]
    for path in old:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x" * 1400 + "\n")
        os.utime(path, (time.time() - 600, time.time() - 600))
    body = b'{"data": "' + b"y" * 900 + b'"}'
    with caplog.at_level(logging.WARNING, logger="cap"):
        writer.payload(found, body, 200, b"{}")
        writer.flush()
    assert [p.exists() for p in old] == [False, False, True, True]  # oldest first, only as many as needed
    assert len(records(folder, "blue", "request")) == 1
    assert "removed the 2 oldest file(s)" in caplog.text
    with caplog.at_level(logging.WARNING, logger="cap"):
        for _ in range(8):  # more than the cap holds, with nothing older than a few seconds left to remove
            writer.payload(found, body, 200, b"{}")
        writer.flush()
    assert "record(s) dropped" in caplog.text
    assert sum(p.stat().st_size for p in (capture.capture_root(folder) / "blue").rglob("*.jsonl")) <= 6000


def test_reading_skips_a_torn_line_and_keeps_the_window(tmp_path, writer):
    folder = endpoint_dir(tmp_path)
    found = capture.target(folder, "blue", "m:1", {"collections": {"request": True}}, 10 ** 6, logging.getLogger("t"))
    for _ in range(3):
        writer.payload(found, b"{}", 200, b"{}")
    writer.flush()
    (path,) = (capture.capture_root(folder) / "blue" / "request").rglob("*.jsonl")
    with open(path, "a") as handle:
        handle.write('{"specversion": "1.0", "time": "2026-')  # a worker killed mid-append
    now = time.time()
    assert len(capture.read(capture.capture_root(folder), "blue", "request", now - 60, now + 60)) == 3
    assert capture.read(capture.capture_root(folder), "blue", "request", now + 60, now + 120) == []


def test_a_full_queue_refuses_as_the_sdk_does(tmp_path, monkeypatch):
    full = capture.Writer(tick_s=3600, limit=2)
    monkeypatch.setattr(capture, "WRITER", full)
    folder = endpoint_dir(tmp_path)
    script = COLLECTING.replace('name="model_inputs")', 'name="model_inputs", on_error=errors.append)').replace(
        'name="Model_Outputs")', 'name="model_outputs", on_error=errors.append)').replace("def init", "errors = []\n\ndef init")
    blue = load(folder, tmp_path, "blue", script, ON)
    for _ in range(2):
        blue.module.run(json.dumps({"data": [[1, 2]]}))
    assert [str(e) for e in blue.module.errors] == [capture.FULL_QUEUE] * 2  # the second call's two collects


def test_the_connection_sets_the_cap(tmp_path):
    fields = {"workspace": str(tmp_path)}
    assert LocalBackend.from_connection({**fields, "capture_max_mb": "2"}).endpoints.capture_max_bytes == 2 * 1024 ** 2
    assert LocalBackend.from_connection(fields).endpoints.capture_max_bytes == capture.DEFAULT_MAX_BYTES
    with pytest.raises(SpecError, match="^capture_max_mb"):
        LocalBackend.from_connection({**fields, "capture_max_mb": "-1"})
