"""The per-run deployment: the run's own endpoint, ``blue`` provisioned at 0%, smoke-tested through the deployment
header, then given 100% of traffic (Azure ML's safe rollout). The run's cleanup deletes the endpoint."""

from __future__ import annotations

from typing import Any, ClassVar

from mlrunway.backend.protocol import Backend
from mlrunway.deploy.base import DeployRequest, Done, Provisioning, Resumed, Step
from mlrunway.errors import NotFound
from mlrunway.pipeline import promote_blue, start_blue


class PerRunBlue:
    name: ClassVar[str] = "blue"

    def start(self, backend: Backend, request: DeployRequest) -> Step:
        backend.endpoints.begin_create_or_update(request.endpoint, request.endpoint_settings)
        return Provisioning(state={"phase": "endpoint"}, endpoint=request.endpoint)

    def resume(self, backend: Backend, request: DeployRequest, state: dict[str, Any], event: Resumed) -> Step:
        endpoint = request.endpoint
        if state["phase"] == "endpoint":
            event.provisioned(f"endpoint {endpoint}", request.max_wait_s)
            started = start_blue(backend, endpoint, request.settings)
            return Provisioning(state={"phase": "blue"}, endpoint=endpoint, deployment="blue",
                                operation=started.operation)
        event.provisioned(f"deployment {endpoint}/blue", request.max_wait_s)
        name, version = request.model
        return Done(result=promote_blue(backend, endpoint, name, version, request.data_dir, request.sample_request))

    def abandon(self, backend: Backend, request: DeployRequest) -> None:
        """`blue` still provisioning has no traffic yet: delete it; one that serves is left to the run's cleanup."""
        try:
            if not backend.endpoints.get_deployment(request.endpoint, "blue").provisioning_state.is_terminal():
                backend.endpoints.delete_deployment(request.endpoint, "blue")
        except NotFound:
            pass
