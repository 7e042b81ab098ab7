"""Atomic JSON files, an advisory lock and log tails: the local backend's whole persistence layer."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mlrunway.local import formats
from mlrunway.locks import locked


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


Stamp = tuple[int, int, int] | None  # a file's inode, mtime and size, None while it does not exist


def stamp(path: str | os.PathLike[str]) -> Stamp:
    """What tells a file's change at the cost of a stat: its inode (a state file is replaced whole, by a rename),
    mtime (ns) and size. A string is stat'ed as it is: a caller that looks 20 times a second need build no Path."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


FULL_BELOW_BYTES = 1 << 20  # a filesystem with less free than this, or no inode, at a failed job's end was full
_NO_SPACE = tuple(os.strerror(code) for code in (errno.ENOSPC, errno.EDQUOT))


def lack(path: Path) -> str | None:
    """How the filesystem of ``path`` is full now ("no inode left, 4096 KiB and 0 inodes free"; under
    FULL_BELOW_BYTES free is full too), or None while it is not (``statvfs`` of it, or, where it is not made yet, of
    the folder it would be made in)."""
    try:
        disk = os.statvfs(next((p for p in (path, *path.parents) if p.exists()), path))
    except OSError:
        return None
    free, inodes = disk.f_bavail * disk.f_frsize, disk.f_favail
    no_inode = disk.f_files > 0 and inodes == 0
    if free >= FULL_BELOW_BYTES and not no_inode:
        return None
    return f"{'no inode left' if no_inode else 'no space left'}, {free // 1024} KiB and {inodes} inodes free"


def full_filesystems(paths: Iterable[Path]) -> list[tuple[Path, str]]:
    """The filesystems of ``paths`` that are full now, each once, named by the first of ``paths`` on it, with how
    (:func:`lack`)."""
    found: list[tuple[Path, str]] = []
    seen: set[int] = set()
    for path in paths:
        try:
            device = os.stat(path).st_dev
        except OSError:
            continue
        if device not in seen and (how := lack(path)) is not None:
            found.append((path, how))
        seen.add(device)
    return found


def full_filesystem(paths: Iterable[Path], stderr_tail: str = "") -> str:
    """Why a failed job may have failed, when a filesystem it writes to (``paths``: its folder and its outputs, a
    model's folder among them, which may be another filesystem) was full at its end (:func:`lack`) or a write of its
    own failed with ENOSPC (its stderr says so): a clause for its error; "" otherwise. A trainer that dies on a full
    disk reads "killed by SIGABRT" with an empty stderr, or torch's "unexpected pos", which name no cause."""
    found = full_filesystems(paths)
    said = "No space left on device" in stderr_tail or "ENOSPC" in stderr_tail
    if not found and not said:
        return ""
    named = [f"the filesystem of {path} was full at the job's end: {how}" for path, how in found]
    named += ["a write of its own failed with ENOSPC"] if said else []
    return f" ({'; '.join(named)}; free space {'there' if found else 'where it writes'} and run it again)"


def no_space(exc: OSError, path: Path) -> str | None:
    """Why a write under ``path`` failed, when a full filesystem is why: "the filesystem of <path> is full (<how>)";
    None for any other failure. Call it before what the write left is removed: a half copy may hold the last inodes.
    ``exc`` may be a ``shutil.Error``, which lists each file's failure as text."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT) and not any(words in str(exc) for words in _NO_SPACE):
        return None
    return f"the filesystem of {path} is full ({lack(path) or 'a write failed with ENOSPC'})"


def read_json(path: Path) -> Any:
    """The state file ``path`` in the current format (an older one migrated, a newer one refused)."""
    with open(path) as handle:
        return formats.current(path, json.load(handle))


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, read from its end (a log may be large), continued from its last
    rotation (``<path>.1``, :func:`rotate_log`) when the file holds fewer; empty when neither exists."""
    found: list[str] = []
    for part in (path, path.with_name(f"{path.name}.1")):
        found = _last_lines(part, lines - len(found)) + found
        if len(found) >= lines:
            break
    return "\n".join(found)


def _last_lines(path: Path, count: int, block: int = 64 * 1024) -> list[str]:
    if count <= 0:
        return []
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return []
    with handle:
        end = handle.seek(0, os.SEEK_END)
        data = b""
        while end > 0 and data.count(b"\n") <= count:
            start = max(0, end - block)
            handle.seek(start)
            data = handle.read(end - start) + data
            end = start
    return data.decode(errors="replace").splitlines()[-count:]


LOG_MAX_BYTES_ENV = "MLRUNWAY_LOG_MAX_BYTES"
LOG_MAX_BYTES = 16 * 2**20  # a long-lived process's log is rotated past this (:func:`rotate_log`)
LOG_KEEP = 3  # rotated files kept: <log>.1 (the newest) to <log>.3


def log_max_bytes() -> int:
    """The size past which a long-lived log is rotated: ``MLRUNWAY_LOG_MAX_BYTES`` or 16 MiB. A value that is not a
    positive whole number of bytes is warned about (in the endpoint's ``server.log``) and the default used."""
    value = os.environ.get(LOG_MAX_BYTES_ENV)
    if value is None:
        return LOG_MAX_BYTES
    try:
        if (size := int(value)) > 0:
            return size
    except ValueError:
        pass
    import logging

    logging.getLogger(__name__).warning(
        "%s=%r is not a positive number of bytes (such as 16777216 for 16 MiB): logs are rotated past the default, "
        "%d bytes", LOG_MAX_BYTES_ENV, value, LOG_MAX_BYTES)
    return LOG_MAX_BYTES


def rotate_log(path: Path, max_bytes: int, keep: int = LOG_KEEP) -> bool:
    """Rotate a log that its writers keep open and append to (``O_APPEND``: an endpoint's ``server.log``, which
    its master and workers inherit as their output, and each deployment's ``score.log``) once it passes
    ``max_bytes``: ``<path>.1`` moves to ``.2`` and so on (the oldest past ``keep`` dropped), the log's bytes are
    copied to ``<path>.1``, and the log is truncated in place, so its writers go on at its new start without
    reopening anything (copytruncate). A line written between the copy and the truncation, microseconds apart,
    is lost. True when it rotated."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    with locked(path.with_name(f".{path.name}.rotate.lock")):
        if path.stat().st_size <= max_bytes:  # another process rotated it meanwhile
            return False
        for older in range(keep - 1, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                os.replace(path.with_name(f"{path.name}.{older}"), path.with_name(f"{path.name}.{older + 1}"))
        copy = path.with_name(f".{path.name}.rotating")
        try:
            with open(path, "rb") as source, open(copy, "wb") as target:
                while chunk := source.read(1 << 20):
                    target.write(chunk)
                target.flush()
                os.truncate(path, 0)
        except OSError:  # a full disk: the log stays whole, and no half copy holds space
            with contextlib.suppress(OSError):
                os.unlink(copy)
            raise
        os.replace(copy, path.with_name(f"{path.name}.1"))
    return True




@contextlib.contextmanager
def folder_locked(folder: Path) -> Iterator[bool]:
    """Hold an exclusive flock on ``folder`` itself, for work that ends by removing it (a lock file inside would go
    with it; one beside it would stay behind). Yields whether ``folder`` is still the folder locked: False once it is
    gone (removed by whoever held the lock before), or replaced by another of its name meanwhile."""
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        descriptor = -1
    try:
        if descriptor >= 0:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield descriptor >= 0 and _is_open_as(folder, descriptor)
    finally:
        if descriptor >= 0:
            os.close(descriptor)  # the lock goes with it


def _is_open_as(path: Path, descriptor: int) -> bool:
    """Whether ``path`` names the file ``descriptor`` has open."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
