"""A full disk for chaos tests: a folder on a small tmpfs, filled up until the test frees it."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """``folder`` on a tmpfs of ``size`` for the block. Skips the test where mounting is refused (no root, a
    container without CAP_SYS_ADMIN): a full disk cannot be made there."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"a tmpfs cannot be mounted here, so a full disk cannot be made: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` until a write fails with ENOSPC; the filler, to unlink to free it."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out, pytest.raises(OSError) as full:
        while True:
            out.write(b"x" * 65536)
    assert full.value.errno == errno.ENOSPC
    return filler


@contextlib.contextmanager
def full_disk(folder: Path, size: str = "64k") -> Iterator[Path]:
    """``folder`` on a tmpfs of ``size``, filled: writes there fail with ENOSPC until the filler (yielded) goes."""
    with tmpfs(folder, size):
        yield fill(folder)


def take_inodes(folder: Path) -> list[Path]:
    """Create empty files in ``folder`` until its file system has no inode left (ENOSPC); the files, to unlink to
    free them."""
    taken: list[Path] = []
    with pytest.raises(OSError) as full:
        while True:
            taken.append(folder / f"inode-{len(taken)}")
            taken[-1].touch()
    assert full.value.errno == errno.ENOSPC
    return taken[:-1]


@contextlib.contextmanager
def no_inodes(folder: Path, inodes: int = 64) -> Iterator[list[Path]]:
    """``folder`` on a tmpfs of ``inodes`` inodes (and 64 MiB), all taken: creating a file or folder there fails
    with ENOSPC until the files (yielded) go, while a write into a file that exists has room."""
    with tmpfs(folder, f"64m,nr_inodes={inodes}"):
        yield take_inodes(folder)
