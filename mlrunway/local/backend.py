"""The local backend: jobs, models and endpoints of one workspace, grouped by resource as MLClient is."""

from __future__ import annotations

import json
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrunway import check, lineage
from mlrunway.backend.capture import Capture, Replay
from mlrunway.backend.protocol import (
    Artifacts,
    Backend,
    Capabilities,
    Leftovers,
    Lineage,
    Metered,
    MeteredEndpoints,
    Priced,
    Rollout,
    RunMetrics,
)
from mlrunway.backend.rates import RateCard
from mlrunway.backend.retention import PrunePlan, Retention, RetentionPolicy
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.processes import leftovers
from mlrunway.local.registry import LocalModels
from mlrunway.local.serving.endpoints import LocalEndpoints
from mlrunway.local.workspace import Workspace


@dataclass
class LocalBackend:
    """Jobs as supervised processes, MLflow tracking and a model registry in a folder, endpoints on 127.0.0.1."""

    workspace: Workspace
    endpoint_host: str = "127.0.0.1"
    capture_max_mb: float = 1024.0
    retention: RetentionPolicy = RetentionPolicy()
    rate_card: RateCard = RateCard()
    jobs: LocalJobs = field(init=False)
    models: LocalModels = field(init=False)
    endpoints: LocalEndpoints = field(init=False)
    kind: str = "local"
    capabilities: Capabilities = Capabilities(poll_interval_s=0.25, job_environments=False)
    endpoint_salt: str = ""  # a workspace's endpoints are its own: names derive from the run alone

    def __post_init__(self) -> None:
        self.jobs = LocalJobs(self.workspace)
        self.models = LocalModels(self.workspace)
        self.endpoints = LocalEndpoints(self.workspace, self.endpoint_host, int(self.capture_max_mb * 1024 * 1024))

    @classmethod
    def from_connection(cls, fields: dict[str, Any], secret: str | None = None) -> LocalBackend:
        """The backend an ``mlrunway_local`` connection names: its ``workspace`` field, else the default one; its
        ``endpoint_host`` is where new endpoints listen (default 127.0.0.1, this machine only); ``capture_max_mb``
        what each deployment's data collector may keep (default 1024 MB; its oldest files go first); ``retention``
        what :meth:`prune` keeps (:class:`~mlrunway.backend.retention.RetentionPolicy`, a dict or its JSON);
        ``local_rate`` (or ``rates``, :class:`~mlrunway.backend.rates.RateCard`) what a core-hour costs. Its
        ``budget`` is the hook's to read (a run's default, :meth:`~mlrunway.airflow.hook.MlrunwayHook.get_budget`)."""
        cap = fields.get("capture_max_mb")
        megabytes = 1024.0
        if cap not in (None, ""):
            try:  # the connection's form gives text
                megabytes = float(cap)
            except (TypeError, ValueError):
                megabytes = float("nan")
            if not megabytes > 0 or megabytes == float("inf"):
                raise check.fail("capture_max_mb", f"{cap!r} is not a positive number of megabytes", "pass e.g. 1024")
        retention = fields.get("retention") or None
        if isinstance(retention, str):
            try:
                retention = json.loads(retention)
            except ValueError as exc:
                raise check.fail("retention", f"is not JSON ({exc})",
                                 'give e.g. {"keep_runs": 10, "keep_versions": 5, "capture_days": 30}') from exc
        policy = RetentionPolicy.parse(retention)
        rates = RateCard.parse(fields.get("rates"), local_rate=fields.get("local_rate"))
        return cls(Workspace.at(fields.get("workspace") or None),
                   endpoint_host=fields.get("endpoint_host") or "127.0.0.1", capture_max_mb=megabytes,
                   retention=policy, rate_card=rates)

    def rates_for(self, sizes: Iterable[str]) -> RateCard:
        """The connection's card (``local_rate`` prices this machine's core-hours)."""
        return self.rate_card

    @classmethod
    def at(cls, root: str | Path | None = None) -> LocalBackend:
        return cls(Workspace.at(root))

    def job_outputs(self, job_name: str) -> str:
        """The folder of a job's ``./outputs`` files (Azure: ``azureml://jobs/<name>/outputs/artifacts/paths/outputs/``)."""
        return self.jobs.get(job_name).outputs or ""

    def named_output(self, job_name: str, output: str) -> str:
        """A named output's folder: ``outputs/<output>`` of the job, where the launcher points it."""
        return str(Path(self.job_outputs(job_name)) / output)

    def output_folder(self, base: str, path: str) -> AbstractContextManager[Path]:
        """A job's outputs are folders of this machine already."""
        return nullcontext(Path(base, path))

    @property
    def reports(self) -> Path:
        return self.workspace.root / "reports"

    def prune(self, policy: RetentionPolicy | None = None, *, dry_run: bool = False) -> PrunePlan:
        """Remove what ``policy`` (default: the connection's ``retention``) lets go of (:mod:`mlrunway.local.prune`)."""
        from mlrunway.local import prune

        return prune.prune(self.workspace, policy or self.retention, self.reports, dry_run=dry_run)

    def leftovers(self) -> list[str]:
        return leftovers(self.workspace)

    @property
    def lineage_namespace(self) -> str:
        """This workspace on this machine: ``mlrunway-local://<host><workspace root>``."""
        return lineage.local_namespace(lineage.host(), self.workspace.root)


def _satisfies_protocol(backend: LocalBackend) -> tuple[Backend, Leftovers, Artifacts, Rollout, Lineage, Capture, Replay,
                                                         Retention, Metered, MeteredEndpoints, Priced, RunMetrics]:
    """mypy proves here that LocalBackend is a ``Backend`` with ``Leftovers`` and ``Lineage``, that its jobs keep
    artifacts, take metrics (``RunMetrics``) and are ``Metered``, that its endpoints are ``Rollout``, ``Capture``,
    ``Replay`` and ``MeteredEndpoints``, that it prunes (``Retention``) and prices its jobs (``Priced``): a mismatch
    fails ``make test``. It has no studio: the sweep report and MLflow pages come with the UI plugin."""
    return (backend, backend, backend.jobs, backend.endpoints, backend, backend.endpoints, backend.endpoints, backend,
            backend.jobs, backend.endpoints, backend, backend.jobs)
