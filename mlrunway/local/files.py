"""Atomic JSON files, an advisory lock and log tails: the local backend's whole persistence layer."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlrunway.local import formats


def dumps(data: Any) -> str:
    """``data`` as the workspace's files hold it: one line, keys sorted. ``json.dumps`` without indentation is
    json's C encoder, ``json.dump`` and any ``indent`` its Python one, 15 to 20 times slower (a sweep's record,
    rewritten as its trials log, took a sweep's controller more CPU than all else it does). ``python -m json.tool``
    shows a file indented."""
    return json.dumps(data, sort_keys=True)


def write_json(path: Path, data: Any) -> None:
    """Write the state file ``path`` (:func:`dumps`, with the workspace's format version: :mod:`~mlrunway.local.formats`)
    so that readers see the old file or the new one (:func:`write_text`)."""
    write_text(path, dumps(formats.stamped(data)))


def write_text(path: Path, text: str) -> None:
    """Write ``text`` so that readers see the old file or the new one, never half of one. A write that fails (a
    full disk) leaves no temporary file behind and raises an OSError naming ``path``."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise OSError(exc.errno, f"could not write {path}: {exc.strerror}", str(path)) from exc
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OSError(exc.errno, f"could not write {path}: {exc.strerror}", str(path)) from exc


Stamp = tuple[int, int] | None  # a file's mtime and size, None while it does not exist


def stamp(path: Path) -> Stamp:
    """What tells a file's change at the cost of a stat: its mtime (ns) and size."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def read_json(path: Path) -> Any:
    """The state file ``path`` in the current format (an older one migrated, a newer one refused)."""
    with open(path) as handle:
        return formats.current(path, json.load(handle))


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file; empty when it does not exist yet."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


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
