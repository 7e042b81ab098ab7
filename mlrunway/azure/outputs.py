"""Where a job's outputs are on Azure ML, and how they come down to this machine.

``output_folder`` and ``output_files`` hold the private imports of azure-ai-ml's artifact download and existence
check: the SDK has no public call that downloads a datastore path (``jobs.download`` takes a job's named outputs,
``models.download`` a model), and these are the functions ``models.download`` and the SDK's own input checks use,
with the same credentials and datastores.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["job_outputs", "named_output", "output_exists", "output_files", "output_folder"]


def job_outputs(job_name: str) -> str:
    """Where a job's ``./outputs`` files are: the artifact store's own path. A model registered from it
    downloads whether or not the service rewrites the URI (``azureml://jobs/<name>/outputs/artifacts/...``
    would be read back as a datastore named ``artifacts`` if the service kept it)."""
    return f"azureml://datastores/workspaceartifactstore/paths/ExperimentRun/dcid.{job_name}/outputs/"


def named_output(job_name: str, output: str, datastore: str = "workspaceblobstore", recorded: str | None = None) -> str:
    """Where a job's named output is: the URI the service recorded for it (an ``azureml://datastores/...`` path,
    whichever datastore it names), else its default place, ``azureml/<job>/<output>/`` in ``datastore`` (the
    workspace's default datastore, where the service writes an output that names none)."""
    if recorded and recorded.startswith("azureml://datastores/") and "${{" not in recorded:
        return recorded.rstrip("/") + "/"
    return f"azureml://datastores/{datastore}/paths/azureml/{job_name}/{output}/"


@contextmanager
def output_folder(datastores: Any, cache_dir: Path, base: str, path: str) -> Iterator[Path]:
    """A job's outputs downloaded from their datastore into a scratch folder of ``cache_dir`` for the context
    (through the SDK's own artifact download, the one ``models.download`` uses), then removed.

    :param datastores: the workspace's ``MLClient.datastores``.
    """
    # private: the SDK's only download of a datastore path (see the module's docstring)
    from azure.ai.ml._artifacts._artifact_utilities import download_artifact_from_aml_uri

    with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
        download_artifact_from_aml_uri(_under(base, path) + "/", scratch, datastores)
        yield Path(scratch)


def _under(base: str, path: str, name: str = "") -> str:
    return "/".join(part.strip("/") for part in (base.rstrip("/"), path, name) if part.strip("/"))


@contextmanager
def output_files(datastores: Any, cache_dir: Path, base: str, path: str, names: Sequence[str]) -> Iterator[Path]:
    """Those of ``names`` (files under ``base``/``path``, by their relative paths) that exist, downloaded one by one into a scratch
    folder of ``cache_dir`` for the context: a model check reads its signature, never the model."""
    from azure.ai.ml._artifacts._artifact_utilities import download_artifact_from_aml_uri

    with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
        for name in names:  # a file's download lands in the folder given, under its own name: keep its subfolder
            (Path(scratch) / name).parent.mkdir(parents=True, exist_ok=True)
            download_artifact_from_aml_uri(_under(base, path, name), str((Path(scratch) / name).parent), datastores)
        yield Path(scratch)


def output_exists(datastores: Any, base: str, path: str, name: str) -> bool:
    """Whether the file ``name`` is under ``base``/``path`` (one existence check, no download)."""
    from azure.ai.ml._artifacts._artifact_utilities import aml_datastore_path_exists

    return bool(aml_datastore_path_exists(_under(base, path, name), datastores))
