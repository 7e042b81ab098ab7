"""The lifecycle steps over the real local backend: run names, a smoke test that fails, cleanup twice."""

from __future__ import annotations

import json

import pytest

from mlrunway.backend.naming import RunNames
from mlrunway.backend.types import DeploymentSettings, EndpointSettings
from mlrunway.deploy.blue import deploy_blue
from mlrunway.errors import EndpointError, SpecError
from mlrunway.local.backend import LocalBackend
from mlrunway.pipeline import cleanup
from tests.conftest import write_script


def test_run_names_derive_from_the_run_and_never_collide():
    a = RunNames.of("train_sweep_deploy", "scheduled__2026-11-16T00:00:00+00:00", "digits")
    b = RunNames.of("train_sweep_deploy", "scheduled__2026-11-23T00:00:00+00:00", "digits")
    assert a == RunNames.of("train_sweep_deploy", "scheduled__2026-11-16T00:00:00+00:00", "digits")  # a retry
    assert len({a.endpoint, b.endpoint}) == 2 and len(a.endpoint) <= 32
    assert a.train_job.startswith(a.endpoint) and a.sweep.startswith(a.endpoint)


def test_run_names_reject_a_prefix_azure_would_refuse():
    with pytest.raises(SpecError, match="endpoint.name: '9digits-"):
        RunNames.of("dag", "run", "9digits")


WRONG_ANSWER = """
def init():
    pass
def run(raw):
    return {"predictions": [{"label": "cat", "probability": 1.0, "probabilities": [1.0]}]}
"""


@pytest.mark.slow
def test_a_failed_smoke_test_fails_the_deploy_and_leaves_traffic_alone(tmp_path, digits):
    backend = LocalBackend.at(tmp_path / "ws")
    model = tmp_path / "model"
    model.mkdir()
    (model / "signature.json").write_text(json.dumps({
        "classes": [str(i) for i in range(10)], "inputs": [{"name": "input", "shape": [None, 1, 8, 8], "dtype": "float32"}],
        "preprocessing": {"color": "L", "size": [8, 8], "scale": 1 / 255, "mean": 0.5, "std": 0.5}}))
    onnx = backend.models.register("digits-onnx", model, format="onnx")
    code = write_script(tmp_path / "code", WRONG_ANSWER, "score.py")
    names = RunNames.of("dag", "run-1", "smoke")
    try:
        with pytest.raises(EndpointError, match="smoke test: .*'label': 'cat'.* is not a valid prediction"):
            deploy_blue(backend, names.endpoint, DeploymentSettings(model=f"{onnx.name}:{onnx.version}", code_dir=str(code)),
                        digits, endpoint_settings=EndpointSettings(workers=1))
        assert backend.endpoints.get(names.endpoint).traffic == {}  # blue never got traffic
    finally:
        first = cleanup(backend, names)
    assert first["endpoint_deleted"] is True
    again = cleanup(backend, names)  # already gone is success
    assert again == {"endpoint_deleted": False, "canceled_jobs": [], "archived_models": [], "endpoint_kept": False}
