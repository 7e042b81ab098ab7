"""The Ray backend's model registry: MLflow's Model Registry on the connection's MLflow tracking server.

A registration uploads the model's files as the ``model`` artifacts of a run of its own (experiment
``mlrunway-models``, run name the model's, tagged ``mlrunway.model``), with an ``MLmodel`` for ONNX, and makes them
the next version of the registered model. The server keeps the files (``--artifacts-destination``) and numbers the
versions; a version's tags, properties, format and archived mark are its MLflow tags
(:func:`mlrunway.tracking_names.mlflow_tags`, the names the local backend's mirror writes), its aliases MLflow's own.
A version's ``path`` is ``models:/<name>/<version>``, which MLflow's ``download_artifacts`` takes.
"""

from __future__ import annotations

import builtins
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlrunway import check
from mlrunway.backend.protocol import Models
from mlrunway.backend.types import ModelVersion
from mlrunway.errors import MlrunwayError, NotFound
from mlrunway.ray.tracking import answered, client
from mlrunway.tracking_names import ARCHIVED_TAG, FORMAT_TAG, PROPERTY_TAG, from_tags, mlflow_tags, write_onnx_mlmodel

if TYPE_CHECKING:
    from mlflow.entities.model_registry import ModelVersion as MlflowVersion
    from mlflow.tracking import MlflowClient

__all__ = ["EXPERIMENT", "MODEL_TAG", "RayModels"]

log = logging.getLogger(__name__)

EXPERIMENT = "mlrunway-models"  # the experiment of the runs that upload the versions' files
MODEL_TAG = "mlrunway.model"  # an upload run's: the model it registered a version of
ARTIFACT_PATH = "model"  # the version's files, under its upload run's artifacts
GONE = ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")  # MLflow's answers for a model, version, alias absent


class RayModels(Models):
    """The models of one MLflow server. A server that does not answer is Unavailable, naming its address.

    :param tracking_uri: the MLflow server (tracking and registry), e.g. ``http://10.0.0.5:5000``.
    :param storage: the folder every node shares; an ONNX version's ``MLmodel`` is written there before its upload.
    :cvar ready_timeout_s: how long a registration waits for MLflow to mark the new version READY.
    """

    ready_timeout_s: float = 300.0

    def __init__(self, tracking_uri: str, storage: Path) -> None:
        self.uri, self.storage = tracking_uri, Path(storage)

    @property
    def client(self) -> MlflowClient:
        return client(self.uri)

    def register(
        self, name: str, path: str | Path, *, base: str | Path | None = None, format: str = "custom",
        tags: dict[str, str] | None = None, properties: dict[str, Any] | None = None, description: str = "",
    ) -> ModelVersion:
        """Upload ``path`` (a file or folder; inside ``base`` when given) as the next version of ``name``."""
        source = check.inside(base, path) if base is not None else check.inside(
            Path(path).resolve().parent, Path(path).name)
        tags = {k: str(v) for k, v in (tags or {}).items()}
        _own_tags(tags, "model.tags")
        version_tags = mlflow_tags(ModelVersion(name=name, version=0, path="", format=format, tags=tags,
                                                properties=dict(properties or {})))  # a bad property: before any upload
        run_id, artifact_uri = self._upload(name, source, format)
        self._ensure_registered(name)
        created = self._call("create a model version", self.client.create_model_version, name,
                             f"{artifact_uri}/{ARTIFACT_PATH}", run_id=run_id, tags=version_tags,
                             description=description or None, await_creation_for=0)
        model = self._record(self._ready(created))
        log.info("Model %s:%s registered from %s on %s", name, model.version, source, self.uri)
        return model

    def get(self, name: str, version: int | str | None = None) -> ModelVersion:
        """One version, or the latest one not archived when ``version`` is None or 'latest'."""
        if version is None or version == "latest":
            live = [m for m in self.list(name) if not m.archived]
            if not live:
                raise NotFound(f"model {name!r} has no version that is not archived on the MLflow server at {self.uri}")
            return live[-1]
        return self._record(self._version(name, check.model_version("model.version", version)))

    def list(self, name: str | None = None) -> builtins.list[ModelVersion]:
        if name is None:
            names = sorted(m.name for m in self._pages("list models", self.client.search_registered_models))
            return [m for each in names for m in self.list(each)]
        found = self._pages("list model versions", self.client.search_model_versions, f"name = '{name}'")
        return sorted((self._record(v) for v in found), key=lambda m: m.version)

    def download(self, name: str, version: int | str | None, dest: str | Path) -> Path:
        """Copy a version's files into ``dest`` (the files themselves, as the local registry gives them)."""
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        model = self.get(name, version)
        uri = self._call("read a version's location", self.client.get_model_version_download_uri, name,
                         str(model.version))
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        repository = get_artifact_repository(uri, tracking_uri=self.uri, registry_uri=self.uri)
        self._call("download a version's files", repository.download_artifacts, "", str(dest))
        return dest

    def archive(self, name: str, version: int) -> ModelVersion:
        """Hide a version from 'latest' (Azure's archive); its files stay."""
        model = self.get(name, version)
        self._call("archive a version", self.client.set_model_version_tag, name, str(model.version), ARCHIVED_TAG,
                   "true")
        return self.get(name, model.version)

    def update_tags(self, name: str, version: int, tags: dict[str, str | None]) -> ModelVersion:
        """Set (or, with None, remove) tags of a version: tags are mutable, a version's files never are."""
        model = self.get(name, version)
        _own_tags(tags, "model.tags")
        for key, value in tags.items():
            if value is None:  # MLflow answers a removal of a tag the version lacks with success
                self._call("remove a tag", self.client.delete_model_version_tag, name, str(model.version), key)
            else:
                self._call("set a tag", self.client.set_model_version_tag, name, str(model.version), key, str(value))
        return self.get(name, model.version)

    def set_alias(self, name: str, version: int, alias: str) -> None:
        """Give ``alias`` to one version of ``name`` in MLflow's registry, which takes it from any other at once."""
        model = self.get(name, version)
        self._call("set an alias", self.client.set_registered_model_alias, name, alias, str(model.version))

    def alias(self, name: str, alias: str) -> ModelVersion | None:
        """The version of ``name`` holding ``alias`` in MLflow's registry; None when none does (or no such model)."""
        from mlflow.exceptions import MlflowException

        try:
            holder = self._call("read an alias", self.client.get_model_version_by_alias, name, alias)
        except MlflowException as exc:
            if exc.error_code in GONE:
                return None
            raise
        return self._record(holder)

    def _call(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return answered(self.uri, what, call, *args, **kwargs)

    def _pages(self, what: str, search: Callable[..., Any], *args: Any) -> Iterator[Any]:
        token = None
        while True:
            page = self._call(what, search, *args, page_token=token)
            yield from page
            token = page.token
            if not token:
                return

    def _version(self, name: str, version: int) -> MlflowVersion:
        from mlflow.exceptions import MlflowException

        try:
            return self._call("read a version", self.client.get_model_version, name, str(version))
        except MlflowException as exc:
            if exc.error_code not in GONE:
                raise
        have = [m.version for m in self.list(name)]
        raise NotFound(f"model {name!r} has no version {version} on the MLflow server at {self.uri}; "
                       f"it has {have or 'none'}")

    def _record(self, version: MlflowVersion) -> ModelVersion:
        tags, properties, format, archived = from_tags(dict(version.tags or {}))
        return ModelVersion(name=version.name, version=int(version.version), path=f"models:/{version.name}/"
                            f"{version.version}", format=format, tags=tags, properties=properties,
                            description=version.description or "", created=(version.creation_timestamp or 0) / 1000,
                            archived=archived)

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        found = self._call("read an experiment", self.client.get_experiment_by_name, EXPERIMENT)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self._call("create an experiment", self.client.create_experiment, EXPERIMENT))
        except MlflowException:  # another registration created it first
            return str(self._call("read an experiment", self.client.get_experiment_by_name, EXPERIMENT).experiment_id)

    def _upload(self, name: str, source: Path, format: str) -> tuple[str, str]:
        """Upload ``source`` as the ``model`` artifacts of a new run (an ``MLmodel`` beside it for ONNX); (run id,
        the run's artifact URI). The run ends FINISHED, or FAILED when the upload did not complete."""
        run = self._call("create a run", self.client.create_run, self._experiment_id(), run_name=name,
                         tags={MODEL_TAG: name})
        run_id = run.info.run_id
        try:
            if source.is_dir():
                self._call("upload a model's files", self.client.log_artifacts, run_id, str(source), ARTIFACT_PATH)
            else:
                self._call("upload a model's file", self.client.log_artifact, run_id, str(source), ARTIFACT_PATH)
            if format == "onnx":
                with tempfile.TemporaryDirectory(dir=self.storage, prefix=".mlmodel.") as staging:
                    if write_onnx_mlmodel(source, Path(staging)):
                        self._call("upload an MLmodel", self.client.log_artifact, run_id,
                                   str(Path(staging) / "MLmodel"), ARTIFACT_PATH)
        except BaseException:
            self._end(run_id, "FAILED")
            raise
        self._end(run_id, "FINISHED")
        return run_id, run.info.artifact_uri

    def _end(self, run_id: str, status: str) -> None:
        try:
            self._call("end a run", self.client.set_terminated, run_id, status)
        except Exception as exc:  # noqa: BLE001 - a run left RUNNING is cosmetic; the upload's outcome is what counts
            log.warning("Upload run %s on %s not ended %s: %s", run_id, self.uri, status, exc)

    def _ensure_registered(self, name: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self._call("create a registered model", self.client.create_registered_model, name)
        except MlflowException as exc:  # the usual case after the first version, or a concurrent first one
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise

    def _ready(self, version: MlflowVersion) -> MlflowVersion:
        """Poll ``version`` until MLflow marks it READY (at once on a plain server); raise if it failed or stayed
        pending past :attr:`ready_timeout_s`."""
        deadline = time.monotonic() + self.ready_timeout_s
        while version.status != "READY":
            where = f"model {version.name}: version {version.version} on the MLflow server at {self.uri}"
            if version.status == "FAILED_REGISTRATION":
                raise MlrunwayError(f"{where} failed to register: {version.status_message}; register it again")
            if time.monotonic() > deadline:
                raise MlrunwayError(f"{where} is still {version.status} after {self.ready_timeout_s:g} s; see the "
                                    "server's log, then register it again")
            time.sleep(0.5)
            version = self._call("read a version", self.client.get_model_version, version.name, version.version)
        return version


def _own_tags(tags: dict[str, Any], field_name: str) -> None:
    """Refuse a tag that would overwrite what mlrunway keeps in tags (the format, a property, the archived mark)."""
    for key in tags:
        if key in (FORMAT_TAG, ARCHIVED_TAG) or key.startswith(PROPERTY_TAG.format("")):
            raise check.fail(f"{field_name}.{key}", "is a tag mlrunway keeps the version's format, properties or "
                             "archived mark in", "give the tag another name (properties go in properties)")
