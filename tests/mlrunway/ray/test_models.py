"""The Ray backend's model registry against a real MLflow server (``mlflow server`` on loopback, started once for
the module in its own temp dir and process group, stopped by its group id)."""

from __future__ import annotations

import filecmp
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlrunway.errors import NotFound, SpecError, Unavailable
from mlrunway.ray.models import RayModels
from mlrunway.tracking_names import ARCHIVED_TAG, FORMAT_TAG, PROPERTY_TAG

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's group, SIGKILL what is left after a grace, and check nothing of it runs on."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(5)
    deadline = time.monotonic() + 10
    while True:
        try:
            os.killpg(server.pid, 0)
        except ProcessLookupError:
            return  # the whole group is gone
        if time.monotonic() > deadline:
            os.killpg(server.pid, signal.SIGKILL)
            time.sleep(0.5)
            pytest.fail(f"the MLflow server's process group {server.pid} outlived SIGTERM by 10 s")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The server's address and its artifacts folder."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    # The server's job runner (huey consumers) is no part of the registry: off, it starts fewer processes.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(root / "server.log", "wb")  # the server writes it until the teardown closes it
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
         "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        importlib.import_module("mlflow.tracking")  # the client's import (seconds) while the server starts
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, (root / "server.log").read_text()
            assert time.monotonic() < deadline, "the MLflow server did not answer /health in 90 s"
            time.sleep(0.2)
        yield uri, root / "artifacts"
    finally:
        _stop(server)
        log.close()


@pytest.fixture
def models(server: tuple[str, Path], tmp_path: Path) -> RayModels:
    (tmp_path / "storage").mkdir()
    return RayModels(server[0], tmp_path / "storage")


def model_folder(root: Path, text: str = "weights") -> Path:
    """A model folder with a file at its top and one in a subfolder (binary, to catch any text mangling)."""
    (root / "sub").mkdir(parents=True)
    (root / "weights.txt").write_text(text)
    (root / "sub" / "blob.bin").write_bytes(bytes(range(256)) * 40)
    return root


def test_a_registered_folder_reads_back_with_its_files_tags_properties_and_format(models: RayModels,
                                                                                 tmp_path: Path) -> None:
    first = model_folder(tmp_path / "one", "first")
    properties = {"source_job": "train_7", "params": {"lr": 0.01, "layers": [2, 3]}, "accuracy": 0.93, "opset": 17}
    one = models.register("readback", first, format="torch.export", tags={"team": "vision"}, properties=properties,
                          description="the first")
    two = models.register("readback", model_folder(tmp_path / "two", "second"))
    assert (one.version, two.version) == (1, 2)
    assert (one.path, two.path) == ("models:/readback/1", "models:/readback/2")
    got = models.get("readback", "1")
    assert (got.tags, got.properties, got.format, got.description, got.archived) == (
        {"team": "vision"}, properties, "torch.export", "the first", False)
    assert abs(got.created - time.time()) < 120 and got == one
    assert models.get("readback").version == 2  # the latest
    assert models.get("readback", 2).format == "custom"
    dest = models.download("readback", 1, tmp_path / "down")
    assert dest == tmp_path / "down"
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["sub", "sub/blob.bin", "weights.txt"]
    assert not filecmp.dircmp(first, dest).diff_files and filecmp.cmp(first / "sub" / "blob.bin",
                                                                      dest / "sub" / "blob.bin", shallow=False)
    latest = models.download("readback", None, tmp_path / "latest")
    assert (latest / "weights.txt").read_text() == "second"


def test_a_single_file_downloads_as_that_file(models: RayModels, tmp_path: Path) -> None:
    (tmp_path / "model.pt2").write_bytes(b"\x00pt2")
    models.register("single", tmp_path / "model.pt2")
    dest = models.download("single", 1, tmp_path / "down")
    assert [p.name for p in dest.iterdir()] == ["model.pt2"]
    assert (dest / "model.pt2").read_bytes() == b"\x00pt2"


def test_a_path_inside_base_is_registered_and_one_escaping_it_is_refused_naming_the_field(models: RayModels,
                                                                                         tmp_path: Path) -> None:
    outputs = tmp_path / "jobs" / "train_1" / "outputs"
    model_folder(outputs / "model")
    (tmp_path / "jobs" / "x").mkdir()
    registered = models.register("based", "model", base=outputs)
    assert (registered.version, (models.download("based", 1, tmp_path / "d") / "weights.txt").read_text()) == (
        1, "weights")
    whole = models.register("based", "", base=outputs / "model")  # the base itself, as the export registers
    assert whole.version == 2
    with pytest.raises(SpecError, match=r"model\.path: '\.\./x' escapes"):
        models.register("based", "../x", base=outputs.parent.parent)
    with pytest.raises(SpecError, match=r"model\.path: .*does not exist"):
        models.register("based", "missing", base=outputs)
    assert [m.version for m in models.list("based")] == [1, 2]  # nothing was uploaded for the refused ones


def test_a_symlink_out_of_base_is_refused(models: RayModels, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s")
    folder = model_folder(tmp_path / "out" / "model")
    (folder / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(SpecError, match=r"model\.path: symlink .*points outside"):
        models.register("linked", "model", base=tmp_path / "out")


def test_update_tags_sets_and_removes_tags_of_one_version(models: RayModels, tmp_path: Path) -> None:
    models.register("tagged", model_folder(tmp_path / "a"), tags={"stage": "candidate", "team": "vision"},
                    properties={"source_job": "j1"})
    models.register("tagged", model_folder(tmp_path / "b"), tags={"team": "vision"})
    updated = models.update_tags("tagged", 1, {"stage": None, "gate": "passed", "never": None})
    assert updated.tags == {"team": "vision", "gate": "passed"}
    assert models.get("tagged", 1).tags == {"team": "vision", "gate": "passed"}
    assert models.get("tagged", 1).properties == {"source_job": "j1"}  # properties are not tags
    assert models.get("tagged", 2).tags == {"team": "vision"}
    with pytest.raises(NotFound, match="tagged"):
        models.update_tags("tagged", 9, {"gate": "passed"})


@pytest.mark.parametrize("key", [FORMAT_TAG, ARCHIVED_TAG, PROPERTY_TAG.format("source_job")],
                         ids=["format", "archived", "property"])
def test_a_tag_named_as_mlrunways_own_is_refused(models: RayModels, tmp_path: Path, key: str) -> None:
    with pytest.raises(SpecError, match=f"model.tags.{key}"):
        models.register("reserved", model_folder(tmp_path / "a"), tags={key: "x"})
    assert models.list("reserved") == []


def test_an_archived_version_is_listed_but_no_longer_the_latest(models: RayModels, tmp_path: Path) -> None:
    for letter in "ab":
        models.register("archiving", model_folder(tmp_path / letter))
    archived = models.archive("archiving", 2)
    assert (archived.version, archived.archived) == (2, True)
    assert archived.tags == {}  # the mark is no tag of the user's
    assert models.get("archiving").version == 1
    assert models.get("archiving", 2).archived
    assert [(m.version, m.archived) for m in models.list("archiving")] == [(1, False), (2, True)]
    assert models.register("archiving", model_folder(tmp_path / "c")).version == 3  # its number is not reused
    models.archive("archiving", 1)
    models.archive("archiving", 3)
    with pytest.raises(NotFound, match="archiving.*no version that is not archived"):
        models.get("archiving")
    with pytest.raises(NotFound, match="archiving"):
        models.archive("archiving", 9)


def test_an_alias_is_held_by_one_version_and_moves(models: RayModels, tmp_path: Path) -> None:
    for letter in "ab":
        models.register("aliased", model_folder(tmp_path / letter))
    assert models.alias("aliased", "production") is None
    models.set_alias("aliased", 1, "production")
    assert getattr(models.alias("aliased", "production"), "version", None) == 1
    models.set_alias("aliased", 2, "production")
    models.set_alias("aliased", 1, "previous")
    assert getattr(models.alias("aliased", "production"), "version", None) == 2
    assert getattr(models.alias("aliased", "previous"), "version", None) == 1
    assert not any(k.startswith("mlrunway.alias.") for m in models.list("aliased") for k in m.tags)  # MLflow's own
    with pytest.raises(NotFound, match="aliased"):
        models.set_alias("aliased", 9, "production")
    assert models.alias("never-registered", "production") is None
    assert models.alias("connector", "production") is None  # MLflow's 404 names it: no outage for all that


@pytest.mark.parametrize("version", [None, 1, "latest"], ids=["default", "one", "latest"])
def test_get_of_a_model_that_does_not_exist_raises_not_found(models: RayModels, version: int | str | None) -> None:
    with pytest.raises(NotFound, match="'absent'"):
        models.get("absent", version)


def test_get_of_a_version_that_does_not_exist_raises_not_found_naming_those_there(models: RayModels,
                                                                                  tmp_path: Path) -> None:
    models.register("oneversion", model_folder(tmp_path / "a"))
    with pytest.raises(NotFound, match=r"'oneversion' has no version 9 .*it has \[1\]"):
        models.get("oneversion", 9)
    with pytest.raises(NotFound, match="oneversion"):
        models.download("oneversion", 9, tmp_path / "none")
    with pytest.raises(SpecError, match="model.version"):
        models.get("oneversion", "v1")


def test_list_gives_every_version_by_name_then_version(models: RayModels, tmp_path: Path) -> None:
    for i, name in enumerate(["order-b", "order-a", "order-b", "order-a"]):
        models.register(name, model_folder(tmp_path / str(i)))
    models.archive("order-b", 1)
    listed = [(m.name, m.version) for m in models.list() if m.name.startswith("order-")]
    assert listed == [("order-a", 1), ("order-a", 2), ("order-b", 1), ("order-b", 2)]
    assert [m.version for m in models.list("order-b")] == [1, 2]
    assert models.list("order-none") == []


def test_an_onnx_version_gets_an_mlmodel_mlflow_can_read(models: RayModels, server: tuple[str, Path],
                                                         tmp_path: Path) -> None:
    from mlflow.models import Model

    folder = tmp_path / "onnx"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not really onnx")
    (folder / "signature.json").write_text("{}")
    models.register("exported", folder, format="onnx")
    stored = list(server[1].rglob("model/MLmodel"))  # in the server's artifact store, beside the model's files
    assert len(stored) == 1 and (stored[0].parent / "model.onnx").read_bytes() == b"not really onnx"
    down = models.download("exported", 1, tmp_path / "down")
    assert sorted(p.name for p in down.iterdir()) == ["MLmodel", "model.onnx", "signature.json"]
    flavors = Model.load(str(down / "MLmodel")).flavors
    assert flavors["onnx"]["data"] == "model.onnx" and flavors["python_function"]["loader_module"] == "mlflow.onnx"
    (folder / "second.onnx").write_bytes(b"x")  # two .onnx files: which one MLflow should load is unknown
    models.register("exported", folder, format="onnx")
    assert "MLmodel" not in {p.name for p in models.download("exported", 2, tmp_path / "two").iterdir()}


def test_a_server_that_does_not_answer_is_unavailable_naming_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # MLflow's retries take minutes by default
    uri = f"http://127.0.0.1:{_free_port()}"
    down = RayModels(uri, tmp_path)
    for call in (lambda: down.get("m"), lambda: down.get("m", 1), lambda: down.list(), lambda: down.alias("m", "p"),
                 lambda: down.register("m", model_folder(tmp_path / "m"))):
        with pytest.raises(Unavailable, match=f"MLflow server at {uri} did not answer"):
            call()
