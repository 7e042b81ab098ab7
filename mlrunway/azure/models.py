"""Registered models on Azure ML, through the SDK's ``models`` operations.

A version's ``format`` and properties are kept in the model's properties (JSON where they are not strings);
its tags are the one mutable part of a version (``update_tags``).
"""

from __future__ import annotations

import builtins
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from azure.ai.ml import MLClient
from azure.ai.ml.constants import ListViewType
from azure.ai.ml.entities import Model
from azure.ai.ml.exceptions import ValidationErrorType, ValidationException
from azure.core.exceptions import ResourceNotFoundError

from mlrunway import check
from mlrunway.azure.writes import transient_reads
from mlrunway.backend.protocol import Models
from mlrunway.backend.types import ModelVersion
from mlrunway.errors import NotFound

__all__ = ["AzureModels"]


class AzureModels(Models):
    """:param ml: the workspace's ``MLClient``.
    :param cache_dir: where a download is unpacked before it is handed over.
    """

    def __init__(self, ml: MLClient, cache_dir: Path) -> None:
        self.ml, self.cache_dir = ml, cache_dir

    def _record(self, model: Any) -> ModelVersion:
        properties = {k: _maybe_json(v) for k, v in (model.properties or {}).items()}
        return ModelVersion(name=model.name, version=int(model.version), path=model.path, format=model.type,
                            tags=dict(model.tags or {}), properties=properties, description=model.description or "")
    def register(self, name: str, path: str | Path, *, base: str | Path | None = None, format: str = "custom",
                 tags: dict[str, str] | None = None, properties: dict[str, Any] | None = None,
                 description: str = "") -> ModelVersion:
        """Register the next version of ``name``: job outputs by their ``azureml://`` URI, local files by upload."""
        if isinstance(base, str) and base.startswith("azureml://"):
            source = f"{base.rstrip('/')}/{path}"
        else:
            source = str(Path(base, path) if base is not None else Path(path))
            if not Path(source).exists():
                raise check.fail("model.path", f"{source} does not exist", "pass the model's file or folder")
        # Archived versions keep their numbers: count them too (the service lists active ones by default).
        try:
            versions = [int(m.version) for m in self.ml.models.list(name, list_view_type=ListViewType.ALL)]
        except ResourceNotFoundError:
            versions = []
        model = Model(name=name, version=str(max(versions, default=0) + 1), path=source, type="custom_model",
                      tags=dict(tags or {}), description=description,
                      properties={"format": format, **{k: v if isinstance(v, str) else json.dumps(v)
                                                       for k, v in (properties or {}).items()}})
        return self._record(self.ml.models.create_or_update(model))

    @transient_reads
    def get(self, name: str, version: int | str | None = None) -> ModelVersion:
        try:
            if version in (None, "latest"):
                return self._record(self.ml.models.get(name, label="latest"))
            return self._record(self.ml.models.get(name, str(version)))
        except ResourceNotFoundError as exc:
            raise NotFound(f"model {name}:{version} does not exist in workspace {self.ml.workspace_name}") from exc
        except ValidationException as exc:  # the SDK's answer for the latest version of a model with none
            if exc.error_type is not ValidationErrorType.RESOURCE_NOT_FOUND:
                raise
            raise NotFound(f"model {name}:{version} does not exist in workspace {self.ml.workspace_name}") from exc

    def list(self, name: str | None = None) -> builtins.list[ModelVersion]:
        """Every version, archived ones too (as the other backends list them and as ``register`` numbers them), by
        name, then version. With no name, every model's: the SDK lists the models (one entry each, archived ones too),
        then each one's versions."""
        if name is not None:
            return self._versions(name)
        models = self.ml.models.list(list_view_type=ListViewType.ALL)
        return [m for model in sorted({m.name for m in models}) for m in self._versions(model)]

    def _versions(self, name: str) -> builtins.list[ModelVersion]:
        try:
            found = self.ml.models.list(name, list_view_type=ListViewType.ALL)
            return sorted((self._record(m) for m in found), key=lambda m: m.version)
        except ResourceNotFoundError:  # no such model (or it went between the two lists)
            return []

    def download(self, name: str, version: int | str | None, dest: str | Path) -> Path:
        """The version's files in ``dest`` (the SDK downloads them under ``<dest>/<name>/``)."""
        model = self.get(name, version)
        dest = Path(dest)
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as scratch:
            self.ml.models.download(name, str(model.version), download_path=scratch)
            root = Path(scratch) / name
            files = [p for p in root.rglob("*") if p.is_file()]
            if not files:
                raise NotFound(f"model {name}:{model.version}: no files at {model.path}")
            # A folder model comes down as <name>/<folder>/...: hand over the folder's contents.
            entries = list(root.iterdir())
            top = entries[0] if len(entries) == 1 and entries[0].is_dir() else root
            shutil.copytree(top, dest, dirs_exist_ok=True)
        return dest

    def update_tags(self, name: str, version: int, tags: dict[str, str | None]) -> ModelVersion:
        """Tags of a registered version are mutable on Azure ML: the version is sent again with its new tags."""
        try:
            model = self.ml.models.get(name, str(version))
        except ResourceNotFoundError as exc:
            raise NotFound(f"model {name}:{version} does not exist") from exc
        model.tags = {k: v for k, v in {**(model.tags or {}), **tags}.items() if v is not None}
        return self._record(self.ml.models.create_or_update(model))

    def archive(self, name: str, version: int) -> ModelVersion:
        try:
            self.ml.models.archive(name, str(version))
        except ResourceNotFoundError as exc:
            raise NotFound(f"model {name}:{version} does not exist") from exc
        return self.get(name, version)


def _maybe_json(value: str) -> Any:
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value
