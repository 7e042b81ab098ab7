"""An endpoint's state on disk (``endpoints/<name>/endpoint.json``), shared by the control plane and the server.

The control plane writes it atomically; every server worker re-reads it when it changes (the scoring app,
:mod:`mlrunway.serving`, reads it through :meth:`EndpointState.load`), so a traffic update or a new deployment
version reaches all workers without a restart and without dropping a request in flight. The file holds the keys,
so it is created with mode 0600.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from mlrunway import check
from mlrunway.local.files import write_json
from mlrunway.local.records import read
from mlrunway.serving import state as served
from mlrunway.serving.state import (
    GENERATION_FILE,
    MAX_BODY_BYTES,
    SERVER_LIMITS,
    STATE_FILE,
    DeploymentState,
    bump_generation,
    new_key,
)

__all__ = ["GENERATION_FILE", "MAX_BODY_BYTES", "SERVER_LIMITS", "STATE_FILE", "DeploymentState", "EndpointState",
           "bump_generation", "check_traffic", "new_key"]


class EndpointState(served.EndpointState):
    """The endpoint's state (:class:`mlrunway.serving.state.EndpointState`) as the workspace keeps it."""

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / STATE_FILE
        write_json(path, asdict(self))
        os.chmod(path, 0o600)
        bump_generation(folder)

    @classmethod
    def load(cls, folder: Path) -> EndpointState:
        data = read(folder / STATE_FILE, "restore it, or delete the endpoint (its server is found and stopped without "
                                         "the record)")
        data["deployments"] = {n: DeploymentState(**d) for n, d in data.get("deployments", {}).items()}
        return cls(**data)


def check_traffic(traffic: dict[str, int], mirror: dict[str, int], deployments: dict[str, DeploymentState]) -> None:
    """Weights are integers 0..100 that sum to 0 or 100; mirror traffic goes to one deployment, at most 50%
    (:func:`mlrunway.check.traffic`, which every backend checks with)."""
    check.traffic(traffic, mirror, deployments)
