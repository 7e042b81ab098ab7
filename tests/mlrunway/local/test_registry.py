from __future__ import annotations

import os

import pytest

from mlrunway.errors import NotFound, SpecError
from mlrunway.local.registry import LocalModels


@pytest.fixture
def models(workspace) -> LocalModels:
    return LocalModels(workspace)


@pytest.fixture
def outputs(tmp_path):
    folder = tmp_path / "job" / "outputs"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "model.pt2").write_bytes(b"weights")
    (folder / "model" / "signature.json").write_text("{}")
    return folder


def test_register_keeps_tags_as_strings_and_properties_as_given(models, outputs):
    models.register("digits", "model", base=outputs, tags={"lr": 0.01}, properties={"source_job": "t1", "best_val_acc": 0.9})
    got = models.get("digits", 1)
    assert got.tags == {"lr": "0.01"} and got.properties == {"source_job": "t1", "best_val_acc": 0.9}


def test_stored_copies_are_immutable_and_independent_of_the_source(models, outputs):
    model = models.register("digits", "model", base=outputs)
    (outputs / "model" / "model.pt2").write_bytes(b"changed later")
    stored = os.path.join(model.path, "model.pt2")
    assert open(stored, "rb").read() == b"weights"
    assert not os.stat(stored).st_mode & 0o222


def test_download_gives_writable_copies(models, outputs, tmp_path):
    models.register("digits", "model", base=outputs)
    dest = models.download("digits", "latest", tmp_path / "dl")
    assert sorted(p.name for p in dest.iterdir()) == ["model.pt2", "signature.json"]
    (dest / "model.pt2").write_bytes(b"mine")


def test_an_archived_version_is_marked_archived(models, outputs):
    models.register("digits", "model", base=outputs)
    models.archive("digits", 1)
    assert models.get("digits", 1).archived


@pytest.mark.parametrize("path", ["../../etc", "/etc/passwd", "model/../../job"], ids=["dotdot", "absolute", "nested-dotdot"])
def test_paths_that_escape_their_folder_are_rejected(models, outputs, path):
    with pytest.raises(SpecError, match="model.path: .* escapes"):
        models.register("digits", path, base=outputs)


def test_symlink_out_of_the_folder_is_rejected(models, outputs):
    (outputs / "model" / "leak").symlink_to("/etc/passwd")
    with pytest.raises(SpecError, match="model.path: symlink .*leak points outside"):
        models.register("digits", "model", base=outputs)
    assert models.list() == []


def test_bad_names_and_missing_versions(models, outputs):
    with pytest.raises(SpecError, match="model.name: 'bad/name' is not a valid model name"):
        models.register("bad/name", "model", base=outputs)
    with pytest.raises(NotFound, match="model 'none' has no version"):
        models.get("none")
    models.register("digits", "model", base=outputs)
    with pytest.raises(NotFound, match="has no version 5; it has \\[1\\]"):
        models.get("digits", 5)
