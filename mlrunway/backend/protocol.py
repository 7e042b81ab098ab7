"""The backend contract: per resource a small required core and the conveniences written once over it, optional
parts as capability protocols, and the ``Backend`` that holds them (MLflow's ``AbstractStore`` is the model).

- :class:`Jobs`, :class:`Models` and :class:`Endpoints` are abstract base classes, grouped by resource as
  ``MLClient`` is: their abstract methods are what a backend writes (:data:`REQUIRED` counts them); the rest is
  written here once over those, each with a documented default a backend may override (``wait`` polls
  ``recover``; ``create_or_update`` waits on ``begin_create_or_update``; aliases are tags).
- What only some backends can do is a capability protocol, asked with ``isinstance``, never a probe of the
  backend's kind: :class:`Artifacts` (jobs keep files with their run), :class:`Rollout` (a deployment's served
  metrics and the endpoint's rollout lease), :class:`Studio` (pages of the backend's own UI), :class:`Leftovers`
  (what of it still runs on this machine), :class:`Lineage` (the namespace its lineage datasets are named in),
  :class:`Metered` (what its jobs ran on and how long, for their cost), :class:`Priced` (its connection's rate
  card), :class:`StopRecords` (a sweep's budget decision recorded on the sweep).

Every backend (``local``, ``azure``, the shipped :class:`~mlrunway.backend.fake.FakeBackend`) satisfies it under
mypy, and the core, the operators and the triggers take it, never a concrete backend. Records that cross it are
in :mod:`mlrunway.backend.types`.
"""

from __future__ import annotations

import abc
import builtins
import functools
import inspect
import math
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mlrunway import check
from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import (
    DeploymentInfo,
    DeploymentMetrics,
    DeploymentSettings,
    EndpointInfo,
    EndpointSettings,
    JobInfo,
    MirroredAnswer,
    ModelVersion,
    ProvisioningState,
    SweepResult,
    Usage,
)
from mlrunway.backend.waiting import Outage, wait_provisioned
from mlrunway.errors import EndpointError, JobTimedOut, NotFound, NotSupportedOnBackend, Unavailable
from mlrunway.specs.job import CommandJobSpec
from mlrunway.specs.sweep import SweepSpec

__all__ = ["REQUIRED", "Artifacts", "Backend", "Capabilities", "Endpoints", "Jobs", "Leftovers", "Lineage", "Metered",
           "MeteredEndpoints", "Models", "Priced", "Rollout", "RunMetrics", "StopRecords", "Studio", "rollout_of"]


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """How a backend's time runs: its polls and its metrics' delay.

    :param poll_interval_s: how often a waiter asks for a status when its task does not say: seconds for a
        local process, tens of seconds on a cloud whose reads count against a rate limit.
    :param metrics_lag_s: how long after a second its requests show in ``deployment_metrics`` (:class:`Rollout`).
    :param rollout_window_s: a staged rollout's default window: seconds where metrics are per second (local),
        minutes where they are per minute (Azure Monitor).
    :param metrics_period_s: the grain of ``deployment_metrics``: a rollout's watch looks at most once per period
        (a quarter second where metrics are per second; a minute on Azure Monitor, whose frequent reads ARM
        throttles).
    :param transient_outage_s: how long a wait rides out reads that bring no news (``Unavailable``: a service
        briefly away) before it gives up on the watch (the work may still run; a retry re-attaches). 0: at once
        (a local backend raises no Unavailable).
    :param trainer_torch: the torch its jobs train with, where mlrunway knows it (the export job must load theirs).
    :param job_environments: whether each job runs in an environment it names (Azure ML); False: every job runs in
        the backend's own Python (the local backend), so what a job lacks is installed there.
    :param endpoints: why the backend has no online endpoints, where it has none (a backend built in parts): a run's
        preflight says it as a warning, the deploy task refuses at its start (NotSupportedOnBackend, not retried)
        and cleanup finds none. None: it has them.
    """

    poll_interval_s: float = 2.0
    metrics_lag_s: float = 2.0
    rollout_window_s: float = 30.0
    metrics_period_s: float = 0.25
    transient_outage_s: float = 0.0
    trainer_torch: str | None = None
    job_environments: bool = True
    endpoints: str | None = None


class _NamesChecked:
    """Every public method a backend's jobs, models or endpoints define checks the names it is given before it acts
    (a name becomes a folder, a URL path, a key): ``get("../../other/jobs/victim")`` is refused naming the field,
    never read. Declared once here for every backend, the shipped ones and a team's own: each subclass's public
    methods are wrapped as the class is made, by the name of their parameters (:meth:`name_checks`)."""

    @classmethod
    def name_checks(cls, parameters: builtins.list[str]) -> dict[str, Callable[[str], str]]:
        """The check of each of ``parameters`` (a method's) that holds a name."""
        return {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for attr, method in builtins.list(vars(cls).items()):
            if attr.startswith("_") or not inspect.isfunction(method) or hasattr(method, "__names_checked__"):
                continue
            checks = cls.name_checks(builtins.list(inspect.signature(method).parameters))
            if checks:
                setattr(cls, attr, _checking(method, checks))


def _checking(method: Callable[..., Any], checks: dict[str, Callable[[str], str]]) -> Callable[..., Any]:
    signature = inspect.signature(method)

    @functools.wraps(method)
    def checked(*args: Any, **kwargs: Any) -> Any:
        given = signature.bind_partial(*args, **kwargs).arguments
        for parameter, check_name in checks.items():
            if given.get(parameter) is not None:  # an optional name left out (a deployment, a model filter)
                check_name(given[parameter])
        return method(*args, **kwargs)

    checked.__names_checked__ = True  # type: ignore[attr-defined]
    return checked


class Jobs(_NamesChecked, abc.ABC):
    """Named command jobs and sweeps. ``submit`` under a name that exists returns that job (idempotent).

    :cvar wait_poll_s: ``wait``'s default time between two polls.
    """

    @classmethod
    def name_checks(cls, parameters: builtins.list[str]) -> dict[str, Callable[[str], str]]:
        return {p: functools.partial(check.job_name, "job.name") for p in parameters if p in ("name", "job_name")}

    wait_poll_s: float = 1.0

    @abc.abstractmethod
    def submit(self, name: str, spec: CommandJobSpec) -> JobInfo: ...
    @abc.abstractmethod
    def submit_sweep(self, name: str, sweep: SweepSpec) -> JobInfo: ...
    @abc.abstractmethod
    def get(self, name: str) -> JobInfo: ...
    @abc.abstractmethod
    def list(self, prefix: str = "") -> builtins.list[JobInfo]:
        """The jobs whose names start with ``prefix`` (all by default), in name order."""
    @abc.abstractmethod
    def cancel(self, name: str, reason: str = "canceled by user") -> JobInfo:
        """Stop the job and return its info once it has ended; a job already ended is left as it is (its info)."""
    @abc.abstractmethod
    def logs(self, name: str) -> Iterable[str]:
        """What the job printed so far, a line each (no line ends), where the backend keeps it (the fake keeps none)."""
    @abc.abstractmethod
    def metrics(self, name: str) -> dict[str, float]: ...
    @abc.abstractmethod
    def metric_history(self, name: str, metric: str) -> tuple[float, ...]: ...
    @abc.abstractmethod
    def params(self, name: str) -> dict[str, Any]: ...
    @abc.abstractmethod
    def sweep_result(self, name: str) -> SweepResult:
        """Sweep ``name``'s record so far: its trials in trial index order (the order they were sampled), the best
        by its objective once chosen; NotFound where no job has the name, SpecError where the job is not a sweep."""

    def validate(self, spec: CommandJobSpec) -> None:
        """Raise SpecError for what of ``spec`` this backend cannot run (an unknown compute), before any job.
        Default: nothing beyond the spec's own checks."""
        return None

    def recover(self, name: str) -> JobInfo:
        """Restart what of the job died, where the backend can (local: a sweep's controller). Waiting tasks call
        it on every poll; a read never does. Default: ``get``."""
        return self.get(name)

    def wait(self, name: str, *, timeout: float | None = None, poll_s: float | None = None,
             on_poll: Callable[[JobInfo], None] | None = None, outage_s: float = 0.0,
             backend: str = "remote") -> JobInfo:
        """Block until the job is terminal; past ``timeout`` seconds cancel it and raise JobTimedOut. Each poll is
        ``recover`` (the waiter restarts what of its own job died), then ``on_poll``; between two, ``pause``. A poll
        that brings no news (Unavailable) is read again for up to ``outage_s`` (the backend's
        ``transient_outage_s``; :class:`~mlrunway.backend.waiting.Outage`), then WatchLost naming the ``backend``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        outage = Outage(f"job {name}", backend, outage_s)
        while True:
            try:
                info = self.recover(name)
                if on_poll is not None:  # its reads (a sweep's budget look) ride out an outage as the poll's do
                    on_poll(info)
            except Unavailable as exc:  # as a trigger: up to the bound, and never past the deadline
                time.sleep(outage.failed(exc, math.inf if deadline is None else deadline - time.monotonic()))
                continue
            outage.read()
            if info.status.is_terminal():
                return info
            if deadline is not None and time.monotonic() > deadline:
                self.cancel(name, reason=f"wait timed out after {timeout:g} s")
                raise JobTimedOut(f"job {name}: still {info.status.value} after {timeout:g} s; it was canceled")
            self.pause(name, self.wait_poll_s if poll_s is None else poll_s)

    def pause(self, name: str, seconds: float) -> None:
        """``wait``'s sleep between two polls of ``name``; a backend may end it early when it sees the job change."""
        time.sleep(seconds)


class Models(_NamesChecked, abc.ABC):
    """The model registry: versions 1, 2, 3... of each name, immutable once registered; tags are mutable."""

    @classmethod
    def name_checks(cls, parameters: builtins.list[str]) -> dict[str, Callable[[str], str]]:
        return {"name": functools.partial(check.model_name, "model.name")} if "name" in parameters else {}

    ALIAS_TAG = "mlrunway.alias.{}"  # a version's tag; its value is when the alias was given (the newest holder wins)

    @abc.abstractmethod
    def register(self, name: str, path: str | Path, *, base: str | Path | None = None, format: str = "custom",
                 tags: dict[str, str] | None = None, properties: dict[str, Any] | None = None,
                 description: str = "") -> ModelVersion: ...
    @abc.abstractmethod
    def get(self, name: str, version: int | str | None = None) -> ModelVersion: ...
    @abc.abstractmethod
    def list(self, name: str | None = None) -> builtins.list[ModelVersion]:
        """Every version of ``name`` (of every model when None), archived ones too, by name, then version; [] for none."""
    @abc.abstractmethod
    def download(self, name: str, version: int | str | None, dest: str | Path) -> Path: ...
    @abc.abstractmethod
    def archive(self, name: str, version: int) -> ModelVersion: ...
    @abc.abstractmethod
    def update_tags(self, name: str, version: int, tags: dict[str, str | None]) -> ModelVersion:
        """Set tags of a version; a None value removes the tag. Tags are mutable, a version's files are not."""

    def set_alias(self, name: str, version: int, alias: str) -> None:
        """Give ``alias`` (``production``, ``previous``) to one version of ``name`` and take it from every other.
        Default: a tag (Azure ML has no aliases), given before it is taken, so a move cut short leaves two holders
        and :meth:`alias` reads the newer."""
        tag = self.ALIAS_TAG.format(alias)
        self.update_tags(name, version, {tag: datetime.now(UTC).isoformat()})
        for other in self.list(name):
            if tag in other.tags and other.version != version:
                self.update_tags(name, other.version, {tag: None})

    def alias(self, name: str, alias: str) -> ModelVersion | None:
        """The version of ``name`` holding ``alias``; None when none does."""
        tag = self.ALIAS_TAG.format(alias)
        holders = [m for m in self.list(name) if tag in m.tags]
        return max(holders, key=lambda m: m.tags[tag]) if holders else None


class Endpoints(_NamesChecked, abc.ABC):
    """Online endpoints (key or token auth), their deployments and traffic. ``begin_*`` return without waiting.

    :cvar provision_poll_s: between two reads of an endpoint or a deployment being provisioned.
    """

    @classmethod
    def name_checks(cls, parameters: builtins.list[str]) -> dict[str, Callable[[str], str]]:
        # ``name`` beside ``endpoint`` is a deployment's (get_deployment(endpoint, name)).
        deployment = functools.partial(check.endpoint_name, field="deployment.name")
        checks: dict[str, Callable[[str], str]] = {
            "endpoint": check.endpoint_name, "deployment": deployment,
            "name": deployment if "endpoint" in parameters else check.endpoint_name}
        return {p: checks[p] for p in parameters if p in checks}

    provision_poll_s: float = 5.0

    @abc.abstractmethod
    def begin_create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo: ...
    @abc.abstractmethod
    def get(self, name: str) -> EndpointInfo: ...
    @abc.abstractmethod
    def get_keys(self, name: str) -> dict[str, str]:
        """Key auth: ``primary`` and ``secondary``; token auth (Azure's AMLToken, AADToken): ``token``,
        ``token_type`` and ``expires`` (epoch seconds)."""
    @abc.abstractmethod
    def delete(self, name: str) -> bool: ...
    @abc.abstractmethod
    def begin_create_or_update_deployment(self, endpoint: str, name: str,
                                          settings: DeploymentSettings) -> DeploymentInfo: ...
    @abc.abstractmethod
    def get_deployment(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo: ...
    @abc.abstractmethod
    def list_deployments(self, endpoint: str) -> builtins.list[DeploymentInfo]: ...
    @abc.abstractmethod
    def delete_deployment(self, endpoint: str, name: str) -> bool: ...
    @abc.abstractmethod
    def set_traffic(self, endpoint: str, traffic: dict[str, int],
                    mirror_traffic: dict[str, int] | None = None) -> EndpointInfo:
        """Live traffic weights (summing to 100, or 0) and, when given, mirror traffic (a copy of live requests
        to one deployment with no traffic, at most 50%; its answers are discarded)."""
    @abc.abstractmethod
    def get_logs(self, endpoint: str, deployment: str, lines: int = 100) -> str: ...
    @abc.abstractmethod
    def invoke(self, endpoint: str, request_file: str | Path | None = None, *, payload: Any = None,
               deployment: str | None = None) -> str: ...

    def first_existing(self, *names: str) -> EndpointInfo | None:
        """The first of ``names`` that exists (a run's endpoint, or the name it had before names were salted)."""
        for candidate in names:
            try:
                return self.get(candidate)
            except NotFound:
                continue
        return None

    def create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo:
        """As ``begin_create_or_update``, then wait until the endpoint is provisioned."""
        self.begin_create_or_update(name, settings)
        return wait_provisioned(lambda: self.get(name), f"endpoint {name}", poll_s=self.provision_poll_s)

    def create_or_update_deployment(self, endpoint: str, name: str, settings: DeploymentSettings, *,
                                    timeout_s: float = 3600.0) -> DeploymentInfo:
        """As ``begin_create_or_update_deployment``, then wait; a deployment that did not succeed raises
        EndpointError with its error (for Azure, its operation's and its log's)."""
        info = self.begin_create_or_update_deployment(endpoint, name, settings)
        if not info.provisioning_state.is_terminal():
            operation = info.operation
            info = wait_provisioned(lambda: self.get_deployment(endpoint, name, operation=operation),
                                    f"deployment {endpoint}/{name}", timeout=timeout_s, poll_s=self.provision_poll_s)
        if info.provisioning_state is not ProvisioningState.SUCCEEDED:
            raise EndpointError(info.error or f"deployment {endpoint}/{name} {info.provisioning_state.value}")
        return info


@runtime_checkable
class Artifacts(Protocol):
    """Jobs that keep files with their run (local MLflow); elsewhere the files stay where they were written."""

    def log_artifacts(self, name: str, folder: str | Path, artifact_path: str) -> None: ...

    def tracking_uri(self) -> str:
        """The MLflow tracking store the jobs' runs are in (what ``mlflow ui --backend-store-uri`` takes)."""
        ...


@runtime_checkable
class Rollout(Protocol):
    """Endpoints whose deployments report what they served, with a lease that lets one rollout at a time run."""

    def deployment_metrics(self, endpoint: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
        """What the deployment served over [start, end) (seconds since the epoch)."""
        ...

    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """Take or renew the endpoint's rollout lease for ``holder``: None, or who else holds it."""
        ...

    def release(self, endpoint: str, holder: str) -> None: ...


@runtime_checkable
class Shadow(Protocol):
    """Endpoints that keep a mirrored deployment's answers beside the champion's (local). Azure ML mirrors
    "without using returned scoring" (the REST API's ``mirrorTraffic``): its shadow's answers are discarded."""

    def mirrored_answers(self, endpoint: str, deployment: str, start: float,
                         end: float) -> builtins.list[MirroredAnswer]:
        """The requests mirrored to ``deployment`` that both had answered within [start, end)."""
        ...


@runtime_checkable
class Studio(Protocol):
    """A backend with a UI of its own (Azure ML studio); elsewhere the UI plugin's pages stand in for it."""

    def link(self, kind: str, name: str, version: int | str | None = None) -> str:
        """The backend's own page of a job, sweep, model or endpoint."""
        ...


@runtime_checkable
class Leftovers(Protocol):
    """A backend whose jobs and endpoints are processes of this machine (local): what of them still runs."""

    def leftovers(self) -> builtins.list[str]:
        """One line per live process of the backend (a job's supervisor or script, a sweep's controller, an
        endpoint's server): after a cleanup, none."""
        ...


@runtime_checkable
class Lineage(Protocol):
    """A backend that names its own OpenLineage namespace (:mod:`mlrunway.lineage`); elsewhere the namespace is
    ``mlrunway-<kind>://<host>``."""

    @property
    def lineage_namespace(self) -> str:
        """Where the backend's jobs, models and endpoints are, as a URI (``azureml://subscriptions/...``)."""
        ...


class Backend(Protocol):
    """One workspace's jobs, models and endpoints, where a job's outputs are, and where its run reports go."""

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
    @property
    def endpoint_salt(self) -> str:
        """What a run's endpoint name derives from besides the run (:class:`~mlrunway.backend.naming.RunNames`): ""
        where endpoint names are the workspace's own; on Azure ML, whose names are unique per region, the
        workspace's ARM id."""
        ...

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

    @property
    def reports(self) -> Path:
        """The folder, on the machine Airflow runs on, where this backend's run reports are saved and read."""
        ...


@runtime_checkable
class Metered(Protocol):
    """Jobs that say what they ran on and how long (:class:`~mlrunway.backend.types.Usage`), for their cost
    (:mod:`mlrunway.ledger.cost`); reads made for it, never in a wait's poll."""

    def usage(self, name: str) -> Usage | None:
        """What job ``name`` ran on, from its start to its end (None: it never started)."""
        ...

    def trial_usage(self, name: str) -> dict[str, Usage]:
        """Each started trial of sweep ``name``, by the trial's name as ``sweep_result`` gives it."""
        ...

    def planned_usage(self, spec: CommandJobSpec) -> Usage:
        """What a job of ``spec`` would run on (no times yet): its rate is known before it starts, so a budget it
        cannot keep is refused before any job."""
        ...


@runtime_checkable
class Priced(Protocol):
    """A backend whose connection holds a rate card (:class:`~mlrunway.backend.rates.RateCard`)."""

    def rates_for(self, sizes: Iterable[str]) -> RateCard:
        """The connection's rate card, with what it lacks of ``sizes`` (VM sizes jobs ran on) filled where the
        backend can (Azure ML's Retail Prices, when the card asks for them)."""
        ...


@runtime_checkable
class StopRecords(Protocol):
    """Jobs whose sweep is stopped by its budget from outside (Azure ML: the service starts the trials, so the
    watcher cancels the sweep): the decision is recorded on the sweep before the cancel, so every reader (the task's
    check, pick_best, the report, a retry) reads the same one as ``JobInfo.budget_stop``."""

    def record_stop(self, name: str, reason: str) -> None:
        """Record on sweep ``name`` why it is stopped, before it is canceled."""
        ...


@runtime_checkable
class RunMetrics(Protocol):
    """Jobs whose MLflow runs take metrics after the job (its cost, once it has ended): the local store, and Azure
    ML's MLflow tracking server."""

    def log_metrics(self, name: str, metrics: dict[str, float]) -> None:
        """Log ``metrics`` on job ``name``'s run."""
        ...


@runtime_checkable
class MeteredEndpoints(Protocol):
    """Endpoints that say what each deployment serves on and since when, for its serving cost
    (:mod:`mlrunway.ledger.cost`)."""

    def serving_usage(self, endpoint: str) -> dict[str, Usage]:
        """Each deployment of ``endpoint``: since its creation (``ended`` None: it serves), its VM size and
        instances (Azure ML) or scoring processes (locally)."""
        ...


@runtime_checkable
class OutputFiles(Protocol):
    """A backend whose job outputs are remote and can be read a file at a time (Azure ML's datastores): a model's
    check reads ``signature.json`` and the inputs file, and asks whether the model file is there, never downloading
    the model. A backend without it (its outputs are folders here) is read through ``output_folder``."""

    def output_files(self, base: str, path: str, names: Sequence[str]) -> AbstractContextManager[Path]:
        """A folder holding those of ``names`` (files under ``base``/``path``, by their relative paths) that exist."""
        ...

    def output_exists(self, base: str, path: str, name: str) -> bool:
        """Whether the file ``name`` is directly under ``base``/``path``."""
        ...


def rollout_of(backend: Backend) -> Rollout:
    """The backend's endpoints as :class:`Rollout`; NotSupportedOnBackend where they are not."""
    if not isinstance(backend.endpoints, Rollout):
        raise NotSupportedOnBackend(f"the {backend.kind} backend has no staged rollout: its endpoints report no "
                                    "per-deployment metrics; use a per-run deployment (no endpoint_name)")
    return backend.endpoints


# What a backend writes: the abstract methods of each resource (the rest is written above, once).
REQUIRED = {resource.__name__.lower(): len(resource.__abstractmethods__) for resource in (Jobs, Models, Endpoints)}
