"""Online endpoints on Azure ML, through the SDK's ``online_endpoints`` operations, and the protocol's whole
``Endpoints`` over them: their deployments (``mlrunway.azure.deployments``), the rollout's lease
(``mlrunway.azure.lease``) and metrics (``mlrunway.azure.metrics``), and scoring in the endpoint's own auth.

A team's endpoint is read and written back, never rebuilt; every write is tried again while the endpoint is
busy (``mlrunway.azure.writes``).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from azure.ai.ml import MLClient
from azure.ai.ml.entities import ManagedOnlineEndpoint
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.core.rest import HttpRequest

from mlrunway import check
from mlrunway.azure.deployments import AzureDeployments
from mlrunway.azure.lease import RolloutLease
from mlrunway.azure.metrics import DeploymentMonitor
from mlrunway.azure.rest import WorkspaceRest
from mlrunway.azure.writes import RetriedWrites, service_message, transient_reads
from mlrunway.backend.protocol import Endpoints
from mlrunway.backend.types import (
    DeploymentInfo,
    DeploymentMetrics,
    DeploymentSettings,
    EndpointInfo,
    EndpointSettings,
    ProvisioningState,
    Usage,
)
from mlrunway.errors import EndpointError, NotFound

__all__ = ["AUTH_RENEW_S", "AzureEndpoints"]

# The service's 400 for an endpoint name another workspace in the region holds ("There is already an endpoint with
# this name, Endpoint name needs to be unique within a region. Try some other name.").
_NAME_TAKEN = re.compile(r"already an endpoint with this name|unique within a region", re.I)
# Each endpoint's ARM id by (subscription, resource group, workspace, endpoint), read once per process.
_ENDPOINT_IDS: dict[tuple[str, str, str | None, str], str] = {}
AUTH_RENEW_S = 300.0  # scoring keys are read again after 5 minutes; a token is renewed 5 minutes before it expires


class AzureEndpoints(Endpoints):
    """:param ml: the workspace's ``MLClient``; ``rest``: its REST pipelines (``plain`` carries the scoring).
    :param deployments: the endpoints' deployments; ``monitor``: their metrics; ``lease``: the rollout lease.
    :param write: an endpoint's write, tried again while the endpoint is busy (the one ``deployments`` uses).
    :param poll_s: between reads of an endpoint or a deployment being provisioned.
    """

    def __init__(self, ml: MLClient, rest: WorkspaceRest, *, deployments: AzureDeployments,
                 monitor: DeploymentMonitor, lease: RolloutLease, write: RetriedWrites, poll_s: float = 10.0) -> None:
        self.ml, self.rest, self.write, self.provision_poll_s = ml, rest, write, poll_s
        self.deployments, self.monitor, self.rollout_lease = deployments, monitor, lease
        self._auth: dict[str, tuple[str, float]] = {}  # endpoint -> (Authorization header, renew it after)

    def _info(self, endpoint: Any) -> EndpointInfo:
        return EndpointInfo(name=endpoint.name, scoring_uri=endpoint.scoring_uri, traffic=dict(endpoint.traffic or {}),
                            mirror_traffic=dict(endpoint.mirror_traffic or {}), auth_mode=endpoint.auth_mode or "key",
                            provisioning_state=ProvisioningState.parse(endpoint.provisioning_state))

    def get_keys(self, name: str) -> dict[str, str]:
        """Key auth: ``primary`` and ``secondary``. Token auth (AMLToken: the service's token route; AADToken: a
        token of the credential for ml.azure.com): ``token``, ``token_type`` and ``expires`` (epoch seconds)."""
        return self._credentials(name)[0]

    def _authorization(self, endpoint: str, *, fresh: bool = False) -> str:
        """The scoring request's Authorization header, kept until it needs renewing (see ``_credentials``)."""
        cached = self._auth.get(endpoint)
        if cached and not fresh and time.time() < cached[1]:
            return cached[0]
        _, header, renew = self._credentials(endpoint)
        self._auth[endpoint] = (header, renew)
        return header

    def _credentials(self, name: str) -> tuple[dict[str, str], str, float]:
        """The endpoint's credentials as ``get_keys`` gives them, the Authorization header they make, and when
        to read them again: a token at its refresh time (AMLToken's ``refreshAfterTimeUtc``, else 5 minutes
        before it expires), keys after 5 minutes (a regenerated key is picked up)."""
        credentials = self.ml.online_endpoints.get_keys(name)
        if hasattr(credentials, "primary_key"):
            keys = {"primary": credentials.primary_key, "secondary": credentials.secondary_key}
            return keys, f"Bearer {credentials.primary_key}", time.time() + AUTH_RENEW_S
        expires = float(credentials.expiry_time_utc or 0)
        refresh = float(getattr(credentials, "refresh_after_time_utc", 0) or 0)
        token = {"token": credentials.access_token, "token_type": getattr(credentials, "token_type", None) or "Bearer",
                 "expires": str(credentials.expiry_time_utc or 0)}
        return token, f"Bearer {credentials.access_token}", refresh or expires - AUTH_RENEW_S

    @transient_reads
    def get(self, name: str) -> EndpointInfo:
        try:
            return self._info(self.ml.online_endpoints.get(name))
        except ResourceNotFoundError as exc:
            raise NotFound(f"endpoint {name} does not exist") from exc

    def begin_create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo:
        """A new endpoint is a ``ManagedOnlineEndpoint`` with key auth; an existing one (a team's production
        endpoint) is never rebuilt: it is read and, only if it lacks the ``mlrunway`` tag, written back as read,
        so its auth mode, identity, network access, description, tags, traffic and mirror stay. Doesn't wait.
        ``settings.workers`` sizes a local server: an Azure endpoint sizes each deployment instead."""
        check.endpoint_name(name)
        try:
            endpoint = self.ml.online_endpoints.get(name)
        except ResourceNotFoundError:
            endpoint = ManagedOnlineEndpoint(name=name, auth_mode="key", description="mlrunway", tags={"mlrunway": "1"})
        else:
            if (endpoint.tags or {}).get("mlrunway") == "1":
                return self._info(endpoint)
            endpoint.tags = {**(endpoint.tags or {}), "mlrunway": "1"}
        try:
            self.write(f"endpoint {name}", lambda: self.ml.online_endpoints.begin_create_or_update(endpoint))
        except HttpResponseError as exc:
            if exc.status_code == 400 and any(_NAME_TAKEN.search(said) for said in _messages(exc)):
                raise check.fail("endpoint_prefix", f"endpoint name {name!r} is taken in this Azure region by another "
                                 "workspace's endpoint (online endpoint names are unique per region, across "
                                 "workspaces)", "set endpoint_prefix (or endpoint_name) to one that no other "
                                 "workspace in the region uses") from exc
            raise
        return self.get(name)

    def set_traffic(self, endpoint: str, traffic: dict[str, int],
                    mirror_traffic: dict[str, int] | None = None) -> EndpointInfo:
        """As the contract says; weights the service would refuse are refused first, naming the field (the SDK's
        ``get`` gives every deployment a weight, 0 where it has none, so the endpoint's names come with it)."""
        current = self.ml.online_endpoints.get(endpoint)
        mirror = dict(current.mirror_traffic or {}) if mirror_traffic is None else dict(mirror_traffic)
        check.traffic(dict(traffic), mirror, {*(current.traffic or {}), *(current.mirror_traffic or {})})
        current.traffic, current.mirror_traffic = dict(traffic), mirror
        return self._info(self.write(f"traffic {traffic} of endpoint {endpoint}",
                                     lambda: self.ml.online_endpoints.begin_create_or_update(current).result()))

    def invoke(self, endpoint: str, request_file: str | Path | None = None, *, payload: Any = None,
               deployment: str | None = None) -> str:
        """POST to the scoring URI with the endpoint's key, and with ``azureml-model-deployment`` when a
        deployment is named (else traffic decides). A non-200 raises EndpointError with the status and Azure's
        ``ms-azureml-model-error-statuscode`` and ``-reason`` headers (the SDK's own ``invoke`` turns an error
        body into an AttributeError)."""
        if (request_file is None) == (payload is None):
            raise check.fail("invoke", "needs exactly one of request_file and payload", "pass one")
        body = Path(request_file).read_bytes() if request_file is not None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", "Authorization": self._authorization(endpoint)}
        if deployment:
            headers["azureml-model-deployment"] = deployment
        uri = self.get(endpoint).scoring_uri
        response = self.rest.plain.send_request(HttpRequest("POST", uri, content=body, headers=headers))
        if response.status_code == 401:  # a key regenerated, a token revoked: once more with fresh credentials
            headers["Authorization"] = self._authorization(endpoint, fresh=True)
            response = self.rest.plain.send_request(HttpRequest("POST", uri, content=body, headers=headers))
        if response.status_code != 200:
            original = response.headers.get("ms-azureml-model-error-statuscode")
            reason = response.headers.get("ms-azureml-model-error-reason")
            scored = f" (score.py answered {original}: {reason})" if original else ""
            raise EndpointError(f"endpoint {endpoint}: HTTP {response.status_code}{scored}: {response.text()[:500]}")
        return str(response.text())

    def delete(self, name: str) -> bool:
        """``online_endpoints.begin_delete`` and wait; an endpoint already gone is success (False)."""
        try:
            self.ml.online_endpoints.get(name)
        except ResourceNotFoundError:
            return False
        self.ml.online_endpoints.begin_delete(name).result()
        return True

    # -- deployments, the rollout's metrics and lease: each in its own module -------------------------
    def begin_create_or_update_deployment(self, endpoint: str, name: str,
                                          settings: DeploymentSettings) -> DeploymentInfo:
        return self.deployments.begin_create_or_update(endpoint, name, settings)

    def get_deployment(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo:
        return self.deployments.get(endpoint, name, operation=operation)

    def serving_usage(self, endpoint: str) -> dict[str, Usage]:
        return self.deployments.serving_usage(endpoint)

    def list_deployments(self, endpoint: str) -> list[DeploymentInfo]:
        return self.deployments.list(endpoint)

    def delete_deployment(self, endpoint: str, name: str) -> bool:
        return self.deployments.delete(endpoint, name)

    def get_logs(self, endpoint: str, deployment: str, lines: int = 100, *, container: str | None = None) -> str:
        return self.deployments.get_logs(endpoint, deployment, lines, container=container)

    def deployment_metrics(self, endpoint: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
        """The deployment's requests, errors and p99 latency over [start, end) from the endpoint's Azure Monitor
        metrics (``mlrunway.azure.metrics``). The endpoint's ARM id, which the queries name, is read once per
        process (it derives from the names: an endpoint made again under its name has the same one), not on each
        of a rollout's looks."""
        key = (self.ml.subscription_id, self.ml.resource_group_name, self.ml.workspace_name, endpoint)
        if (resource := _ENDPOINT_IDS.get(key)) is None:
            resource = _ENDPOINT_IDS[key] = self.ml.online_endpoints.get(endpoint).id
        return self.monitor.deployment_metrics(resource, deployment, start, end)

    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """The rollout lease: a blob lease in the workspace's default storage, recorded as the endpoint's
        ``mlrunway.lease`` tag; the tag alone without the storage role (``mlrunway.azure.lease``)."""
        return self.rollout_lease.lease(endpoint, holder, ttl_s)

    def release(self, endpoint: str, holder: str) -> None:
        self.rollout_lease.release(endpoint, holder)


def _messages(exc: HttpResponseError) -> list[str]:
    """What the service said: the error's message and each of its details' (an online endpoint's name taken in
    the region comes as ``InferencingClientCallFailed`` in ``error.details``, under a general top-level message)."""
    error = exc.error
    said = [service_message(exc)]
    said += [str(getattr(detail, "message", "") or "") for detail in (getattr(error, "details", None) or [])]
    return said
