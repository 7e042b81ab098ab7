"""An exclusive lock across processes, on a file (``fcntl.flock``): the local backend's state files and the Optuna
study a sweep's controller keeps share it. Standard library only: a supervisor imports it at every job's start."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

__all__ = ["locked"]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if missing) across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
