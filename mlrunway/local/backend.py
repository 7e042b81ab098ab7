"""The local backend: jobs, models and endpoints of one workspace, grouped by resource as MLClient is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlrunway.local.jobs import LocalJobs
from mlrunway.local.registry import LocalModels
from mlrunway.local.workspace import Workspace
from mlrunway.serving.endpoints import LocalEndpoints


@dataclass
class LocalBackend:
    workspace: Workspace
    jobs: LocalJobs = field(init=False)
    models: LocalModels = field(init=False)
    endpoints: LocalEndpoints = field(init=False)
    kind: str = "local"

    def __post_init__(self) -> None:
        self.jobs = LocalJobs(self.workspace)
        self.models = LocalModels(self.workspace)
        self.endpoints = LocalEndpoints(self.workspace)

    @classmethod
    def at(cls, root: str | Path | None = None) -> LocalBackend:
        return cls(Workspace.at(root))

    def job_outputs(self, job_name: str) -> Path:
        """Where a job's ``./outputs`` files are (Azure: ``azureml://jobs/<name>/outputs/artifacts/paths/outputs/``)."""
        return Path(self.jobs.get(job_name).outputs or "")

    def link(self, kind: str, name: str, version: int | str | None = None) -> str | None:
        """No studio page locally (the sweep report and MLflow links come with the UI plugin)."""
        return None
