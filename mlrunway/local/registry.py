"""The local model registry: named models with versions 1, 2, 3..., each an immutable copy of its files.

``models/<name>/<version>/`` holds ``files/`` (read-only copies), ``model.json`` (format, tags, properties such
as the source job and its metric) and ``mlflow/`` (the files, hard-linked, with an ``MLmodel`` where MLflow can
load the format). A version is built aside and renamed into place under the model's lock, so concurrent
registrations get distinct versions and a reader never sees half a copy; under the same lock it becomes MLflow's
model version of the same number in the workspace's store (:mod:`mlrunway.local.mlflow_registry`), where the
``production`` and ``previous`` aliases live.
"""

from __future__ import annotations

import builtins
import errno
import json
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.protocol import Models
from mlrunway.backend.types import ModelVersion
from mlrunway.errors import MlrunwayError, NotFound
from mlrunway.local import mlflow_registry
from mlrunway.local.files import no_space, write_json
from mlrunway.local.records import read_version
from mlrunway.local.workspace import Workspace
from mlrunway.locks import locked

log = logging.getLogger(__name__)

ALIAS_LOG = "aliases.jsonl"  # models/<name>/: every alias given, {"alias", "version", "at"} a line (prune reads it)


resolve_inside = check.inside  # its old address


class LocalModels(Models):
    """The registry of one workspace. Reads (``get``, ``list``, ``download``) never import MLflow (an endpoint's
    start reads a version); writes and aliases go through MLflow too, which first mirrors what it lacks."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self._synced: set[str] = set()

    def register(
        self, name: str, path: str | Path, *, base: str | Path | None = None, format: str = "custom",
        tags: dict[str, str] | None = None, properties: dict[str, Any] | None = None, description: str = "",
    ) -> ModelVersion:
        """Copy ``path`` (a file or folder; inside ``base`` when given) as the next version of ``name``."""
        source = resolve_inside(base, path) if base is not None else resolve_inside(Path(path).resolve().parent, Path(path).name)
        folder = self.workspace.model_dir(name)
        staging = _copied(name, source, folder)
        try:
            with locked(folder / ".lock"):
                self._sync(name, force=True)  # MLflow holds every earlier version: its next number is ours
                version = max(self._versions(name), default=0) + 1
                model = ModelVersion(
                    name=name, version=version, path=str(folder / str(version) / "files"), format=format,
                    tags={k: str(v) for k, v in (tags or {}).items()}, properties=dict(properties or {}),
                    description=description, created=time.time(),
                )
                write_json(staging / "model.json", model.to_dict())
                staging.rename(folder / str(version))
                self._mirror(model, lambda: mlflow_registry.create_version(self.workspace, model, folder / str(version)))
        except BaseException as exc:  # no half-made version is left to fill the disk further
            full = _out_of_room(exc, name, source, folder)
            shutil.rmtree(staging, ignore_errors=True)
            if full is None:
                raise
            raise full from exc
        return model

    def get(self, name: str, version: int | str | None = None) -> ModelVersion:
        """One version, or the latest one not archived when ``version`` is None or 'latest'."""
        versions = self._versions(name)
        if version is not None and version != "latest":
            version = check.model_version("model.version", version)
        if version is None or version == "latest":
            read = [self._read(name, v) for v in versions]
            live = [m.version for m in read if not m.archived and not m.damaged]
            if not live:
                damaged = "".join(f"; {m.error}" for m in read if m.damaged)
                raise NotFound(f"model {name!r} has no version in workspace {self.workspace.root}{damaged}")
            version = live[-1]
        if int(version) not in versions:
            raise NotFound(f"model {name!r} has no version {version}; it has {versions or 'none'}")
        return self._read(name, int(version))

    def list(self, name: str | None = None) -> builtins.list[ModelVersion]:
        if not self.workspace.models.exists():
            return []
        names = [name] if name else sorted(p.name for p in self.workspace.models.iterdir() if p.is_dir())
        return [self._read(n, v) for n in names for v in self._versions(n)]

    def download(self, name: str, version: int | str | None, dest: str | Path) -> Path:
        """Copy a version's files into ``dest`` (writable copies); return ``dest``."""
        model = usable(self.get(name, version))
        dest = Path(dest)
        shutil.copytree(model.path, dest, dirs_exist_ok=True, copy_function=shutil.copyfile)
        return dest

    def archive(self, name: str, version: int) -> ModelVersion:
        """Hide a version from 'latest' (Azure's archive); its files stay."""
        model = usable(self.get(name, version))
        folder = self.workspace.model_dir(name) / str(model.version)
        with locked(self.workspace.model_dir(name) / ".lock"):
            self._sync(name)
            write_json(folder / "model.json", {**model.to_dict(), "archived": True})
            archived = self._read(name, model.version)
            self._mirror(archived, lambda: mlflow_registry.update_tags(self.workspace, archived))
        return archived

    def update_tags(self, name: str, version: int, tags: dict[str, str | None]) -> ModelVersion:
        """Set (or, with None, remove) tags of a version: tags are mutable, as on Azure; files never are."""
        model = usable(self.get(name, version))
        with locked(self.workspace.model_dir(name) / ".lock"):
            self._sync(name)
            merged = {**self._read(name, model.version).tags, **{k: v for k, v in tags.items() if v is not None}}
            removed = {k for k, v in tags.items() if v is None}
            for key in removed:
                merged.pop(key, None)
            write_json(self.workspace.model_dir(name) / str(model.version) / "model.json",
                       {**self._read(name, model.version).to_dict(), "tags": merged})
            updated = self._read(name, model.version)
            self._mirror(updated, lambda: mlflow_registry.update_tags(self.workspace, updated, removed))
        return updated

    def set_alias(self, name: str, version: int, alias: str) -> None:
        """Give ``alias`` to one version of ``name`` in MLflow's registry, which takes it from any other at once."""
        model = self.get(name, version)
        with locked(self.workspace.model_dir(name) / ".lock"):
            self._sync(name)
            mlflow_registry.client(self.workspace).set_registered_model_alias(name, alias, str(model.version))
            with open(self.workspace.model_dir(name) / ALIAS_LOG, "a") as history:
                history.write(json.dumps({"alias": alias, "version": model.version, "at": time.time()}) + "\n")

    def alias(self, name: str, alias: str) -> ModelVersion | None:
        """The version of ``name`` holding ``alias`` in MLflow's registry; None when none does."""
        from mlflow.exceptions import MlflowException

        if not self._versions(name):
            return None
        if name not in self._synced:
            with locked(self.workspace.model_dir(name) / ".lock"):
                self._sync(name)
        try:
            holder = mlflow_registry.client(self.workspace).get_model_version_by_alias(name, alias)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None
            raise
        return self._read(name, int(holder.version))

    def sync(self, name: str | None = None) -> None:
        """Mirror ``name`` (every model when None) into MLflow's registry now: what the first write or alias
        read of a model does by itself (a workspace written before the mirror; a registration cut short)."""
        names = [name] if name else sorted(p.name for p in self.workspace.models.glob("*") if p.is_dir())
        for each in names:
            with locked(self.workspace.model_dir(each) / ".lock"):
                self._sync(each, force=True)

    def _sync(self, name: str, *, force: bool = False) -> None:
        """:func:`mlflow_registry.sync` once per model and instance (each write mirrors itself), or ``force``d;
        the caller holds the model's lock."""
        if force or name not in self._synced:
            mlflow_registry.sync(self.workspace, name, self._versions(name))
            self._synced.add(name)

    def _mirror(self, model: ModelVersion, write: Callable[[], None]) -> None:
        """Write ``model``'s change to MLflow; on failure (a full disk) the folder, already written, stays the
        record and the next use of the model repairs MLflow (:meth:`_sync`)."""
        try:
            write()
        except Exception as exc:  # noqa: BLE001 - any failure leaves the same repairable state
            self._synced.discard(model.name)
            log.warning("Model %s:%s: MLflow's registry not updated (%s); the next use of the model repairs it",
                        model.name, model.version, exc)

    def _versions(self, name: str) -> builtins.list[int]:
        folder = self.workspace.model_dir(name)
        if not folder.is_dir():
            return []
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())

    def _read(self, name: str, version: int) -> ModelVersion:
        return read_version(self.workspace.model_dir(name) / str(version), name, version)


def usable(model: ModelVersion) -> ModelVersion:
    """``model``, unless its record is damaged: then the error naming the file (nothing is served from it or
    written over it)."""
    if model.damaged:
        raise MlrunwayError(model.error)
    return model


def _copied(name: str, source: Path, folder: Path) -> Path:
    """Copy ``source`` into a new folder in ``folder`` (the model's), read-only, as the version to be; return it. A
    copy that fails leaves nothing behind, and says so when a full filesystem, or one out of inodes, is why
    (:func:`_out_of_room`)."""
    staging: Path | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder, prefix=".new."))
        files = staging / "files"
        if source.is_dir():
            shutil.copytree(source, files, symlinks=False)
        else:
            files.mkdir()
            shutil.copy2(source, files / source.name)
        _make_read_only(files)
        return staging
    except BaseException as exc:
        full = _out_of_room(exc, name, source, folder)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if full is None:
            raise
        raise full from exc


def _out_of_room(exc: BaseException, name: str, source: Path, folder: Path) -> OSError | None:
    """The error to raise when a full filesystem is why ``exc`` was (a copy of a folder raises a ``shutil.Error``
    listing every file it could not copy, which names no cause); None for any other failure. Read before the half
    copy is removed: it may hold the last inodes."""
    full = no_space(exc, folder) if isinstance(exc, OSError) else None
    if full is None:
        return None
    return OSError(errno.ENOSPC, f"model {name}: {source} could not be registered: {full}; free space there and "
                                 "register it again")


def _make_read_only(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for filename in filenames:
            path = Path(dirpath) / filename
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
