"""An endpoint's rollout lease on the shared storage without file locks: storage shared by Ray's nodes and Airflow
is often NFS, where ``fcntl`` locks are not to be trusted, while creating a hard link (``link``) and renaming a file
(``rename``) are atomic there too.

The lease is ``lease.json`` (``{"holder", "until"}``) in the endpoint's folder. Taking it: the record is written
aside, then linked into place, which fails if a lease is there. Renewing it (its holder): the record written aside
and renamed over it. Taking over an expired one: renamed away to a name of this taker's own, which only one taker
can do; the taker then reads what it moved: a lease its holder renewed meanwhile is put back, and this taker is told
who holds it. Releasing: its holder renames it away, then removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from pathlib import Path

__all__ = ["LEASE", "release", "take"]

LEASE = "lease.json"


def _aside(folder: Path, data: dict[str, object]) -> Path:
    path = folder / f".lease.{uuid.uuid4().hex}"
    path.write_text(json.dumps(data))
    return path


def _read(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # who holds it cannot be known: nobody takes it (fails closed)
        return {"holder": f"unknown ({path} cannot be read; delete it once no rollout runs)", "until": float("inf")}
    return data if isinstance(data, dict) else {"holder": f"unknown ({path} is not a lease)", "until": float("inf")}


def _said(current: dict[str, object]) -> str:
    until = float(current.get("until", 0))  # type: ignore[arg-type]
    shown = "for good" if until == float("inf") else f"until {time.strftime('%H:%M:%S', time.localtime(until))}"
    return f"{current.get('holder')} ({shown})"


def take(folder: Path, holder: str, ttl_s: float) -> str | None:
    """Take or renew the lease for ``ttl_s``: None; else who holds it and until when."""
    folder.mkdir(parents=True, exist_ok=True)
    lease = folder / LEASE
    for _ in range(5):  # a lost race is retried from what is there now
        now = time.time()
        mine = _aside(folder, {"holder": holder, "until": now + ttl_s})
        try:
            current = _read(lease)
            if current is None:
                try:
                    os.link(mine, lease)
                    return None
                except FileExistsError:
                    continue
            if current.get("holder") == holder:
                os.replace(mine, lease)  # renewed by its holder
                return None
            if float(current.get("until", 0)) > now:  # type: ignore[arg-type]
                return _said(current)
            moved = folder / f".lease.expired.{uuid.uuid4().hex}"
            try:
                os.rename(lease, moved)
            except FileNotFoundError:
                continue  # another taker moved it first
            taken = _read(moved) or {}
            if float(taken.get("until", 0)) > time.time():  # type: ignore[arg-type]  # renewed meanwhile: put back
                with contextlib.suppress(FileExistsError):
                    os.link(moved, lease)
                moved.unlink(missing_ok=True)
                return _said(taken)
            moved.unlink(missing_ok=True)
        finally:
            mine.unlink(missing_ok=True)
    return _said(_read(lease) or {"holder": "another rollout", "until": time.time()})


def release(folder: Path, holder: str) -> None:
    """Give the lease back if ``holder`` holds it."""
    lease = folder / LEASE
    current = _read(lease)
    if current is None or current.get("holder") != holder:
        return
    moved = folder / f".lease.released.{uuid.uuid4().hex}"
    with contextlib.suppress(FileNotFoundError):
        os.rename(lease, moved)
        if (_read(moved) or {}).get("holder") != holder:  # taken over between the read and the move: put back
            with contextlib.suppress(FileExistsError):
                os.link(moved, lease)
        moved.unlink(missing_ok=True)
