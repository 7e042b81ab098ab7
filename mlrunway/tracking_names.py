"""The names mlrunway gives things in MLflow, whatever the store: the local backend's SQLite store and folder
registry (:mod:`mlrunway.local`) and the Ray backend's MLflow server (:mod:`mlrunway.ray`) write and read the same
tags, so a run or a model version reads the same on either. What is store-specific (the local store's SQL, its
folder registry) stays in its backend.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a job's supervisor imports this module for its run's tags: nothing heavier at run time
    from pathlib import Path

    from mlrunway.backend.types import ModelVersion

__all__ = ["ARCHIVED_TAG", "FORMAT_TAG", "JOB_TAG", "OURS", "PARENT_TAG", "PROPERTY_TAG", "RUN_NAME_TAG", "RUN_STATUS",
           "STORE", "from_tags", "mlflow_tags", "run_tags",
           "write_onnx_mlmodel"]

JOB_TAG = "mlrunway.job"  # a run's: the job it is the run of (the newest run so tagged, when a retry made two)
RUN_NAME_TAG = "mlflow.runName"
PARENT_TAG = "mlflow.parentRunId"  # a trial's run, nested under its sweep's
RUN_STATUS = {"Completed": "FINISHED", "Failed": "FAILED", "Canceled": "KILLED"}  # a job's end, as its run's

STORE = "model-registry"  # the versions' folder in MLflow's artifact store
PROPERTY_TAG = "mlrunway.property.{}"
FORMAT_TAG = "mlrunway.format"
ARCHIVED_TAG = "mlrunway.archived"
OURS = "mlrunway."  # tags under this prefix are mlrunway's to remove; others may be a person's, set in MLflow's UI


def run_tags(job_name: str, parent_run_id: str | None) -> dict[str, str]:
    """The tags of a job's run when it is created."""
    tags = {RUN_NAME_TAG: job_name, JOB_TAG: job_name}
    if parent_run_id:
        tags[PARENT_TAG] = parent_run_id
    return tags


def mlflow_tags(model: ModelVersion) -> dict[str, str]:
    """The MLflow tags of a version: its tags, its properties (JSON for what is not text), format, archived."""
    from mlrunway.backend.protocol import Models

    tags = {k: v for k, v in model.tags.items() if not k.startswith(Models.ALIAS_TAG.format(""))}
    for key, value in model.properties.items():
        tags[PROPERTY_TAG.format(key)] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    tags[FORMAT_TAG] = model.format
    if model.archived:
        tags[ARCHIVED_TAG] = "true"
    return tags


def from_tags(tags: dict[str, str]) -> tuple[dict[str, str], dict[str, object], str, bool]:
    """A version's tags, properties, format and archived flag, from its MLflow tags (:func:`mlflow_tags` reversed;
    a property that is not JSON is its text)."""
    own: dict[str, str] = {}
    properties: dict[str, object] = {}
    prefix = PROPERTY_TAG.format("")
    for key, value in tags.items():
        if key.startswith(prefix):
            try:
                properties[key.removeprefix(prefix)] = json.loads(value)
            except ValueError:
                properties[key.removeprefix(prefix)] = value
        elif key not in (FORMAT_TAG, ARCHIVED_TAG):
            own[key] = value
    return own, properties, tags.get(FORMAT_TAG, "custom"), tags.get(ARCHIVED_TAG) == "true"


def write_onnx_mlmodel(source: Path, into: Path) -> bool:
    """Write into ``into`` the ``MLmodel`` ``mlflow.onnx.save_model`` writes (onnx and python_function flavors) for
    the one top-level ``.onnx`` file of ``source`` (a folder, or the file itself), which MLflow's ONNX loader wants
    beside ``MLmodel``. None there: no MLmodel, and False (said as a warning)."""
    import logging
    from importlib import metadata

    from mlflow import pyfunc
    from mlflow.models import Model

    files = sorted(source.iterdir()) if source.is_dir() else [source]
    found = [p.name for p in files if p.suffix == ".onnx" and p.is_file()]
    if len(found) != 1:
        logging.getLogger(__name__).warning("ONNX model at %s has %s top-level .onnx files; no MLmodel written, so MLflow cannot load it",
                    source, len(found) or "no")
        return False
    try:
        onnx_version: str | None = metadata.version("onnx")
    except metadata.PackageNotFoundError:  # an Airflow worker without the onnx extra: MLflow's loader needs none
        onnx_version = None
    model = Model()
    pyfunc.add_to_model(model, loader_module="mlflow.onnx", data=found[0])
    model.add_flavor("onnx", onnx_version=onnx_version, data=found[0], providers=["CPUExecutionProvider"], code=None)
    model.save(str(into / "MLmodel"))
    return True
