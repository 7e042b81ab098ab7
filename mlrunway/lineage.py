"""Lineage names: what each task reads and makes, as OpenLineage datasets named the same on every backend.

A dataset is a (namespace, name) pair. The same thing is named the same wherever it is read or made, so the
events of one run connect: the sweep that makes ``jobs/<sweep>`` and the pick that reads it; the model version
that pick registers and export reads. Nothing here imports Airflow or OpenLineage
(:mod:`mlrunway.airflow.lineage` turns these into OpenLineage's datasets).

=====================  ==============================================  =========================================
what                   namespace                                       name
=====================  ==============================================  =========================================
a job, a sweep         the backend's (below)                           ``jobs/<job>`` (the attempt that ran)
a model version        the backend's                                   ``models/<name>/versions/<version>``
an endpoint            the backend's                                   ``endpoints/<endpoint>``
its deployment         the backend's                                   ``endpoints/<endpoint>/deployments/<d>``
a local path           ``file://<host>`` (OpenLineage's file rule)     the absolute path, no trailing ``/``
a URI                  ``<scheme>://<authority>``                      its path, no leading ``/``
an ``azureml://`` URI  the workspace's, then ``/datastores/<store>``    the path in the datastore
a data asset           the backend's                                   ``data/<name>/versions/<version>``
the code snapshot      ``file://<host>``                               the code folder; ``version``: its hash
=====================  ==============================================  =========================================

The backend's namespace: ``mlrunway-local://<host><workspace root>`` locally,
``azureml://subscriptions/<sub>/resourceGroups/<rg>/workspaces/<ws>`` on Azure ML (:func:`namespace_of`).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from mlrunway.backend.snapshot import snapshot_files

if TYPE_CHECKING:
    from mlrunway.backend.protocol import Backend
    from mlrunway.specs.job import CommandJobSpec

__all__ = ["LineageDataset", "azure_namespace", "code_snapshot", "command_job_inputs", "data", "deployment", "endpoint",
           "inputs_of", "job", "local_namespace", "local_path", "model_version", "namespace_of", "snapshot_hash"]

_AZUREML_FULL = re.compile(r"^azureml://subscriptions/(?P<sub>[^/]+)/resource[gG]roups/(?P<rg>[^/]+)/"
                           r"(?:workspaces|providers/Microsoft\.MachineLearningServices/workspaces)/(?P<ws>[^/]+)/"
                           r"datastores/(?P<store>[^/]+)/paths/(?P<path>.*)$")
_AZUREML_SHORT = re.compile(r"^azureml://datastores/(?P<store>[^/]+)/paths/(?P<path>.*)$")
_DATA_ASSET = re.compile(r"^(?:azureml:)?(?P<name>[A-Za-z0-9_.-]+)(?:[:@](?P<version>[A-Za-z0-9_.-]+))$")


@dataclass(frozen=True, kw_only=True)
class LineageDataset:
    """One dataset of the lineage graph; ``version`` is a content version (the code snapshot's hash)."""

    namespace: str
    name: str
    version: str | None = None


def host() -> str:
    """This machine's name, as the ``file`` namespace carries it."""
    return socket.gethostname()


# -- the backends' namespaces ------------------------------------------------------------------------
def local_namespace(hostname: str, workspace_root: str | Path) -> str:
    """The local backend's namespace: its workspace on this machine (``mlrunway-local://host/abs/path``)."""
    return f"mlrunway-local://{hostname}{_absolute(workspace_root)}"


def azure_namespace(subscription_id: str, resource_group: str, workspace: str) -> str:
    """An Azure ML workspace's namespace, as its ``azureml://`` URIs start."""
    return f"azureml://subscriptions/{subscription_id}/resourceGroups/{resource_group}/workspaces/{workspace}"


def namespace_of(backend: Backend) -> str:
    """The backend's own namespace (its ``lineage_namespace``, :class:`~mlrunway.backend.protocol.Lineage`);
    for a backend that does not say, ``mlrunway-<kind>://<host>``."""
    from mlrunway.backend.protocol import Lineage

    if isinstance(backend, Lineage):
        return backend.lineage_namespace
    return f"mlrunway-{backend.kind}://{host()}"


# -- what the backends hold --------------------------------------------------------------------------
def job(namespace: str, name: str) -> LineageDataset:
    """A job or a sweep run (the attempt that ran: ``<job>-a2`` after a retry)."""
    return LineageDataset(namespace=namespace, name=f"jobs/{name}")


def model_version(namespace: str, name: str, version: int | str) -> LineageDataset:
    """One registered version of a model (the picked one, its ONNX export)."""
    return LineageDataset(namespace=namespace, name=f"models/{name}/versions/{int(version)}")


def endpoint(namespace: str, name: str) -> LineageDataset:
    return LineageDataset(namespace=namespace, name=f"endpoints/{name}")


def deployment(namespace: str, endpoint_name: str, name: str) -> LineageDataset:
    return LineageDataset(namespace=namespace, name=f"endpoints/{endpoint_name}/deployments/{name}")


# -- data and code -----------------------------------------------------------------------------------
def data(path: str, workspace_namespace: str, hostname: str | None = None) -> LineageDataset:
    """A job's data input (``uri_folder``/``uri_file``), by what its path is: a local path (OpenLineage's file
    rule), an ``azureml://`` datastore URI (under the workspace's namespace), another URI, or a data asset
    (``name:version``, ``azureml:name:version``, ``name@latest``)."""
    text = str(path).strip()
    if m := _AZUREML_FULL.match(text):
        ns = azure_namespace(m["sub"], m["rg"], m["ws"])
        return LineageDataset(namespace=f"{ns}/datastores/{m['store']}", name=m["path"].strip("/"))
    if m := _AZUREML_SHORT.match(text):
        return LineageDataset(namespace=f"{workspace_namespace}/datastores/{m['store']}", name=m["path"].strip("/"))
    if text.startswith("file://"):
        parts = urlsplit(text)
        return local_path(parts.path, parts.netloc or hostname)
    if "://" in text:
        parts = urlsplit(text)
        return LineageDataset(namespace=f"{parts.scheme}://{parts.netloc}", name=parts.path.strip("/"))
    if (m := _DATA_ASSET.match(text)) and "/" not in text and not Path(text).expanduser().exists():
        return LineageDataset(namespace=workspace_namespace, name=f"data/{m['name']}/versions/{m['version']}")
    return local_path(text, hostname)


def local_path(path: str | Path, hostname: str | None = None) -> LineageDataset:
    """A path of this machine: namespace ``file://<host>``, name the absolute path."""
    return LineageDataset(namespace=f"file://{hostname or host()}", name=_absolute(path))


def code_snapshot(code: str | Path, hostname: str | None = None, *,
                  exclude: Iterable[str | Path] = ()) -> LineageDataset:
    """The job's code folder, versioned by the hash of its snapshot (:func:`snapshot_hash`)."""
    return LineageDataset(namespace=f"file://{hostname or host()}", name=_absolute(code),
                          version=snapshot_hash(code, exclude=exclude))


def snapshot_hash(code: str | Path, *, exclude: Iterable[str | Path] = ()) -> str:
    """The SHA-256 of the code snapshot: the files a job gets (:func:`~mlrunway.backend.snapshot.snapshot_files`,
    Azure ML's ignore rules), each as its relative path and its bytes (a link as its target), in a stable order.
    The same files give the same hash on any machine and under any folder name."""
    root = Path(code)
    digest = hashlib.sha256()
    for relative in snapshot_files(root, exclude=exclude):
        file = root / relative
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(os.readlink(file).encode() if file.is_symlink() else file.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def inputs_of(inputs: Mapping[str, Any], workspace_namespace: str, hostname: str | None = None) -> list[LineageDataset]:
    """The data inputs among a job's ``inputs``: those with a ``path`` (literals are parameters, not data)."""
    paths = (getattr(value, "path", None) for value in inputs.values())
    return [data(path, workspace_namespace, hostname) for path in paths if isinstance(path, str) and path]


def command_job_inputs(spec: CommandJobSpec, workspace_namespace: str, hostname: str | None = None) -> list[LineageDataset]:
    """What a command job (or each trial of a sweep) reads: its data inputs, then its code snapshot."""
    return [*inputs_of(spec.inputs, workspace_namespace, hostname), code_snapshot(spec.code, hostname)]


def _absolute(path: str | Path) -> str:
    text = os.path.abspath(os.path.expanduser(str(path)))
    return text.rstrip("/") or "/"
