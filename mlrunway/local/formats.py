"""Format versions of a local workspace's state files, and the one migration of a workspace written before.

Every state file (a job's ``job.json``, ``status.json``, ``cancel_requested.json``, ``outcome.json`` and
``outputs/sweep.json``; a model version's ``model.json``; an endpoint's ``endpoint.json``, ``lease.json`` and each
deployment's ``provision.json``) carries ``format_version``, written by :func:`mlrunway.local.files.write_json`.
Reading one (:func:`current`):

- of this version: as it is;
- older: migrated in memory, one version at a time (``MIGRATIONS``), so a file an older process still writes (a
  job's supervisor started before the upgrade) reads right;
- newer: refused, naming the release that writes it (``RELEASES``) and what to do.

The workspace itself records its format in ``workspace.json``. Opening a workspace of an older format
(:func:`open_workspace`, from :meth:`mlrunway.local.workspace.Workspace.at`) rewrites every state file in the
current format once, under the workspace's lock and, per file, under the lock its own writers hold; one of a
newer format is refused before anything reads it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mlrunway.compat import renamed_kind
from mlrunway.errors import MlrunwayError

KEY = "format_version"
FORMAT = 1  # the format this mlrunway writes; files without KEY are format 0
RELEASES = {0: "0.1.0", 1: "0.2.0"}  # the first mlrunway release that writes each format
OLDEST = 0  # the oldest format this mlrunway migrates; an older one names the release that can (RELEASES)
MARKER = "workspace.json"
STATE_FILES = ("job.json", "status.json", "cancel_requested.json", "outcome.json", "sweep.json", "model.json",
               "endpoint.json", "lease.json", "provision.json")
RELEASE = RELEASES[FORMAT]


class WorkspaceFormatError(MlrunwayError):
    """A state file or workspace this mlrunway cannot read: written by a newer release, or too old to migrate."""


def _sampler_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A sweep recorded before sampler versions drew with version 1 (issue 28) and keeps drawing with it."""
    return {**data, "sampler_version": data.get("sampler_version", 1)}


def _type_not_kind(data: dict[str, Any]) -> dict[str, Any]:
    """A job recorded before its specs took azure-ai-ml's word (issue 30) names a distribution's, a search
    expression's and a policy's type ``kind`` (:mod:`mlrunway.compat`)."""
    data = dict(data)
    spec = data.get("spec")
    if isinstance(spec, dict) and "distribution" in spec:
        data["spec"] = {**spec, "distribution": renamed_kind(spec["distribution"])}
    sweep = data.get("sweep")
    if isinstance(sweep, dict):
        sweep = {**sweep}
        if "early_termination" in sweep:
            sweep["early_termination"] = renamed_kind(sweep["early_termination"])
        if isinstance(sweep.get("search_space"), dict):
            sweep["search_space"] = {name: renamed_kind(e) for name, e in sweep["search_space"].items()}
        if isinstance(sweep.get("trial"), dict) and "distribution" in sweep["trial"]:
            sweep["trial"] = {**sweep["trial"], "distribution": renamed_kind(sweep["trial"]["distribution"])}
        data["sweep"] = sweep
    return data


# (file name, from format) -> the data in the next format. A file name absent for a step changed no shape.
MIGRATIONS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("sweep.json", 0): _sampler_v1,
    ("job.json", 0): _type_not_kind,
}


def newer_error(path: Path | str, found: int) -> WorkspaceFormatError:
    writer = f"mlrunway {RELEASES[found]}" if found in RELEASES else "a newer mlrunway"
    return WorkspaceFormatError(
        f"{path}: {KEY} {found} is written by {writer} or later; this mlrunway ({RELEASE}) reads {KEY} {FORMAT} and "
        "older: upgrade mlrunway wherever this workspace is used (the Airflow scheduler and workers, "
        "`python -m mlrunway.local`), or open it with the release that wrote it")


def current(path: Path | str, data: Any) -> Any:
    """``data`` read from the state file ``path``, in the current format and without ``KEY``."""
    if not isinstance(data, dict):
        return data
    found = data.pop(KEY, 0)
    if not isinstance(found, int) or found > FORMAT:
        raise newer_error(path, found if isinstance(found, int) else FORMAT + 1)
    if found < OLDEST:
        raise WorkspaceFormatError(f"{path}: {KEY} {found} is older than this mlrunway ({RELEASE}) migrates; open "
                                   f"the workspace once with mlrunway {RELEASES[OLDEST]}, which migrates it, then "
                                   "with this one")
    name = Path(path).name
    for version in range(found, FORMAT):
        step = MIGRATIONS.get((name, version))
        if step is not None:
            data = step(data)
    return data


def stamped(data: Any) -> Any:
    """``data`` as a state file holds it: a dict gets this format's ``KEY``."""
    return {**data, KEY: FORMAT} if isinstance(data, dict) else data


def workspace_format(root: Path) -> int | None:
    """The format ``root`` records; None for a folder without a marker (new, or written by 0.1.0)."""
    try:
        found = json.loads((root / MARKER).read_text())[KEY]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WorkspaceFormatError(f"{root / MARKER}: unreadable ({exc}); it records the workspace's format: "
                                   "restore it, or remove it to have the workspace migrated again") from exc
    if not isinstance(found, int):
        raise WorkspaceFormatError(f"{root / MARKER}: {KEY} {found!r} is not a format number")
    return found


def open_workspace(root: Path) -> None:
    """Check ``root``'s format; migrate a workspace of an older one once, under its lock; refuse a newer one."""
    found = workspace_format(root)
    if found == FORMAT:
        return
    if found is not None and found > FORMAT:
        raise newer_error(root / MARKER, found)
    from mlrunway.local.files import write_json
    from mlrunway.locks import locked

    with locked(root / ".workspace.lock"):
        if workspace_format(root) == FORMAT:  # another process migrated it meanwhile
            return
        migrated = migrate(root)
        write_json(root / MARKER, {"mlrunway": RELEASE, "migrated_files": migrated, "at": time.time()})


def state_files(root: Path) -> Iterator[tuple[Path, Path]]:
    """Every state file of the workspace at ``root``, with the lock its writers hold."""
    for job in _dirs(root / "jobs"):
        for name in ("job.json", "status.json", "cancel_requested.json"):
            yield job / name, job / ".status.lock"
        yield job / "outputs" / "sweep.json", job / ".status.lock"
    for model in _dirs(root / "models"):
        for version in _dirs(model):
            yield version / "model.json", model / ".lock"
    for endpoint in _dirs(root / "endpoints"):
        yield endpoint / "endpoint.json", endpoint / ".state.lock"
        yield endpoint / "lease.json", endpoint / ".lease.lock"
        for deployment in _dirs(endpoint / "deployments"):
            yield deployment / "provision.json", endpoint / ".state.lock"


def migrate(root: Path) -> int:
    """Rewrite every state file under ``root`` that is of an older format in the current one; how many were.
    (``outcome.json``, written in place into reserved bytes, is migrated as it is read.)"""
    from mlrunway.local.files import write_json
    from mlrunway.locks import locked

    count = 0
    for path, lock in state_files(root):
        if not path.exists():
            continue
        with locked(lock):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # gone meanwhile, or torn: its reader says so, as before
            if isinstance(data, dict) and data.get(KEY) != FORMAT:
                write_json(path, current(path, data))
                count += 1
    return count


def _dirs(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
