"""The Ray backend: jobs on a Ray cluster through its Jobs API, runs and models on an MLflow server, every record on
a folder the cluster's nodes and Airflow share. Chosen by an ``mlrunway_ray`` connection
(:class:`~mlrunway.ray.connection.RayConnection`); the Airflow side imports no ``ray``."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrunway.backend.protocol import (
    Artifacts,
    Backend,
    Capabilities,
    Lineage,
    Metered,
    MeteredEndpoints,
    Priced,
    Rollout,
    RunMetrics,
    Shadow,
)
from mlrunway.backend.rates import RateCard
from mlrunway.ray.connection import RayConnection
from mlrunway.ray.endpoints import RayEndpoints
from mlrunway.ray.jobs import RayJobs
from mlrunway.ray.models import RayModels

__all__ = ["RayBackend"]


@dataclass
class RayBackend:
    """One namespace of one Ray cluster, with its MLflow server and shared storage."""

    connection: RayConnection
    jobs: RayJobs = field(init=False)
    models: RayModels = field(init=False)
    endpoints: RayEndpoints = field(init=False)
    kind: str = "ray"
    # metrics_lag_s: the server's workers append their counts every 0.25 s to the shared storage, read as they land
    # on one machine; an NFS mount's attribute cache can hold a change back by its actimeo (mount the storage with
    # actimeo=1 or less for rollouts: docs/how-to/ray.md).
    capabilities: Capabilities = Capabilities(poll_interval_s=2.0, transient_outage_s=120.0, job_environments=False,
                                              metrics_lag_s=2.0)
    endpoint_salt: str = ""

    def __post_init__(self) -> None:
        self.models = RayModels(self.connection.tracking_uri, Path(self.connection.storage))
        self.jobs = RayJobs(self.connection, models=self.models)
        self.endpoints = RayEndpoints(self.connection, self.jobs)

    @classmethod
    def from_connection(cls, fields: dict[str, Any], secret: str | None = None) -> RayBackend:
        """The backend an ``mlrunway_ray`` connection names (:meth:`RayConnection.parse`); nothing is reached yet."""
        return cls(RayConnection.parse(fields, secret))

    def job_outputs(self, job_name: str) -> str:
        return self.jobs.get(job_name).outputs or ""

    def named_output(self, job_name: str, output: str) -> str:
        return str(Path(self.job_outputs(job_name)) / output)

    def output_folder(self, base: str, path: str) -> AbstractContextManager[Path]:
        """A job's outputs are folders of the shared storage, which this machine mounts at the same path."""
        return nullcontext(Path(base, path))

    @property
    def reports(self) -> Path:
        return Path(self.connection.storage) / self.connection.namespace / "reports"

    def rates_for(self, sizes: Iterable[str]) -> RateCard:
        """The connection's card: per_hour by profile name."""
        return self.connection.rates

    @property
    def lineage_namespace(self) -> str:
        """The cluster's Jobs API and this Airflow's namespace on it."""
        return f"mlrunway-ray://{self.connection.address.split('://', 1)[1]}/{self.connection.namespace}"


def _satisfies_protocol(backend: RayBackend) -> tuple[Backend, Lineage, Artifacts, Metered, Priced, RunMetrics,
                                                      MeteredEndpoints, Rollout, Shadow]:
    """mypy proves here that RayBackend is a ``Backend`` with ``Lineage``, that its jobs keep artifacts, take
    metrics and are ``Metered``, that it prices its jobs (``Priced``) and its endpoints say what they serve on, report
    per-second metrics with a lease (``Rollout``) and keep mirrored answers (``Shadow``)."""
    return (backend, backend, backend.jobs, backend.jobs, backend, backend.jobs, backend.endpoints, backend.endpoints,
            backend.endpoints)

