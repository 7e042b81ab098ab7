"""The ``Backend`` protocol: jobs, models and endpoints, grouped by resource as ``MLClient`` is.

Every backend (``local``, ``azure``, the shipped :class:`~mlrunway.backend.fake.FakeBackend`) satisfies it
under mypy, and the core, the operators and the triggers take it, never a concrete backend. What only some
backends can do is a capability (:class:`Capabilities`), never a ``getattr`` probe or a branch on the kind.
Records that cross it are in :mod:`mlrunway.backend.types`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mlrunway.backend.types import (
    DeploymentInfo,
    DeploymentMetrics,
    DeploymentSettings,
    EndpointInfo,
    EndpointSettings,
    JobInfo,
    ModelVersion,
    SweepResult,
)
from mlrunway.specs.job import CommandJobSpec
from mlrunway.specs.sweep import SweepSpec


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What a backend can do beyond the protocol's common ground.

    :param artifacts: ``jobs.log_artifacts`` keeps files with a job's run (local MLflow); else it raises
        NotSupportedOnBackend and the files stay where they were written.
    :param studio: ``Backend.link`` returns a page of the backend's own UI (Azure ML studio); else the UI
        plugin's own pages (MLflow run, endpoint) stand in for it.
    :param poll_interval_s: how often a waiter asks for a status when its task does not say: seconds for a
        local process, tens of seconds on a cloud whose reads count against a rate limit.
    :param rollout: a stable endpoint's staged rollout works here: ``endpoints.deployment_metrics`` and the
        rollout lease; else they raise NotSupportedOnBackend.
    :param metrics_lag_s: how long after a second its requests show in ``deployment_metrics``.
    :param rollout_window_s: a staged rollout's default window: seconds where metrics are per second (local),
        minutes where they are per minute (Azure Monitor).
    """

    artifacts: bool = False
    studio: bool = False
    poll_interval_s: float = 2.0
    rollout: bool = False
    metrics_lag_s: float = 2.0
    rollout_window_s: float = 30.0


class Jobs(Protocol):
    """Named command jobs and sweeps. ``submit`` under a name that exists returns that job (idempotent)."""

    def validate(self, spec: CommandJobSpec) -> None:
        """Raise SpecError for what of ``spec`` this backend cannot run (an unknown compute), before any job."""
        ...
    def submit(self, name: str, spec: CommandJobSpec) -> JobInfo: ...
    def submit_sweep(self, name: str, sweep: SweepSpec) -> JobInfo: ...
    def get(self, name: str) -> JobInfo: ...
    def list(self, prefix: str = "") -> list[JobInfo]: ...
    def cancel(self, name: str, reason: str = "canceled by user") -> JobInfo: ...
    def wait(self, name: str, *, timeout: float | None = None, poll_s: float = 1.0,
             on_poll: Callable[[JobInfo], None] | None = None) -> JobInfo: ...
    def logs(self, name: str) -> Iterable[str]: ...
    def metrics(self, name: str) -> dict[str, float]: ...
    def metric_history(self, name: str, metric: str) -> tuple[float, ...]: ...
    def params(self, name: str) -> dict[str, Any]: ...
    def sweep_result(self, name: str) -> SweepResult: ...
    def recover(self, name: str) -> JobInfo:
        """Restart what of the job died, where the backend can (local: a sweep's controller); else ``get``.
        Waiting tasks call it on every poll; a read never does."""
        ...
    def log_artifacts(self, name: str, folder: str | Path, artifact_path: str) -> None: ...


class Models(Protocol):
    """The model registry: versions 1, 2, 3... of each name, immutable once registered."""

    def register(self, name: str, path: str | Path, *, base: str | Path | None = None, format: str = "custom",
                 tags: dict[str, str] | None = None, properties: dict[str, Any] | None = None,
                 description: str = "") -> ModelVersion: ...
    def get(self, name: str, version: int | str | None = None) -> ModelVersion: ...
    def list(self, name: str | None = None) -> list[ModelVersion]: ...
    def download(self, name: str, version: int | str | None, dest: str | Path) -> Path: ...
    def archive(self, name: str, version: int) -> ModelVersion: ...
    def update_tags(self, name: str, version: int, tags: dict[str, str | None]) -> ModelVersion:
        """Set tags of a version; a None value removes the tag. Tags are mutable, a version's files are not."""
        ...


class Endpoints(Protocol):
    """Online endpoints (key or token auth), their deployments and traffic. ``begin_*`` return without waiting."""

    def begin_create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo: ...
    def create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo: ...
    def get(self, name: str) -> EndpointInfo: ...
    def get_keys(self, name: str) -> dict[str, str]:
        """Key auth: ``primary`` and ``secondary``; token auth (Azure's AMLToken, AADToken): ``token``,
        ``token_type`` and ``expires`` (epoch seconds)."""
        ...
    def delete(self, name: str) -> bool: ...
    def begin_create_or_update_deployment(self, endpoint: str, name: str,
                                          settings: DeploymentSettings) -> DeploymentInfo: ...
    def create_or_update_deployment(self, endpoint: str, name: str, settings: DeploymentSettings, *,
                                    timeout_s: float = 3600.0) -> DeploymentInfo: ...
    def get_deployment(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo: ...
    def list_deployments(self, endpoint: str) -> list[DeploymentInfo]: ...
    def delete_deployment(self, endpoint: str, name: str) -> bool: ...
    def set_traffic(self, endpoint: str, traffic: dict[str, int],
                    mirror_traffic: dict[str, int] | None = None) -> EndpointInfo:
        """Live traffic weights (summing to 100, or 0) and, when given, mirror traffic (a copy of live requests
        to one deployment with no traffic, at most 50%; its answers are discarded)."""
        ...
    def deployment_metrics(self, endpoint: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
        """What the deployment served over [start, end) (seconds since the epoch)."""
        ...
    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """Take or renew the endpoint's rollout lease for ``holder``: None, or who else holds it."""
        ...
    def release(self, endpoint: str, holder: str) -> None: ...
    def get_logs(self, endpoint: str, deployment: str, lines: int = 100) -> str: ...
    def invoke(self, endpoint: str, request_file: str | Path | None = None, *, payload: Any = None,
               deployment: str | None = None) -> str: ...


class Backend(Protocol):
    """One workspace's jobs, models and endpoints, and where a job's outputs and a resource's page are."""

    @property
    def kind(self) -> str: ...
    @property
    def capabilities(self) -> Capabilities: ...
    @property
    def jobs(self) -> Jobs: ...
    @property
    def models(self) -> Models: ...
    @property
    def endpoints(self) -> Endpoints: ...

    def job_outputs(self, job_name: str) -> str:
        """Where a job's ``./outputs`` files are: a folder, or a URI the backend's registry takes as ``base``."""
        ...

    def named_output(self, job_name: str, output: str) -> str:
        """Where a job's named output ``${{outputs.<output>}}`` is: a folder, or a URI the registry takes."""
        ...

    def output_folder(self, base: str, path: str) -> AbstractContextManager[Path]:
        """The files under ``base``/``path`` (a job's outputs, as ``job_outputs`` or ``named_output`` gives
        ``base``) as a folder of this machine while the context lasts: the folder itself, or a download."""
        ...

    def link(self, kind: str, name: str, version: int | str | None = None) -> str | None:
        """The backend's own page of a job, sweep, model or endpoint; None where it has none."""
        ...

    @property
    def reports(self) -> Path:
        """The folder, on the machine Airflow runs on, where this backend's run reports are saved and read."""
        ...


@runtime_checkable
class Leftovers(Protocol):
    """A backend whose jobs and endpoints are processes of this machine (local): what of them still runs."""

    def leftovers(self) -> list[str]:
        """One line per live process of the backend (a job's supervisor or script, a sweep's controller, an
        endpoint's server): after a cleanup, none."""
        ...
