"""What the workspace's records must hold, checked where they are read: a record that parses but is of the wrong
shape reads as damaged, naming the file and the fix, and never stops the readers of the records beside it."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from mlrunway.backend.types import ModelVersion
from mlrunway.local.files import read_json

__all__ = ["read_version"]

_FIELDS = {f.name: f for f in fields(ModelVersion) if f.name not in ("damaged", "error")}


def read_version(folder: Path, name: str, version: int) -> ModelVersion:
    """A version's ``model.json``, checked against the record's fields; one that does not parse or is of the wrong
    shape reads as a damaged version naming the file and the fix (listed, never served), never an exception that
    stops every reader of the model."""
    record = folder / "model.json"
    try:
        data = read_json(record)
        problem = None if isinstance(data, dict) else f"holds {type(data).__name__}, not an object"
        problem = problem or next((f"has {key!r}, no field of a model version" for key in data if key not in _FIELDS),
                                  None)
        problem = problem or next((f"has no {key!r}" for key in ("name", "version", "path") if key not in data), None)
        if problem is None:
            model = ModelVersion(**data)
            if not isinstance(model.version, int) or not isinstance(model.tags, dict):
                problem = "its version or tags are of the wrong type"
            elif (model.name, model.version) != (name, version):
                problem = f"names {model.name}:{model.version}, in the folder of {name}:{version}"
            else:
                return model
    except (OSError, ValueError) as exc:
        problem = f"cannot be read ({type(exc).__name__}: {exc})"
    return ModelVersion(name=name, version=version, path=str(folder / "files"), damaged=True,
                        error=f"damaged record {record}: {problem}; restore it or delete {folder}")
