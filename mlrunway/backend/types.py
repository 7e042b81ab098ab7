"""Backend-neutral records: status enums with their terminal sets, a job, a sweep trial, a deployment."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class JobStatus(enum.StrEnum):
    """Azure ML's job states that both backends report (Azure's others map onto these)."""

    QUEUED = "Queued"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"

    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED})


class ProvisioningState(enum.StrEnum):
    """Azure ML's provisioning states of an online endpoint or deployment, which both backends report."""

    CREATING = "Creating"
    UPDATING = "Updating"
    DELETING = "Deleting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELED = "Canceled"

    def is_terminal(self) -> bool:
        return self in (ProvisioningState.SUCCEEDED, ProvisioningState.FAILED, ProvisioningState.CANCELED)


@dataclass(frozen=True, kw_only=True)
class DeploymentInfo:
    """Where a deployment's provisioning stands; ``error`` holds the reason and its log's tail on failure."""

    endpoint: str
    name: str
    provisioning_state: ProvisioningState
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class JobInfo:
    """What a backend knows of a job; ``error`` holds the reason and the tail of stderr on failure."""

    name: str
    kind: str
    status: JobStatus
    exit_code: int | None = None
    error: str | None = None
    timed_out: bool = False
    outputs: str | None = None
    mlflow_run_id: str | None = None
    created: float | None = None
    started: float | None = None
    ended: float | None = None
    properties: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["status"] = self.status.value
        return data


@dataclass(frozen=True, kw_only=True)
class TrialInfo:
    """One sweep trial: its hyperparameters, status, metric history and why it stopped early."""

    name: str
    params: dict[str, Any]
    status: JobStatus
    history: tuple[float, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)
    early_termination: dict[str, Any] | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["status"] = self.status.value
        data["history"] = list(self.history)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialInfo:
        return cls(**{**data, "status": JobStatus(data["status"]), "history": tuple(data.get("history", ()))})
