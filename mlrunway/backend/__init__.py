"""The backend interface: the ``Backend`` protocol, the records that cross it, run naming, attempts and the
registry of backend kinds. ``mlrunway.backend.fake.FakeBackend`` is the scripted backend for tests."""

from __future__ import annotations

from mlrunway.backend.naming import RunNames
from mlrunway.backend.protocol import Backend, Capabilities, Endpoints, Jobs, Models
from mlrunway.backend.registry import BackendKind, connect
from mlrunway.backend.types import (
    DeploymentInfo,
    DeploymentSettings,
    EndpointInfo,
    EndpointSettings,
    JobInfo,
    JobStatus,
    ModelVersion,
    ProvisioningState,
    SweepResult,
    TrialInfo,
)

__all__ = [
    "Backend", "BackendKind", "Capabilities", "DeploymentInfo", "DeploymentSettings", "EndpointInfo",
    "EndpointSettings", "Endpoints", "JobInfo", "JobStatus", "Jobs", "ModelVersion", "Models", "ProvisioningState",
    "RunNames", "SweepResult", "TrialInfo", "connect",
]
