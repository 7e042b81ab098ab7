"""The Ray backend's online endpoints: not yet (they come with the Ray backend's endpoints part). Every method
raises NotSupportedOnBackend naming that part; cleanup reads "no endpoints", and a run's deploy task refuses at its
start, once (:data:`mlrunway.backend.protocol.Capabilities.endpoints`)."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any, NoReturn

from mlrunway.backend.protocol import Endpoints
from mlrunway.backend.types import DeploymentInfo, DeploymentSettings, EndpointInfo, EndpointSettings
from mlrunway.errors import NotFound, NotSupportedOnBackend

__all__ = ["NO_ENDPOINTS", "RayEndpoints"]

NO_ENDPOINTS = ("the ray backend has no online endpoints yet: they come with its endpoints part (issue 81); train, "
                "sweep, pick_best and export_onnx run on Ray, and the deployment on the local or azure_ml backend")


def _refused() -> NoReturn:
    raise NotSupportedOnBackend(NO_ENDPOINTS)


class RayEndpoints(Endpoints):
    """No endpoint exists on the Ray backend yet: reads find none, writes are refused."""

    def begin_create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo:
        _refused()

    def get(self, name: str) -> EndpointInfo:
        raise NotFound(f"endpoint {name!r}: {NO_ENDPOINTS}")

    def get_keys(self, name: str) -> dict[str, str]:
        _refused()

    def delete(self, name: str) -> bool:
        return False  # nothing to delete: cleanup finds no endpoint

    def begin_create_or_update_deployment(self, endpoint: str, name: str,
                                          settings: DeploymentSettings) -> DeploymentInfo:
        _refused()

    def get_deployment(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo:
        raise NotFound(f"deployment {endpoint}/{name}: {NO_ENDPOINTS}")

    def list_deployments(self, endpoint: str) -> builtins.list[DeploymentInfo]:
        return []

    def delete_deployment(self, endpoint: str, name: str) -> bool:
        return False

    def set_traffic(self, endpoint: str, traffic: dict[str, int],
                    mirror_traffic: dict[str, int] | None = None) -> EndpointInfo:
        _refused()

    def get_logs(self, endpoint: str, deployment: str, lines: int = 100) -> str:
        _refused()

    def invoke(self, endpoint: str, request_file: str | Path | None = None, *, payload: Any = None,
               deployment: str | None = None) -> str:
        _refused()
