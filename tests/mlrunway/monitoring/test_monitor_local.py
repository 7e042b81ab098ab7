"""The monitor over a real local endpoint: the example's score.py collects what it serves, the reference is what the
same script collects from the held-out validation images, the test images read as stable and a shifted batch of
them as drift."""

from __future__ import annotations

import base64
import io
import json
import math
import time

import numpy as np
import pytest
from PIL import Image

from mlrunway.backend.capture import DataCollector
from mlrunway.backend.types import EndpointSettings
from mlrunway.ledger.reports import ReportsFolder
from mlrunway.local.backend import LocalBackend
from mlrunway.monitoring import monitor
from tests.conftest import REPO, deployment

pytestmark = pytest.mark.slow
TRAINING = REPO / "training"
CAPTURE = DataCollector.parse({"collections": {"model_inputs": True, "model_outputs": True}})


def images(folder, shift: bool) -> list[str]:
    """The split's PNGs as base64; shifted: each image faded to half contrast over a grey background."""
    encoded = []
    for path in sorted(folder.rglob("*.png")):
        if shift:
            pixels = np.asarray(Image.open(path).convert("L"), dtype=np.float32)
            faded = Image.fromarray((pixels * 0.5 + 96).astype(np.uint8))
            buffer = io.BytesIO()
            faded.save(buffer, format="PNG")
            encoded.append(base64.b64encode(buffer.getvalue()).decode())
        else:
            encoded.append(base64.b64encode(path.read_bytes()).decode())
    return encoded


def serve(backend: LocalBackend, batch: list[str]) -> None:
    for start in range(0, len(batch), 4):
        backend.endpoints.invoke("watched", payload={"images": batch[start:start + 4]})


def landed(backend: LocalBackend, since: float, rows: int) -> float:
    """Wait until ``rows`` outputs collected since ``since`` are on disk; return the next whole second, once it has
    come: a record's time is the whole second its rows were collected in, so the next phase's are all at or after
    it, and this phase's all before it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = sum(len(r["data"]) for r in backend.endpoints.captured("watched", "blue", "model_outputs", since,
                                                                    time.time() + 60))
        if got >= rows:
            boundary = math.floor(time.time()) + 1
            time.sleep(boundary - time.time() + 0.05)
            return float(boundary)
        time.sleep(0.25)
    raise AssertionError(f"only {got} of {rows} rows were collected")


def test_the_monitor_finds_a_shift_and_not_the_same_images(workspace, onnx_model, digits, tmp_path):
    backend = LocalBackend(workspace)
    try:
        backend.endpoints.create_or_update("watched", EndpointSettings(workers=1))
        backend.endpoints.create_or_update_deployment("watched", "blue", deployment(
            workspace, onnx_model, TRAINING, model_name="digits-onnx", data_collector=CAPTURE))
        backend.endpoints.set_traffic("watched", {"blue": 100})
        reports = tmp_path / "reports"
        reference = monitor.ensure_reference(backend, "watched", str(TRAINING),
                                             monitor.reference_requests(digits), reports)
        assert len(monitor.read_rows(reference["model_inputs"])) == len(list((digits / "val").rglob("*.png")))
        assert monitor.ensure_reference(backend, "watched", str(TRAINING), [], reports) == reference  # made once

        start = time.time() - 1
        held_out = images(digits / "test", shift=False)
        serve(backend, held_out)
        middle = landed(backend, start, len(held_out))
        same = monitor.check_endpoint(backend, monitor.MonitorSettings.parse(
            "watched", reference, window_s=middle - start), now=middle)
        assert same.status == "stable", same.summary()
        assert [s.production_rows for s in same.signals] == [len(held_out)] * 2

        serve(backend, images(digits / "test", shift=True))
        end = landed(backend, middle, len(held_out))
        shifted = monitor.check_endpoint(backend, monitor.MonitorSettings.parse(
            "watched", reference, window_s=end - middle), now=end)
        assert shifted.status == "drifted", shifted.summary()
        data = next(s for s in shifted.signals if s.name == "data_drift")
        assert {"mean", "std"} <= {f.feature for f in data.features if f.drifted}
        page = monitor.save(shifted, reports)
        assert "DRIFTED" in page.read_text() and "data:image/png;base64," in page.read_text()
        assert json.loads((ReportsFolder(reports).monitoring("watched") / "latest.json").read_text())["status"] == "drifted"

        quiet = monitor.check_endpoint(backend, monitor.MonitorSettings.parse("watched", reference, window_s=60),
                                       now=end + 3600)
        assert quiet.status == "no evidence" and not quiet.drifted  # no traffic is never "stable"
    finally:
        backend.endpoints.delete("watched")
