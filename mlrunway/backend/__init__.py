"""The backend interface: the ``Backend`` protocol, the records that cross it, run naming, attempts and the
registry of installed backends. ``mlrunway.backend.fake.FakeBackend`` is the scripted backend for tests.

The names below are imported when first used (PEP 562), so that a process that needs one submodule (a job's
supervisor, started for every job and trial, needs ``types``) does not import them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlrunway.backend.naming import RunNames
    from mlrunway.backend.protocol import (
        Artifacts,
        Backend,
        Capabilities,
        Endpoints,
        Jobs,
        Leftovers,
        Models,
        Rollout,
        Studio,
    )
    from mlrunway.backend.registry import connect
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

_HOMES = {
    "naming": ("RunNames",),
    "protocol": ("Artifacts", "Backend", "Capabilities", "Endpoints", "Jobs", "Leftovers", "Models", "Rollout",
                 "Studio"),
    "registry": ("connect",),
    "types": ("DeploymentInfo", "DeploymentSettings", "EndpointInfo", "EndpointSettings", "JobInfo", "JobStatus",
              "ModelVersion", "ProvisioningState", "SweepResult", "TrialInfo"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "Artifacts", "Backend", "Capabilities", "DeploymentInfo", "DeploymentSettings", "EndpointInfo",
    "EndpointSettings", "Endpoints", "JobInfo", "JobStatus", "Jobs", "Leftovers", "ModelVersion", "Models",
    "ProvisioningState", "Rollout", "RunNames", "Studio", "SweepResult", "TrialInfo", "connect",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
