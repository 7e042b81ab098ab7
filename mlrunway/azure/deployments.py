"""An online endpoint's deployments on Azure ML, through the SDK's ``online_deployments`` operations.

A deployment whose first provisioning failed is deleted and made again (the service updates none), never one
with traffic. A failure says why: its operation's code and message (ImageBuildFailure, OutOfQuota, ...), then
the tails of its storage initializer's log and its inference server's.
"""

from __future__ import annotations

import base64
import builtins
import json
import logging
from typing import Any

from azure.ai.ml import MLClient
from azure.ai.ml.entities import CodeConfiguration, DataCollector, DeploymentCollection, ManagedOnlineDeployment
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from mlrunway.azure.environments import scoring_environment
from mlrunway.azure.jobs import utc_seconds
from mlrunway.azure.rest import WorkspaceRest
from mlrunway.azure.writes import RetriedWrites, transient_reads
from mlrunway.backend import capture
from mlrunway.backend.types import DeploymentInfo, DeploymentSettings, ProvisioningState, Usage
from mlrunway.errors import EndpointError, NotFound

__all__ = ["AzureDeployments"]

log = logging.getLogger(__name__)


class AzureDeployments:
    """:param ml: the workspace's ``MLClient``; ``rest``: its REST pipeline, which reads a failed operation.
    :param write: a deployment's write, tried again while its endpoint is busy.
    :param instance_type: VM size of a deployment whose settings name none; ``instance_count`` instances.
    """

    def __init__(self, ml: MLClient, rest: WorkspaceRest, write: RetriedWrites, *, instance_type: str,
                 instance_count: int) -> None:
        self.ml, self.rest, self.write = ml, rest, write
        self.instance_type, self.instance_count = instance_type, instance_count

    def begin_create_or_update(self, endpoint: str, name: str, settings: DeploymentSettings) -> DeploymentInfo:
        """Send a ``ManagedOnlineDeployment`` of the settings' model with its scoring script; don't wait. The entity
        is made afresh for each try: the SDK's ``DataCollector`` deletes its own ``sampling_rate`` when serialized."""
        self._delete_if_failed(endpoint, name)
        try:
            poller = self.write(f"deployment {endpoint}/{name}", lambda: self.ml.online_deployments.begin_create_or_update(
                self.entity(endpoint, name, settings)))
        except HttpResponseError as exc:
            raise EndpointError(f"deployment {endpoint}/{name} was refused: {exc.message}") from exc
        return self.get(endpoint, name, operation=_operation_url(poller))

    def entity(self, endpoint: str, name: str, settings: DeploymentSettings) -> ManagedOnlineDeployment:
        return ManagedOnlineDeployment(
            name=name, endpoint_name=endpoint, model=f"azureml:{settings.model_name}:{settings.model_version}",
            code_configuration=CodeConfiguration(code=settings.code_dir, scoring_script=settings.scoring_script),
            environment=scoring_environment(),
            instance_type=settings.instance_type or self.instance_type,
            instance_count=settings.instance_count or self.instance_count,
            environment_variables=dict(settings.environment_variables),
            data_collector=_data_collector(settings.data_collector),
        )

    def _delete_if_failed(self, endpoint: str, name: str) -> None:
        """A deployment left Failed (its first provisioning failed: the service refuses to update it) is deleted so
        that it can be made again; one that still has traffic is never deleted."""
        try:
            current = self.ml.online_deployments.get(name=name, endpoint_name=endpoint)
        except ResourceNotFoundError:
            return
        if ProvisioningState.parse(current.provisioning_state) is not ProvisioningState.FAILED:
            return
        live = self.ml.online_endpoints.get(endpoint)
        if (live.traffic or {}).get(name) or (live.mirror_traffic or {}).get(name):
            raise EndpointError(f"deployment {endpoint}/{name} is Failed and still has traffic ({live.traffic}, "
                                f"mirror {live.mirror_traffic}): move its traffic away before deploying to it")
        log.warning("deployment %s/%s is Failed (the service updates no deployment whose provisioning failed): "
                    "deleted, to be made again", endpoint, name)
        self._delete(endpoint, name)

    @transient_reads
    def get(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo:
        """The deployment's provisioning state. A failure carries why: the code and message of its operation
        (``operation``, from ``begin_create_or_update``: ImageBuildFailure, OutOfQuota, ...), then
        the tails of the storage initializer's log (model downloads) and the inference server's (score.py)."""
        try:
            deployment = self.ml.online_deployments.get(name=name, endpoint_name=endpoint)
        except ResourceNotFoundError as exc:
            raise NotFound(f"deployment {name} of endpoint {endpoint} does not exist") from exc
        state = ProvisioningState.parse(deployment.provisioning_state)
        # A PUT answered 200 declares no Azure-AsyncOperation header (the spec); the resource's free-form
        # properties carry the URL of its last operation, through restarts and triggers.
        operation = operation or (deployment.properties or {}).get("AzureAsyncOperationUri")
        error = None
        if state in (ProvisioningState.FAILED, ProvisioningState.CANCELED):
            error = "\n".join([f"deployment {endpoint}/{name} {state.value.lower()}: {self._why(operation)}",
                               "--- storage-initializer log ---",
                               self.get_logs(endpoint, name, lines=20, container="storage-initializer"),
                               "--- inference-server log ---", self.get_logs(endpoint, name, lines=30)])
        return DeploymentInfo(endpoint=endpoint, name=name, provisioning_state=state, error=error,
                              model=_model_ref(deployment.model), operation=operation)

    def _why(self, operation: str | None) -> str:
        """The failed operation's ``error.code: error.message`` (ARM's operation-status shape)."""
        if not operation:
            return "the service kept no operation for it (see the logs below)"
        try:
            status = self.rest.call("GET", operation) or {}
        except HttpResponseError as exc:
            return f"its operation could not be read ({exc.message})"
        error = status.get("error") or {}
        return f"{error.get('code', status.get('status', 'Unknown'))}: {error.get('message', 'no message')}"

    def list(self, endpoint: str) -> builtins.list[DeploymentInfo]:
        return [self.get(endpoint, d.name)
                for d in self.ml.online_deployments.list(endpoint_name=endpoint) if d is not None]

    def serving_usage(self, endpoint: str) -> dict[str, Usage]:
        """Each deployment since ``systemData.createdAt`` (the SDK's ``creation_context.created_at``), on its
        ``instance_type`` and ``sku.capacity`` instances."""
        found = {}
        for d in self.ml.online_deployments.list(endpoint_name=endpoint):
            if d is None:
                continue
            started = utc_seconds(getattr(getattr(d, "creation_context", None), "created_at", None))
            if started is not None:
                found[d.name] = Usage(started=started, size=d.instance_type or self.instance_type,
                                      instances=int(d.instance_count or 1))
        return found

    def delete(self, endpoint: str, name: str) -> bool:
        """``online_deployments.begin_delete`` and wait (Azure cannot cancel a provisioning otherwise); False when it
        was already gone (Azure answers a DELETE of a missing deployment with 204, so ask first)."""
        try:
            self.ml.online_deployments.get(name=name, endpoint_name=endpoint)
        except ResourceNotFoundError:
            return False
        self._delete(endpoint, name)
        return True

    def _delete(self, endpoint: str, name: str) -> None:
        """Delete and wait, tried again while the endpoint is busy."""
        self.write(f"deletion of {endpoint}/{name}",
                   lambda: self.ml.online_deployments.begin_delete(name=name, endpoint_name=endpoint).result())

    def get_logs(self, endpoint: str, deployment: str, lines: int = 100, *, container: str | None = None) -> str:
        """The tail of a deployment's log: its inference server's, or ``container="storage-initializer"``."""
        try:
            return self.ml.online_deployments.get_logs(deployment, endpoint, lines, container_type=container) \
                or "(empty)"
        except HttpResponseError as exc:
            return f"(no logs: {exc.message})"


def _data_collector(settings: capture.DataCollector | None) -> DataCollector | None:
    """azure-ai-ml's own entity: every enabled collection, the sampling rate (the SDK copies it onto each) and the
    rolling rate. A custom collection is filled only by a scoring script that uses ``azureml-ai-monitoring``'s
    ``Collector`` (the scoring environment installs it); ``request``/``response`` need no change to the script."""
    if settings is None:
        return None
    return DataCollector(collections={name: DeploymentCollection(enabled="true") for name in settings.enabled},
                         sampling_rate=settings.sampling_rate, rolling_rate=settings.rolling_rate)


def _operation_url(poller: Any) -> str | None:
    """The Azure-AsyncOperation URL of an ARM long-running operation, from the poller's continuation token
    (azure-core's version-1 token is base64 JSON holding the first response's LRO headers)."""
    try:
        token = json.loads(base64.b64decode(poller.continuation_token()))
        headers = {k.lower(): v for k, v in token["data"]["response"]["headers"].items()}
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("The deployment's operation cannot be followed (%s): a failure will name no reason", exc)
        return None
    return headers.get("azure-asyncoperation") or headers.get("location")


def _model_ref(model: Any) -> str:
    """``name:version`` of a deployment's model, whether the SDK gives an asset id or a reference."""
    text = str(getattr(model, "id", None) or model or "")
    if "/models/" in text:  # azureml://.../models/<name>/versions/<version> or an ARM id
        tail = text.split("/models/", 1)[1].split("/")
        return f"{tail[0]}:{tail[2]}" if len(tail) >= 3 else tail[0]
    return text.removeprefix("azureml:")
