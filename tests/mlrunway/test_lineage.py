"""The lineage naming rules (mlrunway.lineage): the same thing gets the same (namespace, name) wherever it is read or
made, on each backend, and a code snapshot's version is the hash of what a job would get."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrunway import lineage
from mlrunway.backend.fake import FakeBackend
from mlrunway.lineage import LineageDataset
from mlrunway.local.backend import LocalBackend
from mlrunway.specs import CommandJobSpec
from mlrunway.specs.job import Input

AZ = "azureml://subscriptions/sub-1/resourceGroups/rg-1/workspaces/ws-1"


def test_the_backends_namespaces():
    assert lineage.local_namespace("box", "/srv/ws/") == "mlrunway-local://box/srv/ws"
    assert lineage.azure_namespace("sub-1", "rg-1", "ws-1") == AZ


def test_the_local_backend_names_its_workspace_on_this_host(tmp_path):
    backend = LocalBackend.at(tmp_path / "ws")
    assert lineage.namespace_of(backend) == f"mlrunway-local://{lineage.host()}{(tmp_path / 'ws').resolve()}"


def test_a_backend_that_names_no_namespace_gets_its_kind_and_host():
    assert lineage.namespace_of(FakeBackend()) == f"mlrunway-fake://{lineage.host()}"


@pytest.mark.parametrize("namespace", ["mlrunway-local://box/srv/ws", AZ])
def test_jobs_models_and_endpoints_are_named_alike_on_both_backends(namespace):
    assert lineage.job(namespace, "digits-1a2b-sweep-a2") == LineageDataset(namespace=namespace,
                                                                           name="jobs/digits-1a2b-sweep-a2")
    assert lineage.model_version(namespace, "digits-1a2b-onnx", "3").name == "models/digits-1a2b-onnx/versions/3"
    assert lineage.model_version(namespace, "m", 3) == lineage.model_version(namespace, "m", "3")
    assert lineage.endpoint(namespace, "ep-1a2b").name == "endpoints/ep-1a2b"
    assert lineage.deployment(namespace, "ep-1a2b", "blue").name == "endpoints/ep-1a2b/deployments/blue"


@pytest.mark.parametrize(("path", "namespace", "name"), [
    ("/data/digits/", "file://box", "/data/digits"),
    ("file:///data/digits", "file://box", "/data/digits"),
    ("file://other/data/digits", "file://other", "/data/digits"),
    ("azureml://datastores/workspaceblobstore/paths/digits/", f"{AZ}/datastores/workspaceblobstore", "digits"),
    ("azureml://subscriptions/s/resourcegroups/r/workspaces/w/datastores/blob/paths/a/b.csv",
     "azureml://subscriptions/s/resourceGroups/r/workspaces/w/datastores/blob", "a/b.csv"),
    ("https://acct.blob.core.windows.net/container/digits", "https://acct.blob.core.windows.net", "container/digits"),
    ("azureml:digits:2", AZ, "data/digits/versions/2"),
    ("digits@latest", AZ, "data/digits/versions/latest"),
])
def test_data_is_named_by_what_its_path_is(path, namespace, name):
    assert lineage.data(path, AZ, "box") == LineageDataset(namespace=namespace, name=name)


def test_a_relative_local_path_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert lineage.data("digits", AZ, "box").name == str(tmp_path / "digits")
    assert lineage.data("digits", AZ, "box") == lineage.data(str(tmp_path / "digits") + "/", AZ, "box")


def code_folder(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "pkg" / "model.py").write_text("W = 1\n")
    (root / ".amlignore").write_text("*.ckpt\n")
    return root


def test_the_code_snapshot_is_versioned_by_the_files_a_job_gets(tmp_path):
    code = code_folder(tmp_path / "a")
    first = lineage.code_snapshot(code, "box")
    assert first.namespace == "file://box" and first.name == str(code) and len(first.version or "") == 64

    (code / "big.ckpt").write_bytes(b"\0" * 1000)  # ignored by .amlignore: not in the snapshot
    (code / "outputs").mkdir()
    (code / "outputs" / "model.pt").write_bytes(b"weights")  # outputs/ never is
    assert lineage.code_snapshot(code, "box").version == first.version

    copy = code_folder(tmp_path / "b")  # the same files elsewhere: the same version
    assert lineage.snapshot_hash(copy) == first.version

    (code / "pkg" / "model.py").write_text("W = 2\n")
    assert lineage.code_snapshot(code, "box").version != first.version
    (code / "pkg" / "model.py").write_text("W = 1\n")
    (code / "pkg" / "model.py").rename(code / "pkg" / "other.py")  # the same bytes under another name
    assert lineage.snapshot_hash(code) != first.version


def test_a_command_jobs_inputs_are_its_data_and_its_code_not_its_literals(tmp_path):
    code = code_folder(tmp_path / "code")
    spec = CommandJobSpec(code=str(code), command="python train.py --data ${{inputs.data}} --lr ${{inputs.lr}}",
                          inputs={"data": Input(path=str(tmp_path / "digits")), "lr": 0.01})
    data, snapshot = lineage.command_job_inputs(spec, AZ, "box")
    assert data == LineageDataset(namespace="file://box", name=str(tmp_path / "digits"))
    assert snapshot == lineage.code_snapshot(code, "box")
