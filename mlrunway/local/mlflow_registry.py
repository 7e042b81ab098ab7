"""The local registry's mirror in MLflow's Model Registry: every version of ``models/<name>/`` is also MLflow's
model version of the same number, in the workspace's own store, so ``mlflow server``/``mlflow ui`` over the
workspace shows the registered models and ``models:/<name>@production`` loads.

The folder stays the record of a version's files and metadata (``model.json``); MLflow holds its mirror (tags,
properties as ``mlrunway.property.<key>`` tags, the source job's run) and is the only record of aliases. A version's
files are copied into MLflow's artifact store, the workspace's ``artifacts/`` (where its runs' artifacts are), at
``artifacts/model-registry/<name>/<version>/``, read-only as the version's own ``files/``, with an ``MLmodel`` for
formats MLflow can load (ONNX); that copy is the MLflow version's ``source``. A version mirrored by mlrunway 0.1's
first registry format (before this copy) keeps its ``source``, its hard-linked ``mlflow/`` folder beside it.

:func:`sync` brings MLflow up to the folder under the model's lock: versions missing in MLflow are created in
order (a workspace written before the mirror existed, or a registration cut short between its rename and MLflow),
tags repaired, and the old alias tags (``mlrunway.alias.<alias>``) turned into MLflow aliases.
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlrunway.backend.protocol import Models
from mlrunway.backend.types import ModelVersion
from mlrunway.errors import MlrunwayError
from mlrunway.local import tracking
from mlrunway.local.files import read_json, write_json
from mlrunway.local.records import read_version
from mlrunway.local.workspace import Workspace
from mlrunway.tracking_names import OURS, STORE, mlflow_tags, write_onnx_mlmodel

if TYPE_CHECKING:
    from mlflow.entities.model_registry import ModelVersion as MlflowVersion
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)



class RegistryMismatch(MlrunwayError):
    """MLflow's model versions and the workspace's folder disagree in a way the mirror cannot repair alone."""


@functools.cache
def client(workspace: Workspace) -> MlflowClient:
    """An MlflowClient whose tracking and registry are both the workspace's store (never a registry an
    environment variable names), creating the store the first time."""
    from mlflow.tracking import MlflowClient

    tracking.client(workspace)  # creates the store under its lock, in WAL mode
    return MlflowClient(workspace.tracking_uri, registry_uri=workspace.tracking_uri)


def artifact_dir(workspace: Workspace, name: str, version: int) -> Path:
    """Where a version's copy lives in MLflow's artifact store (the workspace's experiments' artifact location)."""
    return tracking.artifact_root(workspace) / STORE / name / str(version)


def publish(files: Path, target: Path, format: str) -> None:
    """Copy ``files`` into ``target`` in MLflow's artifact store, with an ``MLmodel`` when MLflow has a flavor for
    ``format``: built aside and renamed into place (a crash leaves a ``.new.*`` folder, removed by the next call); a
    copy already there is kept (versions are immutable)."""
    if target.is_dir():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".new.{target.name}.*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".new.{target.name}."))
    try:
        shutil.copytree(files, staging, dirs_exist_ok=True)  # copy2: the files stay read-only
        if format == "onnx":
            write_onnx_mlmodel(staging, staging)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def run_id_of(workspace: Workspace, model: ModelVersion) -> str | None:
    """The MLflow run a version came from: its ``source_job``'s run; for an export, its ``source_model``'s."""
    job = model.properties.get("source_job")
    if isinstance(job, str) and (run_id := tracking.run_of_job(workspace, job)):
        return run_id
    source = model.properties.get("source_model")
    if isinstance(source, str) and ":" in source:
        name, _, version = source.rpartition(":")
        if version.isdigit():
            found = {int(v.version): v for v in _versions(client(workspace), name)}.get(int(version))
            return found.run_id if found and found.run_id else None
    return None


def create_version(workspace: Workspace, model: ModelVersion, version_dir: Path) -> None:
    """Create ``model`` in MLflow as version ``model.version`` of ``model.name``; the caller holds the model's lock
    and has made every earlier version. Raises :class:`RegistryMismatch` when MLflow numbers it otherwise."""
    from mlflow.exceptions import MlflowException

    mlflow = client(workspace)
    try:
        mlflow.get_registered_model(model.name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        mlflow.create_registered_model(model.name)
    copy = artifact_dir(workspace, model.name, model.version)
    publish(version_dir / "files", copy, model.format)
    created = mlflow.create_model_version(model.name, copy.as_uri(), run_id=run_id_of(workspace, model),
                                          tags=mlflow_tags(model), description=model.description or None)
    if int(created.version) != model.version:
        raise RegistryMismatch(
            f"model {model.name}: MLflow numbered version {model.version} as {created.version} in "
            f"{workspace.tracking_uri}; a version was deleted or added in MLflow alone: restore the workspace's "
            "mlflow.db, or delete the registered model in MLflow so the next use mirrors every version again")


def update_tags(workspace: Workspace, model: ModelVersion, removed: set[str] | None = None) -> None:
    """Bring one version's MLflow tags to :func:`mlflow_tags` (removing ``removed`` and stale ``mlrunway.`` tags)."""
    mlflow = client(workspace)
    current = dict(mlflow.get_model_version(model.name, str(model.version)).tags)
    _repair(mlflow, model, current, removed or set())


def _repair(mlflow: MlflowClient, model: ModelVersion, current: dict[str, str], removed: set[str]) -> None:
    wanted = mlflow_tags(model)
    for key, value in wanted.items():
        if current.get(key) != value:
            mlflow.set_model_version_tag(model.name, str(model.version), key, value)
    for key in current:
        if key not in wanted and (key in removed or key.startswith(OURS)):
            mlflow.delete_model_version_tag(model.name, str(model.version), key)


def _versions(mlflow: MlflowClient, name: str) -> list[MlflowVersion]:
    return list(mlflow.search_model_versions(f"name = '{name}'"))


def sync(workspace: Workspace, name: str, versions: list[int]) -> None:
    """Mirror every version of ``name`` (the folder's ``versions``, ascending) into MLflow, repair their tags, and
    turn old alias tags into MLflow aliases (removing the tags). Idempotent; the caller holds the model's lock."""
    mlflow = client(workspace)
    mirrored = {int(v.version): v for v in _versions(mlflow, name)}
    if extra := sorted(set(mirrored) - set(versions)):
        raise RegistryMismatch(f"model {name}: MLflow has versions {extra} that {workspace.models / name} lacks; "
                               "restore the folder, or delete those versions in MLflow")
    aliases: dict[str, tuple[str, int]] = {}  # alias: (when, version), the newest holder's, as the tag default reads
    tagged = set()
    for version in versions:
        folder = workspace.models / name / str(version)
        model = read_version(folder, name, version)
        if model.damaged:  # nothing to mirror from it; the next version is numbered past it all the same
            log.warning("Model %s:%s not mirrored in MLflow: %s", name, version, model.error)
            continue
        for key, when in model.tags.items():
            alias = key.removeprefix(Models.ALIAS_TAG.format(""))
            if alias != key:
                tagged.add(version)
                if alias not in aliases or when > aliases[alias][0]:
                    aliases[alias] = (when, version)
        if version in mirrored:
            _repair(mlflow, model, dict(mirrored[version].tags), set())
            continue
        create_version(workspace, model, folder)
        log.info("Model %s:%s mirrored in MLflow's registry (%s)", name, version, workspace.tracking_uri)
    for alias, (_when, version) in aliases.items():
        mlflow.set_registered_model_alias(name, alias, str(version))
    for version in tagged:
        _drop_alias_tags(workspace.models / name / str(version) / "model.json")


def delete_version(workspace: Workspace, name: str, version: int) -> None:
    """Remove ``name``'s ``version`` from MLflow's registry and its copy in the artifact store (the folder goes
    next: the caller holds the model's lock and removes it after, so an interrupted prune mirrors it again)."""
    from mlflow.exceptions import MlflowException

    try:
        client(workspace).delete_model_version(name, str(version))
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    copy = artifact_dir(workspace, name, version)
    if copy.exists():
        for path in (copy, *copy.rglob("*")):
            path.chmod(path.stat().st_mode | 0o700 if path.is_dir() else path.stat().st_mode | 0o600)
        shutil.rmtree(copy)


def _drop_alias_tags(path: Path) -> None:
    """Remove the old alias tags once MLflow holds the aliases (they would name a holder no one updates)."""
    data: dict[str, Any] = read_json(path)
    prefix = Models.ALIAS_TAG.format("")
    write_json(path, {**data, "tags": {k: v for k, v in data["tags"].items() if not k.startswith(prefix)}})
