"""The local registry's mirror in MLflow's Model Registry, read back through MLflow's own client. One workspace
for the module (creating an MLflow store takes seconds), a model name per test."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlrunway.backend.types import ModelVersion
from mlrunway.local import tracking
from mlrunway.local.mlflow_registry import RegistryMismatch
from mlrunway.local.registry import LocalModels
from mlrunway.local.workspace import Workspace


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    return Workspace.at(tmp_path_factory.mktemp("mirror") / "ws")


@pytest.fixture
def models(workspace) -> LocalModels:
    return LocalModels(workspace)


@pytest.fixture(scope="module")
def mlflow_client(workspace):
    from mlflow import MlflowClient

    return MlflowClient(workspace.tracking_uri, registry_uri=workspace.tracking_uri)


@pytest.fixture
def outputs(tmp_path):
    folder = tmp_path / "job" / "outputs" / "model"
    folder.mkdir(parents=True)
    (folder / "model.pt2").write_bytes(b"weights")
    return folder.parent


def test_versions_are_mlflow_versions_with_tags_properties_and_the_jobs_run(workspace, models, mlflow_client, outputs):
    _experiment, run_id = tracking.start_run(workspace, "trial-7", "digits-sweep", None)
    models.register("digits", "model", base=outputs, tags={"lr": 0.01},
                    properties={"source_job": "trial-7", "best_val_acc": 0.9, "params": {"lr": 0.01}},
                    description="the sweep's best")
    models.register("digits", "model", base=outputs, properties={"source_job": "never-ran"})
    found = {int(v.version): v for v in mlflow_client.search_model_versions("name = 'digits'")}
    assert sorted(found) == [1, 2]
    first = found[1]
    assert first.run_id == run_id and not found[2].run_id and first.description == "the sweep's best"
    assert first.tags == {"lr": "0.01", "mlrunway.format": "custom", "mlrunway.property.source_job": "trial-7",
                          "mlrunway.property.best_val_acc": "0.9", "mlrunway.property.params": '{"lr": 0.01}'}
    # The files are copied into MLflow's artifact store (where the runs' artifacts are), read-only, not linked.
    source = first.source.removeprefix("file://")
    assert source == str(workspace.root / "artifacts" / "model-registry" / "digits" / "1")
    assert mlflow_client.get_run(run_id).info.artifact_uri.startswith((workspace.root / "artifacts").as_uri())
    copied, kept = os.path.join(source, "model.pt2"), os.path.join(models.get("digits", 1).path, "model.pt2")
    assert open(copied, "rb").read() == b"weights" and not os.path.samefile(copied, kept)
    assert not os.stat(copied).st_mode & 0o222
    assert not (workspace.models / "digits" / "1" / "mlflow").exists()


def test_aliases_are_mlflow_aliases_and_tag_changes_reach_mlflow(models, mlflow_client, outputs):
    for _ in range(3):
        models.register("aliased", "model", base=outputs, tags={"keep": "x"})
    assert models.alias("aliased", "production") is None
    models.set_alias("aliased", 1, "production")
    models.set_alias("aliased", 2, "production")
    models.set_alias("aliased", 1, "previous")
    assert int(mlflow_client.get_model_version_by_alias("aliased", "production").version) == 2
    assert int(mlflow_client.get_model_version_by_alias("aliased", "previous").version) == 1
    assert (models.alias("aliased", "production").version, models.alias("aliased", "previous").version) == (2, 1)
    assert not any(k.startswith("mlrunway.alias.") for m in models.list("aliased") for k in m.tags)
    models.update_tags("aliased", 2, {"mlrunway.decision": "promoted", "keep": None})
    models.archive("aliased", 3)
    assert mlflow_client.get_model_version("aliased", "2").tags == {"mlrunway.decision": "promoted",
                                                                  "mlrunway.format": "custom"}
    assert mlflow_client.get_model_version("aliased", "3").tags["mlrunway.archived"] == "true"
    assert models.alias("ghost", "production") is None


def test_an_onnx_version_loads_by_alias_through_mlflow(workspace, models, tmp_path, monkeypatch):
    import mlflow
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    folder = tmp_path / "onnx"
    folder.mkdir()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), folder / "model.onnx")
    models.register("tiny", "onnx", base=tmp_path, format="onnx")
    models.set_alias("tiny", 1, "production")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", workspace.tracking_uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", workspace.tracking_uri)
    loaded = mlflow.onnx.load_model("models:/tiny@production")
    session = onnxruntime.InferenceSession(loaded.SerializeToString(), providers=["CPUExecutionProvider"])
    batch = np.array([[-1.0, 2.0]], dtype=np.float32)
    assert session.run(None, {"x": batch})[0].tolist() == [[0.0, 2.0]]
    predicted = mlflow.pyfunc.load_model("models:/tiny@production").predict({"x": batch})
    assert predicted["y"].tolist() == [[0.0, 2.0]]
    assert sorted(os.listdir(models.get("tiny", 1).path)) == ["model.onnx"]  # MLflow's writes stay out of files/


def _old_version(workspace, name: str, version: int, tags: dict[str, str], properties: dict) -> None:
    """A version exactly as the registry wrote it before the mirror (``git show 5437c72:mlrunway/local/registry.py``):
    read-only ``files/`` and ``model.json``, alias tags as ``Models.set_alias``'s default wrote them."""
    folder = workspace.models / name / str(version)
    (folder / "files").mkdir(parents=True)
    weights = folder / "files" / "model.pt2"
    weights.write_bytes(f"weights {version}".encode())
    weights.chmod(weights.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    model = ModelVersion(name=name, version=version, path=str(folder / "files"), format="torch.export", tags=tags,
                         properties=properties, description=f"v{version}", created=1_700_000_000.0 + version)
    (folder / "model.json").write_text(json.dumps(model.to_dict(), sort_keys=True))


def test_a_workspace_written_before_the_mirror_is_migrated_on_first_use(workspace, mlflow_client, outputs):
    (workspace.models / "legacy").mkdir(parents=True)
    (workspace.models / "legacy" / ".lock").touch()
    _old_version(workspace, "legacy", 1, {"lr": "0.1", "mlrunway.alias.production": "2026-01-01T00:00:00+00:00",
                                          "mlrunway.alias.previous": "2026-02-01T00:00:00+00:00"}, {"source_job": "t1"})
    _old_version(workspace, "legacy", 2, {"mlrunway.alias.production": "2026-02-01T00:00:00+00:00"},
                 {"source_job": "t2", "best_val_acc": 0.95})
    _old_version(workspace, "legacy", 3, {"mlrunway.decision": "rolled_back"}, {})
    models = LocalModels(workspace)
    assert models.alias("legacy", "production").version == 2  # the first use migrates: the newest tag holder wins
    assert models.alias("legacy", "previous").version == 1
    for again in (models, LocalModels(workspace)):  # idempotent
        again.sync("legacy")
    versions = {int(v.version): v for v in mlflow_client.search_model_versions("name = 'legacy'")}
    assert sorted(versions) == [1, 2, 3]
    assert versions[1].tags == {"lr": "0.1", "mlrunway.format": "torch.export", "mlrunway.property.source_job": "t1"}
    assert versions[2].tags["mlrunway.property.best_val_acc"] == "0.95" and versions[2].description == "v2"
    aliases = mlflow_client.get_registered_model("legacy").aliases
    assert {alias: int(version) for alias, version in aliases.items()} == {"production": 2, "previous": 1}
    assert models.get("legacy", 1).tags == {"lr": "0.1"}  # the alias tags became aliases
    assert models.get("legacy", 3).tags == {"mlrunway.decision": "rolled_back"}
    assert open(os.path.join(versions[3].source.removeprefix("file://"), "model.pt2"), "rb").read() == b"weights 3"
    assert models.register("legacy", "model", base=outputs).version == 4
    assert mlflow_client.get_model_version("legacy", "4").source.endswith("/artifacts/model-registry/legacy/4")


def test_a_registration_cut_short_before_mlflow_is_mirrored_by_the_next(workspace, models, mlflow_client, outputs):
    models.register("cut", "model", base=outputs)
    shutil.copytree(workspace.models / "cut" / "1", workspace.models / "cut" / "2")  # renamed, then the crash
    record = json.loads((workspace.models / "cut" / "2" / "model.json").read_text())
    (workspace.models / "cut" / "2" / "model.json").write_text(json.dumps({**record, "version": 2}))
    assert LocalModels(workspace).register("cut", "model", base=outputs).version == 3
    assert sorted(int(v.version) for v in mlflow_client.search_model_versions("name = 'cut'")) == [1, 2, 3]


def test_a_version_made_in_mlflow_alone_stops_registration_with_the_fix(workspace, models, mlflow_client, outputs):
    models.register("mismatch", "model", base=outputs)
    mlflow_client.create_model_version("mismatch", "file:///elsewhere")
    with pytest.raises(RegistryMismatch, match=r"model mismatch: MLflow has versions \[2\] that .* lacks; restore"):
        models.register("mismatch", "model", base=outputs)
    assert [m.version for m in models.list("mismatch")] == [1]
    assert not list((workspace.models / "mismatch").glob(".new.*"))


@contextlib.contextmanager
def mlflow_server(tracking_uri: str, cwd: Path) -> Iterator[Any]:
    """MLflow's own server (``mlflow server``, one worker) over a workspace's store, and a client of it over HTTP;
    stopped on exit. tests/production/test_stable_endpoint_local.py reads a DAG-run workspace through it."""
    from mlflow import MlflowClient

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", tracking_uri,
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        remote = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}", registry_uri=f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 120
        while True:
            try:
                remote.search_registered_models(max_results=1)
                break
            except Exception:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read() if server.stderr \
                    else "the server did not answer"
                time.sleep(0.5)
        yield remote
    finally:
        os.killpg(server.pid, 15)
        server.wait(20)
