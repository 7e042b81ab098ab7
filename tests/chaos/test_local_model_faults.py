"""Chaos: the model registry's filesystem fills up, or runs out of inodes, while a version is copied in: the error
says so, naming the folder and the fix, nothing half-copied stays, and the next registration, once there is room,
gets the version a clean one would have.

The registry's folder is a tmpfs of its own (skipped where one cannot be mounted); each test takes a second or so.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mlrunway.local.registry import LocalModels
from tests.chaos.disk import full_disk, no_inodes

pytestmark = [pytest.mark.slow, pytest.mark.chaos]


@contextlib.contextmanager
def full(folder: Path) -> Iterator[Callable[[], None]]:
    """A full disk; what frees it."""
    with full_disk(folder) as filler:
        yield filler.unlink


@contextlib.contextmanager
def inodes_run_out_mid_copy(folder: Path) -> Iterator[Callable[[], None]]:
    """Inodes for the model's folder, the version's and its files' folder: the first file's copy fails (a folder's
    copy raises a shutil.Error listing each file); what frees the rest."""
    with no_inodes(folder) as taken:
        for inode in taken[-3:]:
            inode.unlink()
        yield lambda: freed(taken)


@contextlib.contextmanager
def no_inode_at_all(folder: Path) -> Iterator[Callable[[], None]]:
    with no_inodes(folder) as taken:
        yield lambda: freed(taken)


def freed(taken: list[Path]) -> None:
    for inode in taken:
        inode.unlink(missing_ok=True)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "job" / "outputs" / "model"
    folder.mkdir(parents=True)
    (folder / "model.pt2").write_bytes(b"weights")
    (folder / "signature.json").write_text("{}")
    return folder


@pytest.mark.parametrize(("exhausted", "how"), [
    (full, "no space left"), (inodes_run_out_mid_copy, "no inode left"), (no_inode_at_all, "no inode left"),
], ids=["full", "no-inode-mid-copy", "no-inode"])
def test_a_registration_onto_a_full_filesystem_says_so_and_leaves_nothing(workspace, source, exhausted, how):
    """Issue 76: ``models.register`` under inode exhaustion raised a raw ``shutil.Error`` (its list of files)."""
    models = LocalModels(workspace)
    with exhausted(workspace.models) as make_room:
        with pytest.raises(OSError) as refused:
            models.register("digits", source)
        message = str(refused.value)
        assert not isinstance(refused.value, shutil.Error), message
        assert f"model digits: {source} could not be registered: the filesystem of {workspace.models / 'digits'} " \
               f"is full ({how}, " in message, message
        assert message.endswith("; free space there and register it again"), message
        assert not list(workspace.models.glob("digits/*")) and not list(workspace.models.glob("digits/.*"))
        make_room()
        assert models.register("digits", source).version == 1  # no half copy took a version's place
