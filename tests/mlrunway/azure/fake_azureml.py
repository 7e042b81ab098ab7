"""A fake Azure ML service behind an azure-core transport, for driving the real ``MLClient`` offline.

It answers the REST calls azure-ai-ml makes with the documented shapes of the Azure ML REST API: ARM resources
(codes, datastores, jobs, models, environments, online endpoints and deployments, schedules such as a model
monitor's, with long-running operations that poll), Run History (child runs of a sweep, run details), MLflow
tracking (runs/get, metrics/get-history), blob storage (uploads and downloads of code and models) and the scoring
URI. It keeps every request in ``requests`` so tests assert on what the SDK sent. An ARM request whose route and
api-version no spec file under ``spec/`` has, or a data-plane request on no ``DATA_PLANE`` entry, gets a 500 naming
it: the fake answers only what it can hold to a contract.

What the service does on its own is scripted: a job goes Queued → Running → its final status over a few GETs;
a sweep's children and their metric histories come from ``sweep_trials``; a trial's ``./outputs`` come from
``trial_outputs``. Scoring runs the deployment's uploaded score.py on the uploaded model, so what reaches the
endpoint is exactly what the SDK uploaded.
"""

from __future__ import annotations

import base64
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlparse

from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.exceptions import ServiceResponseError
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest._http_response_impl import HttpResponseImpl
from azure.core.utils import CaseInsensitiveDict

from mlrunway.specs.job import ROLE_TAG
from tests.mlrunway.azure.fake_blob_lease import BlobLeases
from tests.mlrunway.azure.spec_validator import SpecValidator

SUBSCRIPTION = "6a3c9f1e-0b7d-4e8a-9c2f-1d5e7b3a9c40"
RESOURCE_GROUP = "rg-mlrunway"
WORKSPACE = "ws-mlrunway"
REGION = "westeurope"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
STORAGE = "stmlrunway"
CONTAINER = "azureml-blobstore-5e1f"
ARTIFACT_CONTAINER = "azureml"  # workspaceartifactstore: job artifacts (ExperimentRun/dcid.<run>/...) live here
ARM = "management.azure.com"
API_HOST = f"{REGION}.api.azureml.ms"
BLOB_HOST = f"{STORAGE}.blob.core.windows.net"
WS_PATH = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/"
           f"Microsoft.MachineLearningServices/workspaces/{WORKSPACE}")
OPERATIONS = (f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.MachineLearningServices/locations/{REGION}")
# Azure Monitor's definitions of the online endpoint metrics the backend reads: the aggregations each allows.
METRIC_AGGREGATIONS = {"RequestsPerMinute": {"Average", "Minimum", "Maximum"},
                       "RequestLatency_P99": {"Average", "Minimum", "Maximum"}}
SPEC = SpecValidator()
# Every ARM request is answered only if a spec file of its api-version has its route (``spec/``): ``SEEN_ARM_ROUTES``
# counts, across the test session, each (method, path template, api-version) the fake served, and ``NO_SCHEMA``
# keeps each request it refused for want of one. The exceptions are the URLs the service itself hands out to poll
# a long-running operation: the spec declares them only as Location / Azure-AsyncOperation headers (its examples
# show ``.../locations/{region}/mfeOperationResults/{id}``, e.g. 2023-08-01-preview
# examples/Workspace/ServerlessEndpoint/delete.json), not as paths; their shape is ARM's async-operation contract.
ARM_POLLING = re.compile(r"/subscriptions/[^/]+/providers/Microsoft\.MachineLearningServices/locations/[^/]+/"
                         r"mfeOperation(?:sStatus|Results)/[^/]+", re.IGNORECASE)
SEEN_ARM_ROUTES: dict[tuple[str, str, str], int] = {}
NO_SCHEMA: list[str] = []
# The data-plane routes the fake answers off ARM, none with a REST spec this folder could hold: each is here with
# why, and a request off ARM that matches none is refused as one with no schema.
DATA_PLANE: dict[str, tuple[str, str]] = {
    "workspace discovery": (
        rf"{re.escape(API_HOST)}/discovery",
        "the workspace's discoveryUrl (Workspaces_Get): the document naming its regional services; no spec "
        "describes it, mlrunway reads only its 'history' host (mlrunway/azure/rest.py)"),
    "Run History": (
        rf"{re.escape(API_HOST)}/history/v1\.0/.+",
        "Azure ML's run history (a run's details and error, a sweep's child runs): a workspace data-plane service "
        "with no public REST spec in azure-rest-api-specs; read by mlrunway/azure/rest.py, not by the SDK's ARM "
        "clients"),
    "MLflow tracking": (
        rf"{re.escape(API_HOST)}/mlflow/v1\.0/.+/api/2\.0/mlflow/.+",
        "the workspace's MLflow tracking server (runs/get, metrics/get-history): MLflow's own REST API, documented "
        "by MLflow (mlflow.org/docs/latest/rest-api.html) but not an Azure REST spec"),
    "Blob Storage": (
        rf"{re.escape(BLOB_HOST)}/.+",
        "uploads, downloads, listings, leases and metadata of the workspace's storage account: Azure Storage's "
        "data plane, whose bodies are the bytes and XML of the Blob service, not the JSON these spec files "
        "describe; fake_blob_lease.py follows the Blob service's documented headers and errors instead"),
    "Retail Prices": (
        r"prices\.azure\.com(?::443)?/api/retail/prices",
        "Azure's public Retail Prices API (learn.microsoft.com/rest/api/cost-management/retail-prices/"
        "azure-retail-prices): a REST API of its own, not in the machinelearningservices specs; the fake answers "
        "its documented shape (Items, NextPageLink, Count), from retail_items"),
    "scoring URI": (
        rf"[a-z0-9-]+\.{re.escape(REGION)}\.inference\.ml\.azure\.com/score",
        "an online endpoint's scoringUri: its body is whatever the deployment's score.py takes, so the only "
        "contract is the user's script, which the fake runs"),
}
# Asset paths never change (the service answers UserError "Asset paths cannot be updated.": azure-ai-ml matches
# that text, ``_artifacts/_constants.py:21`` ASSET_PATH_ERROR, for models ``operations/_model_operations.py:292``,
# data ``_data_operations.py:442`` and code ``_code_operations.py:211``, and raises AssetPathException, "an attempt
# ... to update the path of an existing asset. Asset paths are immutable", ``exceptions.py:436``). The field that
# holds each kind's path, by its spec definition (ModelVersion, DataVersionBase, CodeVersion).
ASSET_PATHS = {"models": "modelUri", "data": "dataUri", "codes": "codeUri"}
# The VM sizes a region offers Azure ML (VirtualMachineSizes_List, 2023-08-01-preview machineLearningServices.json
# ``VirtualMachineSize``), by name as Azure spells it: each size's published figures (vCPUs, GPUs, memory in GiB,
# temporary disk in MiB; a 1 TiB OS disk limit for all). ``estimatedVMPrices`` is optional and left out.
VM_SIZES: dict[str, dict[str, Any]] = {
    "Standard_DS3_v2": {"family": "standardDSv2Family", "vCPUs": 4, "gpus": 0, "maxResourceVolumeMB": 28672,
                        "memoryGB": 14.0},
    "Standard_D4s_v3": {"family": "standardDSv3Family", "vCPUs": 4, "gpus": 0, "maxResourceVolumeMB": 32768,
                        "memoryGB": 16.0},
    "Standard_E4ds_v4": {"family": "standardEDSv4Family", "vCPUs": 4, "gpus": 0, "maxResourceVolumeMB": 153600,
                         "memoryGB": 32.0},
    "Standard_NC6s_v3": {"family": "standardNCSv3Family", "vCPUs": 6, "gpus": 1, "maxResourceVolumeMB": 753664,
                         "memoryGB": 112.0},
    "Standard_NC24ads_A100_v4": {"family": "standardNCADSA100v4Family", "vCPUs": 24, "gpus": 1,
                                 "maxResourceVolumeMB": 65536, "memoryGB": 220.0},
}
ARM_TYPES = {"codes": "codes", "jobs": "jobs", "models": "models", "environments": "environments",
             "onlineEndpoints": "onlineEndpoints", "deployments": "onlineEndpoints/deployments",
             "schedules": "schedules"}


def route_blob_storage(fake: FakeAzureML, monkeypatch: Any) -> None:
    """Send azure-ai-ml's blob uploads and downloads through the fake too.

    The SDK builds its storage clients itself, without the MLClient's transport; these subclasses add it, the
    only change made to the SDK's behaviour.
    """
    import azure.ai.ml._artifacts._blob_storage_helper as helper
    from azure.storage.blob import BlobServiceClient, ContainerClient

    class Service(BlobServiceClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, transport=fake, **kwargs)

    class Container(ContainerClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, transport=fake, **kwargs)

    monkeypatch.setattr(helper, "BlobServiceClient", Service)
    monkeypatch.setattr(helper, "ContainerClient", Container)


class FakeCredential:
    """A credential that hands out a far-future token (azure-core's bearer policy asks for nothing else)."""

    TOKEN = "fake-aad-token"

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self.TOKEN, int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo(self.TOKEN, int(time.time()) + 3600)


@dataclass
class Recorded:
    method: str
    host: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Trial:
    """A sweep child as the service will run it: sampled params, a metric history, how it ends."""

    params: dict[str, Any]
    history: list[float]
    status: str = "Completed"


class _Raw:
    def close(self) -> None:
        pass


class _Stream:
    """The body as one chunk; an object, since azure-storage-blob sets attributes on the download stream."""

    def __init__(self, content: bytes, response: Any) -> None:
        self._chunks = iter([content] if content else [])
        self.response, self.content_length = response, len(content)

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> bytes:
        return next(self._chunks)


def _response(request: Any, status: int, body: Any = None, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> HttpResponseImpl:
    """A read ``azure.core.rest`` response (the generated clients call ``.json()`` on it)."""
    if body is None:
        content = b""
    elif isinstance(body, bytes):
        content = body
    else:
        content = json.dumps(body).encode()
    response = HttpResponseImpl(
        request=request, internal_response=_Raw(), status_code=status, reason="OK" if status < 400 else "Error",
        content_type=content_type, headers=CaseInsensitiveDict({"Content-Type": content_type,
                                                                "x-ms-request-id": str(uuid.uuid4()), **(headers or {})}),
        stream_download_generator=lambda pipeline, response, **k: _Stream(content, response),
    )
    response._content = content
    response._is_stream_consumed = True
    return response


def _at(body: dict[str, Any], field: str) -> Any:
    for key in field.split("."):
        body = body.get(key) if isinstance(body, dict) else None
    return body


def _error(request: Any, status: int, code: str, message: str) -> HttpResponseImpl:
    return _response(request, status, {"error": {"code": code, "message": message}})


class FakeAzureML(HttpTransport):
    """The service. ``steps`` is how many GETs a job or an operation stays in each non-final state;
    ``retry_after_ms`` is the wait its long-running operations ask of a poller (the SDK's LROPoller obeys it).

    Adversarial modes, each off by default and all on at once with ``adversarial()``: ``retry_after_s`` (the
    spec's ``Retry-After`` in whole seconds instead of the milliseconds header), ``page_size`` (every list
    pages with ``nextLink``, Run History's children with ``continuationToken``), ``throttle_every`` (every
    Nth read gets ARM's 429 with ``Retry-After``), ``unavailable_every`` (every Nth call gets a transient 503),
    ``scaling`` (a deployment update passes through ``Scaling``). What the service does in each comes from
    the REST spec (machinelearningservices ``mfe.json``) and ARM's async-operation contract.

    Faster than the service on purpose: its waits (``x-ms-retry-after-ms: 1``, or ``Retry-After: 1`` s where
    the spec's range for a PATCH or a cancel is 10 to 600 s) keep a lifecycle within seconds; a backend that
    obeys whatever wait it is told is what the tests hold.
    """

    def __init__(self, root: Path, *, steps: int = 1) -> None:
        self.root = root
        self.steps = steps
        self.retry_after_ms = 1
        self.retry_after_s: int | None = None
        self.page_size: int | None = None
        self.throttle_every: int | None = None
        self.unavailable_every: int | None = None
        self.scaling = False
        self.faults: list[tuple[int, str, str]] = []  # (status, method, path) of every injected fault
        self.outages: list[list[Any]] = []  # [kind, count, route, Retry-After] of failures to inject, in order
        self._calls = 0
        self.computes = {"gpu-cluster": "STANDARD_NC6S_V3", "cpu-cluster": "STANDARD_DS3_V2"}  # name -> vmSize
        # The workspace's datastores (name -> blob container) and its default one, where jobs' named outputs go.
        self.datastores = {"workspaceblobstore": CONTAINER, "workspaceartifactstore": ARTIFACT_CONTAINER}
        self.default_datastore = "workspaceblobstore"
        # The VM sizes REGION offers (names from VM_SIZES), as ComputeOperations.list_sizes reads them; another
        # location offers none.
        self.region_sizes: list[str] = ["Standard_DS3_v2", "Standard_D4s_v3", "Standard_E4ds_v4", "Standard_NC6s_v3",
                                        "Standard_NC24ads_A100_v4"]
        self.deployment_failure_code = "DeploymentFailed"
        self.storage_log: list[str] = ["Downloading model files", "Model files downloaded"]
        self.requests: list[Recorded] = []
        self.refused: list[tuple[str, str, list[str]]] = []  # (method, path, problems) of every body refused
        self.no_schema: list[str] = []  # the named 500 of each request no spec file or allow-list entry covers
        self.arm_routes: set[tuple[str, str, str]] = set()  # (method, path template, api-version) served
        self.asset_paths: dict[str, str] = {}  # asset version path (lower case) -> the path its creation sent
        self.resources: dict[str, dict[str, Any]] = {}  # ARM path (lower case) -> resource body
        # Online endpoint names are unique in the region, across workspaces: name (lower case) -> the workspace
        # holding it (this one's WS_PATH, or another's a test sets).
        self.region_endpoints: dict[str, str] = {}
        self.blobs: dict[str, bytes] = {}  # "<container>/<path>" -> content
        self.operations: dict[str, dict[str, Any]] = {}
        self.provisioning: dict[str, str] = {}  # endpoint or deployment path (lower case) -> its operation
        self.job_script: dict[str, list[str]] = {}  # job name -> statuses still to go through
        self.sweep_trials: dict[str, list[Trial]] = {}  # sweep name -> its children, set by the test
        self.trial_outputs: Path | None = None  # files every trial writes to ./outputs/model
        # Whether the service rewrites a registered model's job URI (the spec does not say): both are tested.
        self.rewrite_model_uris = False
        self.history_page_size = 2  # MLflow's metric-history pages, small here so every reader must follow them
        self.job_final: dict[str, str] = {}  # job name -> final status (default Completed)
        self.job_error: dict[str, str] = {}  # job name -> the error a failed run records
        self.job_logs: dict[str, str] = {}  # mlrunway's own command jobs (export, reference) -> what they printed
        self.deployment_failure: str | None = None  # a provisioning error for every deployment
        self.metrics_lag_s = 0.0  # how long after a request Azure Monitor's answers count it
        self.tokens: dict[str, float] = {}  # AMLToken scoring tokens handed out -> when each expires
        self.leases = BlobLeases()  # Blob Storage's leases, containers and metadata (fake_blob_lease.py)
        self.conflict_writes = 0  # the next N endpoint or deployment PUTs answer 409 Conflict (an operation runs)
        self.failed_creations: set[str] = set()  # deployments whose first provisioning failed: a PUT is a 400
        self.token_lifetime_s = 3600
        self.runs: dict[str, dict[str, Any]] = {}  # MLflow / Run History runs by id
        # How long each run lasts as Run History records it (startTimeUtc, endTimeUtc), by run id; 30 min by
        # default: its start is when it first reads Running, its end that much later.
        self.run_seconds: dict[str, float] = {}
        self.refuse_tags = False  # log-batch refuses tags as a workspace whose identity may not tag runs does (403)
        self.clock = 1_790_000_000.0  # the service's "now" for run times (2026-09-21), fixed so costs are exact
        # The Retail Prices API's items (its documented item shape), answered to any filter that matches them by
        # armRegionName, armSkuName and priceType; paged ``retail_page_size`` at a time.
        self.retail_items: list[dict[str, Any]] = []
        self.retail_page_size = 2
        self.keys = {"primaryKey": base64.b64encode(b"primary-key").decode(),
                     "secondaryKey": base64.b64encode(b"secondary-key").decode()}
        self._scorers: dict[str, Any] = {}
        # Every scored request as Azure Monitor counts it: (epoch s, endpoint, deployment, status, model status, ms)
        self.served: list[tuple[float, str, str, int, str | None, float]] = []
        self._mirror_count = self._routed = 0
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., HttpResponseImpl]]] = [
            (m, re.compile(p), h) for m, p, h in self._table()
        ]

    # -- azure-core transport ----------------------------------------------------------------------
    def __enter__(self) -> FakeAzureML:
        return self

    def __exit__(self, *args: Any) -> None:
        pass

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def adversarial(self) -> FakeAzureML:
        """Every mode at once, at rates that keep a whole lifecycle under a minute."""
        self.retry_after_s, self.page_size, self.scaling = 1, 1, True
        self.throttle_every, self.unavailable_every = 23, 17
        return self

    def _fault(self, request: Any, host: str) -> HttpResponseImpl | None:
        """A 429 (reads only: ARM throttles reads and writes separately) or a transient 503, when due."""
        if host not in (ARM, API_HOST):
            return None
        self._calls += 1
        if self.throttle_every and request.method == "GET" and self._calls % self.throttle_every == 0:
            return _response(request, 429, {"error": {"code": "TooManyRequests", "message": "The request is being "
                             "throttled: the number of read requests for the subscription exceeded the limit."}},
                             {"Retry-After": "1"})
        if self.unavailable_every and self._calls % self.unavailable_every == 0:
            return _error(request, 503, "ServiceUnavailable", "The service is temporarily unavailable.")
        return None

    def inject(self, kind: str, count: int, route: str = "", retry_after: str = "0") -> None:
        """The next ``count`` requests whose host and path match ``route`` (a regular expression) fail, each
        beyond azure-core's own retries if ``count`` is larger than them: ``"503"`` (ServiceUnavailable), ``"429"``
        (ARM's throttling, with ``Retry-After: retry_after`` seconds) or ``"reset"`` (the connection dropped
        mid-response: the transport raises azure-core's ServiceResponseError, as requests' transport does)."""
        assert kind in ("503", "429", "reset"), kind
        self.outages.append([kind, count, re.compile(route), retry_after])

    def _injected(self, request: Any, where: str) -> HttpResponseImpl | None:
        for outage in self.outages:
            kind, count, route, retry_after = outage
            if count <= 0 or not route.search(where):
                continue
            outage[1] -= 1
            self.faults.append((0 if kind == "reset" else int(kind), request.method, where))
            if kind == "reset":
                raise ServiceResponseError("('Connection aborted.', ConnectionResetError(104, 'Connection reset by "
                                           "peer'))")
            if kind == "429":
                return _response(request, 429, {"error": {"code": "TooManyRequests", "message": "The request is being "
                                 "throttled: the number of read requests for the subscription exceeded the limit."}},
                                 {"Retry-After": retry_after})
            return _error(request, 503, "ServiceUnavailable", "The service is temporarily unavailable.")
        return None

    def _wait_header(self) -> dict[str, str]:
        if self.retry_after_s:
            return {"Retry-After": str(self.retry_after_s)}
        return {"x-ms-retry-after-ms": str(self.retry_after_ms)}

    def page(self, request: Any, recorded: Recorded, values: list[Any]) -> HttpResponseImpl:
        """ARM's list shape; with ``page_size``, one page and a ``nextLink`` to the rest ($skipToken)."""
        if not self.page_size:
            return _response(request, 200, {"value": values})
        start = int(recorded.query.get("$skipToken", 0))
        body: dict[str, Any] = {"value": values[start:start + self.page_size]}
        if start + self.page_size < len(values):
            query = {**recorded.query, "$skipToken": str(start + self.page_size)}
            body["nextLink"] = f"https://{recorded.host}{recorded.path}?{urlencode(query)}"
        return _response(request, 200, body)

    def send(self, request: Any, **kwargs: Any) -> HttpResponseImpl:
        url = urlparse(request.url)
        if (injected := self._injected(request, f"{url.netloc}{unquote(url.path)}")) is not None:
            return injected
        if (fault := self._fault(request, url.netloc)) is not None:
            self.faults.append((fault.status_code, request.method, unquote(url.path)))
            return fault
        body = request.body if isinstance(request.body, bytes) else (request.body or "").encode() \
            if isinstance(request.body, str) else b"".join(request.body) if request.body else b""
        if not body and getattr(request, "content", None) is not None and isinstance(request.content, bytes):
            body = request.content
        recorded = Recorded(request.method, url.netloc, unquote(url.path),
                            {k: v[0] for k, v in parse_qs(url.query).items()}, dict(request.headers), body)
        self.requests.append(recorded)
        if (unknown := self._unschemed(request, recorded)) is not None:
            return unknown
        if (refused := self._validate(request, recorded)) is not None:
            return refused
        if recorded.host == BLOB_HOST and (leased := self.leases.handle(request, recorded, self.blobs)) is not None:
            return leased
        for method, pattern, handler in self._routes:
            if method == request.method and (match := pattern.fullmatch(f"{url.netloc}{recorded.path}")):
                return handler(request, recorded, **match.groupdict())
        return _error(request, 404, "NoRoute", f"the fake has no route for {request.method} {request.url}")

    def _unschemed(self, request: Any, recorded: Recorded) -> HttpResponseImpl | None:
        """The fake's own 500, naming the route, for a request it cannot hold to a contract: an ARM route its
        api-version's spec file lacks, or a data-plane route on no allow-list entry; an api-version no spec file has
        is ARM's 400 ``InvalidApiVersionParameter`` (final: a transient guard must not wait it out), named too. It
        carries
        ``x-ms-retry-after-ms``: azure-core retries a 500 ten times with a backoff of minutes in all, and the test
        should fail on the message, not wait for it. Each ARM route served is counted in ``SEEN_ARM_ROUTES``."""
        version = recorded.query.get("api-version", "")
        if recorded.host == ARM:
            if ARM_POLLING.fullmatch(recorded.path):
                return None
            route = SPEC.route(recorded.method, recorded.path, version)
            if route is not None:
                key = (recorded.method, route, version)
                SEEN_ARM_ROUTES[key] = SEEN_ARM_ROUTES.get(key, 0) + 1
                self.arm_routes.add(key)
                return None
            what = (f"the fake has no schema for {recorded.method} {recorded.path} at api-version "
                    f"{version or '(none)'}: add one to tests/mlrunway/azure/spec")
            if version not in SPEC.specs:  # ARM's own answer to an api-version it does not know: a 400, final
                self._no_schema(what)
                known = ", ".join(sorted(SPEC.specs))
                return _error(request, 400, "InvalidApiVersionParameter", f"The api-version '{version}' is invalid. "
                              f"The supported versions are '{known}'.")
        elif any(re.fullmatch(pattern, f"{recorded.host}{recorded.path}") for pattern, _ in DATA_PLANE.values()):
            return None
        else:
            what = (f"the fake has no schema for {recorded.method} {recorded.host}{recorded.path}, which is on no "
                    "data-plane allow-list: add a spec to tests/mlrunway/azure/spec, or an entry with its reason to "
                    "DATA_PLANE in fake_azureml.py")
        self._no_schema(what)
        return _response(request, 500, {"error": {"code": "NoSchema", "message": what}}, {"x-ms-retry-after-ms": "1"})

    def _no_schema(self, what: str) -> None:
        if what not in self.no_schema:
            self.no_schema.append(what)
            NO_SCHEMA.append(what)

    def _validate(self, request: Any, recorded: Recorded) -> HttpResponseImpl | None:
        """The service's 400 for a body its api-version's definitions refuse (``spec_validator``), and for what
        the service refuses beyond them: traffic not summing to 100 (or 0), mirror traffic over 50, a changed
        identity (the docs call it immutable) or create-only field (``x-ms-mutability`` without update), and a new
        path for an existing model, data or code version (``ASSET_PATHS``: the service's own error text)."""
        if recorded.host != ARM or recorded.method not in ("PUT", "PATCH", "POST") or not recorded.body:
            return None
        version, body = recorded.query.get("api-version", ""), recorded.json()
        problems = SPEC.check_request(recorded.method, recorded.path, version, body)
        if recorded.method == "PUT" and isinstance(body, dict) and SPEC.operation("PUT", recorded.path, version):
            problems += self._refused_change(recorded, version, body)
        if not problems and (changed := self._asset_path_changed(recorded, body)) is not None:
            self.refused.append((recorded.method, recorded.path, [changed]))
            return _error(request, 400, "UserError", "Asset paths cannot be updated.")  # ASSET_PATHS: the SDK's text
        if not problems:
            return None
        self.refused.append((recorded.method, recorded.path, problems))
        return _response(request, 400, {"error": {
            "code": "UserError", "message": f"The request is invalid: {'; '.join(problems)}",
            "details": [{"code": "BadArgument", "message": problem} for problem in problems]}})

    def _refused_change(self, recorded: Recorded, version: str, body: dict[str, Any]) -> list[str]:
        props = body.get("properties") or {}
        problems = []
        if "/deployments/" not in recorded.path and "/onlineEndpoints/" in recorded.path:
            traffic, mirror = props.get("traffic") or {}, props.get("mirrorTraffic") or {}
            if sum(traffic.values()) not in (0, 100):
                problems.append(f"properties.traffic: {traffic} must sum to 100")
            if sum(mirror.values()) > 50:
                problems.append(f"properties.mirrorTraffic: {mirror} must sum to at most 50")
        stored = self.resources.get(recorded.path.lower())
        if stored is None:
            return problems
        if "identity" in stored and (body.get("identity") or {}).get("type") != stored["identity"].get("type"):
            problems.append(f"identity: the {stored['identity'].get('type')} identity of {recorded.path.rsplit('/', 1)[1]} "
                            f"cannot be changed to {(body.get('identity') or {}).get('type')}")
        asset_path = self._asset_kind(recorded.path)
        for field in SPEC.create_only_fields(recorded.method, recorded.path, version, body):
            if asset_path and field == f"properties.{ASSET_PATHS[asset_path]}":
                continue  # the service's own answer for an asset path: _asset_path_changed
            if field.count(".") == 1 and _at(body, field) != _at(stored, field):  # a whole top-level property
                problems.append(f"{field}: cannot be changed after creation ({_at(stored, field)!r} -> "
                                f"{_at(body, field)!r})")
        return problems

    @staticmethod
    def _asset_kind(path: str) -> str | None:
        """``models``, ``data`` or ``codes`` for the path of an asset version, else None."""
        found = re.fullmatch(rf"{re.escape(WS_PATH)}/(models|data|codes)/[^/]+/versions/[^/]+", path, re.IGNORECASE)
        return found[1].lower() if found else None

    def _asset_path_changed(self, recorded: Recorded, body: Any) -> str | None:
        """Why a PUT of an existing asset version is refused for a new path (``ASSET_PATHS``), else None. The path
        it was created with counts as unchanged even where the fake stored it rewritten (``rewrite_model_uris``)."""
        kind = self._asset_kind(recorded.path) if recorded.method == "PUT" and isinstance(body, dict) else None
        if kind is None:
            return None
        field, key = ASSET_PATHS[kind], recorded.path.lower()
        sent = (body.get("properties") or {}).get(field)
        stored = self.resources.get(key)
        if stored is None:
            self.asset_paths[key] = sent
            return None
        if sent in (stored["properties"].get(field), self.asset_paths.get(key)):
            return None
        return (f"properties.{field}: {recorded.path.rsplit('/', 3)[1]} version {recorded.path.rsplit('/', 1)[1]} "
                f"is at {stored['properties'].get(field)!r} and cannot move to {sent!r}: register a new version")

    # -- what the tests ask ------------------------------------------------------------------------
    def take_no_schema(self) -> list[str]:
        """The named 500s this fake answered, taken off it and off the session's record (``NO_SCHEMA``): for a
        test that provokes them on purpose, once it has checked them."""
        taken, self.no_schema = self.no_schema, []
        for what in taken:
            NO_SCHEMA.remove(what)
        return taken

    def sent(self, method: str, path_pattern: str) -> list[Recorded]:
        """Requests with this method whose host+path matches the pattern (a regular expression)."""
        pattern = re.compile(path_pattern)
        return [r for r in self.requests if r.method == method and pattern.search(f"{r.host}{r.path}")]

    def resource(self, kind: str, *names: str) -> dict[str, Any] | None:
        path = WS_PATH + "".join(f"/{k}/{n}" for k, n in zip(kind.split("/"), names, strict=True))
        return self.resources.get(path.lower())

    # -- routes --------------------------------------------------------------------------------------
    def _table(self) -> list[tuple[str, str, Callable[..., HttpResponseImpl]]]:
        ws = f"{ARM}{re.escape(WS_PATH)}"
        hist = f"{API_HOST}/history/v1.0{re.escape(WS_PATH)}"
        mlflow = f"{API_HOST}/mlflow/v1.0{re.escape(WS_PATH)}/api/2.0/mlflow"
        return [
            ("GET", ws, self._workspace),
            ("GET", f"{ws}/datastores", self._datastores),
            ("GET", f"{ws}/datastores/(?P<name>[^/]+)", self._datastore),
            ("POST", f"{ws}/datastores/(?P<name>[^/]+)/listSecrets", self._datastore_secrets),
            ("GET", f"{ws}/codes/(?P<name>[^/]+)/versions", self._list_versions),
            ("POST", f"{ws}/codes/(?P<name>[^/]+)/versions/(?P<version>[^/]+)/startPendingUpload", self._pending_upload),
            ("POST", f"{ws}/jobs/(?P<name>[^/]+)/cancel", self._cancel_job),
            ("GET", f"{ws}/jobs/(?P<name>[^/]+)", self._get_job),
            ("PUT", f"{ws}/jobs/(?P<name>[^/]+)", self._put_job),
            ("GET", f"{ws}/jobs", self._list_jobs),
            ("GET", f"{ws}/models", self._list_model_containers),
            ("GET", f"{ws}/models/(?P<name>[^/]+)/versions", self._list_versions),
            ("PUT", f"{ws}/models/(?P<name>[^/]+)/versions/(?P<version>[^/]+)", self._put_model),
            ("POST", f"{ws}/onlineEndpoints/(?P<name>[^/]+)/listKeys", self._list_keys),
            ("POST", f"{ws}/onlineEndpoints/(?P<name>[^/]+)/token", self._token),
            ("POST", f"{ws}/onlineEndpoints/(?P<name>[^/]+)/deployments/(?P<dep>[^/]+)/getLogs", self._get_logs),
            ("PUT", f"{ws}/onlineEndpoints/(?P<name>[^/]+)(/deployments/(?P<dep>[^/]+))?", self._put_online),
            ("DELETE", f"{ws}/onlineEndpoints/(?P<name>[^/]+)(/deployments/(?P<dep>[^/]+))?", self._delete_online),
            ("GET", f"{ARM}{re.escape(OPERATIONS)}/mfeOperation(?:sStatus|Results)/(?P<op>[^/]+)", self._operation),
            ("GET", f"{ws}/computes/(?P<name>[^/]+)", self._compute),
            ("GET", f"{ARM}{re.escape(f'/subscriptions/{SUBSCRIPTION}/providers/Microsoft.MachineLearningServices/')}"
                    "locations/(?P<location>[^/]+)/vmSizes", self._vm_sizes),
            ("GET", f"{ws}/schedules", self._list_schedules),
            ("PUT", f"{ws}/schedules/(?P<name>[^/]+)", self._put_schedule),
            ("DELETE", f"{ws}/schedules/(?P<name>[^/]+)", self._delete_schedule),
            ("GET", f"{ws}/onlineEndpoints/(?P<name>[^/]+)/providers/Microsoft.Insights/metrics", self._metrics),
            ("PUT", f"{ws}/.+", self._put_generic),
            ("GET", f"{ws}/.+", self._get_generic),
            ("GET", f"{API_HOST}/discovery", self._discovery),
            ("GET", f"{hist}/runs/(?P<run>[^/]+)/children", self._run_children),
            ("GET", r"prices\.azure\.com(?::443)?/api/retail/prices", self._retail_prices),
            ("GET", f"{hist}/runs/(?P<run>[^/]+)/details", self._run_details),
            ("GET", f"{mlflow}/runs/get", self._mlflow_run),
            ("GET", f"{mlflow}/metrics/get-history", self._mlflow_history),
            ("POST", f"{mlflow}/runs/log-batch", self._mlflow_log_batch),
            ("PUT", f"{BLOB_HOST}/(?P<blob>[^/]+/.+)", self._put_blob),
            ("HEAD", f"{BLOB_HOST}/(?P<blob>[^/]+/.+)", self._head_blob),
            ("GET", f"{BLOB_HOST}/(?P<container>[^/]+)", self._list_blobs),
            ("GET", f"{BLOB_HOST}/(?P<blob>[^/]+/.+)", self._get_blob),
            ("POST", r"(?P<endpoint>[a-z0-9-]+)\." + re.escape(REGION) + r"\.inference\.ml\.azure\.com/score",
             self._score),
        ]

    # -- ARM: generic resources ----------------------------------------------------------------------
    def _arm(self, request: Any) -> str:
        return urlparse(request.url).path

    def _store(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        parts = path.split("/")
        kind = "/".join(p for p in parts[9::2])
        resource = {
            **body,
            "id": path,
            "name": parts[-1],
            "type": f"Microsoft.MachineLearningServices/workspaces/{kind}",
            "systemData": {"createdAt": "2026-11-22T10:00:00Z", "createdBy": "mlrunway-tests",
                           "createdByType": "Application", "lastModifiedAt": "2026-11-22T10:00:00Z"},
        }
        self.resources[path.lower()] = resource
        return resource

    def _put_generic(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        path = self._arm(request)
        created = path.lower() not in self.resources
        body = recorded.json()
        body.setdefault("properties", {})
        if "/codes/" in path or "/environments/" in path or "/models/" in path:
            body["properties"].setdefault("provisioningState", "Succeeded")
        return _response(request, 201 if created else 200, self._store(path, body))

    def _get_generic(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        path = self._arm(request).lower()
        if len(path[len(WS_PATH):].strip("/").split("/")) % 2:  # a collection: .../onlineEndpoints/x/deployments
            depth = path.count("/") + 1
            return self.page(request, recorded, [r for p, r in self.resources.items()
                                                 if p.startswith(path + "/") and p.count("/") == depth])
        if (op := self.provisioning.get(path)) is not None:  # the service provisions whether or not anyone polls
            self._advance(op)
        resource = self.resources.get(path)
        if resource is None:
            return _error(request, 404, "UserError", f"Resource {self._arm(request)} not found")
        return _response(request, 200, resource)

    def _list_versions(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        prefix = self._arm(request).lower() + "/"
        values = [r for p, r in self.resources.items() if p.startswith(prefix)]
        view = recorded.query.get("listViewType", "ActiveOnly")  # the spec's default hides archived versions
        if view != "All":
            archived = view == "ArchivedOnly"
            values = [r for r in values if bool(r["properties"].get("isArchived")) == archived]
        if "hash" in recorded.query:  # code assets found by content hash: a new hash is never there yet
            values = [r for r in values if r["properties"].get("properties", {}).get("hash") == recorded.query["hash"]]
        values.sort(key=lambda r: int(r["name"]) if r["name"].isdigit() else 0, reverse=True)
        return self.page(request, recorded, values)

    # -- computes ------------------------------------------------------------------------------------
    def _compute(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        """An AmlCompute cluster as the spec's example (Compute/get/AmlCompute.json) has it."""
        if name not in self.computes:
            return _error(request, 404, "ResourceNotFound", f"Compute {name} was not found in workspace {WORKSPACE}")
        return _response(request, 200, {
            "id": f"{WS_PATH}/computes/{name}", "type": "Microsoft.MachineLearningServices/workspaces/computes",
            "name": name, "location": REGION,
            "properties": {"computeType": "AmlCompute", "provisioningState": "Succeeded", "description": name,
                           "createdOn": "2026-11-01T10:00:00.0000000+00:00",
                           "modifiedOn": "2026-11-01T10:00:00.0000000+00:00",
                           "properties": {"vmSize": self.computes[name], "vmPriority": "Dedicated", "osType": "Linux",
                                          "scaleSettings": {"maxNodeCount": 4, "minNodeCount": 0,
                                                            "nodeIdleTimeBeforeScaleDown": "PT5M"},
                                          "allocationState": "Steady", "currentNodeCount": 0, "targetNodeCount": 0,
                                          "remoteLoginPortPublicAccess": "Disabled", "isolatedNetwork": False}},
        })

    def _vm_sizes(self, request: Any, recorded: Recorded, location: str) -> HttpResponseImpl:
        """VirtualMachineSizeListResult: the sizes of ``region_sizes`` in REGION, none elsewhere (not paged)."""
        names = self.region_sizes if location.lower() == REGION else []
        return _response(request, 200, {"value": [{
            "name": name, "family": VM_SIZES[name]["family"], "vCPUs": VM_SIZES[name]["vCPUs"],
            "gpus": VM_SIZES[name]["gpus"], "osVhdSizeMB": 1047552,
            "maxResourceVolumeMB": VM_SIZES[name]["maxResourceVolumeMB"], "memoryGB": VM_SIZES[name]["memoryGB"],
            "lowPriorityCapable": True, "premiumIO": True, "supportedComputeTypes": ["AmlCompute", "ComputeInstance"],
        } for name in names]})

    # -- workspace and datastores ---------------------------------------------------------------------
    def _workspace(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        return _response(request, 200, {
            "id": WS_PATH, "name": WORKSPACE, "location": REGION, "type": "Microsoft.MachineLearningServices/workspaces",
            "kind": "Default", "identity": {"type": "SystemAssigned"},
            "properties": {
                "workspaceId": "5e1f0c2a-7b3d-4c8e-9f1a-2b3c4d5e6f70", "tenantId": TENANT,
                "discoveryUrl": f"https://{REGION}.api.azureml.ms/discovery",
                "mlFlowTrackingUri": f"azureml://{API_HOST}/mlflow/v1.0{WS_PATH}",
                "storageAccount": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/"
                                  f"Microsoft.Storage/storageAccounts/{STORAGE}",
                "provisioningState": "Succeeded",
            },
        })

    def _datastore_body(self, name: str = "workspaceblobstore") -> dict[str, Any]:
        return {"id": f"{WS_PATH}/datastores/{name}", "name": name,
                "type": "Microsoft.MachineLearningServices/workspaces/datastores",
                "properties": {"datastoreType": "AzureBlob", "accountName": STORAGE,
                               "containerName": self.datastores[name], "endpoint": "core.windows.net",
                               "protocol": "https", "isDefault": name == self.default_datastore,
                               "credentials": {"credentialsType": "AccountKey"}}}

    def _datastores(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        """Datastores_List; ``isDefault=true`` (``datastores.get_default``) lists the default one alone."""
        names = [n for n in self.datastores if n != "workspaceartifactstore"]
        if recorded.query.get("isDefault", "").lower() == "true":
            names = [self.default_datastore]
        return _response(request, 200, {"value": [self._datastore_body(n) for n in names]})

    def _datastore(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        if name not in self.datastores:
            return _error(request, 404, "UserError", f"datastore {name} not found")
        return _response(request, 200, self._datastore_body(name))

    def container(self, uri: str) -> str:
        """The blob container of the datastore an ``azureml://datastores/<name>/paths/...`` URI names."""
        store = uri.split("/datastores/", 1)[1].split("/", 1)[0] if "/datastores/" in uri else ""
        return self.datastores.get(store, CONTAINER)

    def _datastore_secrets(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        return _response(request, 200, {"secretsType": "AccountKey",
                                        "key": base64.b64encode(b"fake-storage-account-key").decode()})

    def _pending_upload(self, request: Any, recorded: Recorded, name: str, version: str) -> HttpResponseImpl:
        """A temporary blob reference with a SAS, where the SDK uploads the code snapshot."""
        blob = f"https://{BLOB_HOST}/{uuid.uuid4().hex}"  # a container of its own
        return _response(request, 200, {
            "pendingUploadId": str(uuid.uuid4()), "pendingUploadType": "TemporaryBlobReference",
            "blobReferenceForConsumption": {
                "blobUri": blob,
                "storageAccountArmId": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/"
                                       f"Microsoft.Storage/storageAccounts/{STORAGE}",
                "credential": {"credentialType": "SAS", "sasUri": f"{blob}?sv=2021-08-06&sr=c&sig=fake"},
            },
        })

    # -- blob storage --------------------------------------------------------------------------------
    def _put_blob(self, request: Any, recorded: Recorded, blob: str) -> HttpResponseImpl:
        if recorded.query.get("comp") == "metadata":
            return _response(request, 200, headers={"ETag": '"0x1"'})
        self.blobs[blob] = recorded.body
        return _response(request, 201, headers={"ETag": '"0x1"', "Last-Modified": "Sun, 22 Nov 2026 10:00:00 GMT",
                                                 "Content-MD5": ""})

    def _blob_headers(self, content: bytes) -> dict[str, str]:
        return {"Content-Length": str(len(content)), "ETag": '"0x1"', "x-ms-blob-type": "BlockBlob",
                "Last-Modified": "Sun, 22 Nov 2026 10:00:00 GMT", "Accept-Ranges": "bytes"}

    def _head_blob(self, request: Any, recorded: Recorded, blob: str) -> HttpResponseImpl:
        if blob not in self.blobs:
            return _response(request, 404, headers={"x-ms-error-code": "BlobNotFound"})
        return _response(request, 200, headers=self._blob_headers(self.blobs[blob]),
                         content_type="application/octet-stream")

    def _get_blob(self, request: Any, recorded: Recorded, blob: str) -> HttpResponseImpl:
        if blob not in self.blobs:
            return _response(request, 404, b"", headers={"x-ms-error-code": "BlobNotFound"})
        content = self.blobs[blob]
        headers = self._blob_headers(content)
        if request.headers.get("x-ms-range") or request.headers.get("Range"):
            headers["Content-Range"] = f"bytes 0-{max(len(content) - 1, 0)}/{len(content)}"
            return _response(request, 206, content, headers, "application/octet-stream")
        return _response(request, 200, content, headers, "application/octet-stream")

    def _list_blobs(self, request: Any, recorded: Recorded, container: str) -> HttpResponseImpl:
        """List Blobs, flat or by ``delimiter`` (folders as BlobPrefix entries), in the service's XML."""
        prefix, delimiter = recorded.query.get("prefix", ""), recorded.query.get("delimiter")
        names = sorted(k.split("/", 1)[1] for k in self.blobs if k.startswith(f"{container}/{prefix}"))
        blobs, folders = [], set()
        for name in names:
            rest = name[len(prefix):]
            if delimiter and delimiter in rest:
                folders.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
            else:
                size = len(self.blobs[f"{container}/{name}"])
                blobs.append(f"<Blob><Name>{name}</Name><Properties><Content-Length>{size}</Content-Length>"
                             f"<BlobType>BlockBlob</BlobType><Last-Modified>Sun, 22 Nov 2026 10:00:00 GMT"
                             f"</Last-Modified><Etag>0x1</Etag></Properties><Metadata /></Blob>")
        items = "".join(blobs) + "".join(f"<BlobPrefix><Name>{f}</Name></BlobPrefix>" for f in sorted(folders))
        xml = (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="https://{BLOB_HOST}/" '
               f'ContainerName="{container}"><Prefix>{prefix}</Prefix>'
               f'{f"<Delimiter>{delimiter}</Delimiter>" if delimiter else ""}<Blobs>{items}</Blobs><NextMarker />'
               f'</EnumerationResults>')
        return _response(request, 200, xml.encode(), content_type="application/xml")

    # -- jobs ----------------------------------------------------------------------------------------
    def _studio(self, name: str) -> str:
        return f"https://ml.azure.com/runs/{name}?wsid={WS_PATH}&tid={TENANT}"

    def _put_job(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        path = self._arm(request)
        if path.lower() in self.resources:
            return _response(request, 200, self.resources[path.lower()])
        body = recorded.json()
        props = body["properties"]
        compute = (props.get("computeId") or "").rsplit("/computes/", 1)[-1] if props.get("computeId") else None
        if compute is not None and compute not in self.computes:  # the service's 400 for a compute it lacks
            return _error(request, 400, "UserError", f"Compute {compute} not found in workspace {WORKSPACE}. "
                          "Create the compute target or use an existing one.")
        props.update(status="NotStarted", services={"Studio": {"jobServiceType": "Studio", "endpoint": self._studio(name)}})
        props.setdefault("properties", {})
        final = self.job_final.get(name, "Completed")
        self.job_script[name] = ["Queued"] * self.steps + ["Running"] * self.steps + [final]
        self.runs[name] = {"parent": None, "params": {}, "history": [], "metrics": {}}
        if props["jobType"] == "Sweep":
            for index, trial in enumerate(self.sweep_trials.get(name, [])):
                self.runs[f"{name}_{index}"] = {"parent": name, "trial": trial, "params": trial.params,
                                                "history": trial.history, "status": "Running"}
        else:
            self.runs[name].update(history=[0.6, 0.8, 0.9], params={})
        return _response(request, 201, self._store(path, body))

    def _get_job(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        job = self.resources.get(self._arm(request).lower())
        if job is None:
            return _error(request, 404, "UserError", f"job {name} not found")
        script = self.job_script.get(name, [])
        if script:
            self._set_status(name, script.pop(0))
        return _response(request, 200, job)

    def _list_jobs(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        prefix = self._arm(request).lower() + "/"
        return self.page(request, recorded, [r for p, r in self.resources.items() if p.startswith(prefix)])

    def _set_status(self, name: str, status: str) -> None:
        job = self.resources[f"{WS_PATH}/jobs/{name}".lower()]
        props = job["properties"]
        if props["status"] in ("Completed", "Failed", "Canceled"):
            return
        props["status"] = status
        self.runs[name]["status"] = status
        self._time(name, status)
        children = [run_id for run_id, run in self.runs.items() if run.get("parent") == name]
        if status == "Running":  # the service starts the sweep's trials as it runs
            for child in children:
                self._time(child, "Running")
        if status in ("Completed", "Failed", "Canceled"):
            self.job_script.pop(name, None)
            if status == "Completed" and props.get("jobType") == "Command" and props.get("tags", {}).get(ROLE_TAG):
                self._run_command(name, props)
            for child in children:
                trial = self.runs[child]["trial"]
                self.runs[child]["status"] = trial.status if status == "Completed" else "Canceled"
                self._time(child, "Running")
                self._time(child, self.runs[child]["status"])
                if self.trial_outputs is not None and trial.history:
                    for file in sorted(self.trial_outputs.rglob("*")):
                        if file.is_file():
                            key = (f"{ARTIFACT_CONTAINER}/ExperimentRun/dcid.{child}/outputs/model/"
                                   f"{file.relative_to(self.trial_outputs)}")
                            self.blobs[key] = file.read_bytes()
            if children and status == "Completed":
                goal = props["objective"]["goal"].lower()
                pick = max if goal == "maximize" else min
                scored = [c for c in children if self.runs[c]["history"]]
                best = pick(scored, key=lambda c: pick(self.runs[c]["history"]))
                props["properties"].update(best_child_run_id=best, score=str(pick(self.runs[best]["history"])))

    def _cancel_job(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        if f"{WS_PATH}/jobs/{name}".lower() not in self.resources:
            return _error(request, 404, "UserError", f"job {name} not found")
        self.job_script[name] = ["CancelRequested", "Canceled"]
        op = self._new_operation(then=lambda: self._set_status(name, "Canceled"), results=True)
        return _response(request, 202, None, {"Location": op, **self._wait_header()})

    # -- long-running operations ---------------------------------------------------------------------
    def _new_operation(self, then: Callable[[], Any], *, results: bool = False) -> str:
        """An ARM async operation: its status URL (for Azure-AsyncOperation, answered 200 with a status) or,
        with ``results``, its result URL (for Location, answered 202 until done)."""
        op_id = str(uuid.uuid4())
        self.operations[op_id] = {"left": self.steps, "then": then, "error": None, "results": results}
        kind = "mfeOperationResults" if results else "mfeOperationsStatus"
        return f"https://{ARM}{OPERATIONS}/{kind}/{op_id}?api-version=2024-04-01"

    def _advance(self, op: str) -> bool:
        """One step of the service's own progress on an operation; True once it has finished."""
        state = self.operations[op]
        if state["left"] > 0:
            state["left"] -= 1
            if state.get("during") is not None:
                state["during"]()
            return False
        if state["then"] is not None:
            state["error"] = state["then"]()
            state["then"] = None
        return True

    def _operation(self, request: Any, recorded: Recorded, op: str) -> HttpResponseImpl:
        state = self.operations[op]
        if not self._advance(op):
            if state["results"]:
                return _response(request, 202, None, {"Location": request.url, **self._wait_header()})
            return _response(request, 200, {"id": recorded.path, "name": op, "status": "InProgress"},
                             self._wait_header())
        if state["results"]:
            return _response(request, 204)
        if state["error"]:
            return _response(request, 200, {"id": recorded.path, "name": op, "status": "Failed", "error": state["error"]})
        return _response(request, 200, {"id": recorded.path, "name": op, "status": "Succeeded"})

    # -- schedules (a model monitor is one: its action is CreateMonitor) ------------------------------
    def _put_schedule(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        """Schedules_CreateOrUpdate (2023-06-01-preview, the SDK's api-version for schedules), an LRO whose result
        is the resource itself (``final-state-via: original-uri``). A new schedule is a 201 with
        Azure-AsyncOperation (the spec declares it there only) and stays Creating until its operation finishes;
        an update is a 200, Succeeded at once, so the poller reads a terminal state in the body and asks
        nothing more. The body was checked against the spec (``_validate``), create-only fields included."""
        path = self._arm(request)
        body = SPEC.as_stored("PUT", recorded.path, recorded.query.get("api-version", ""), recorded.json())
        props = body["properties"]
        props.setdefault("isEnabled", True)  # the spec's default
        created = path.lower() not in self.resources
        props["provisioningState"] = "Creating" if created else "Succeeded"
        resource = self._store(path, body)
        if not created:
            return _response(request, 200, resource)

        def finish() -> None:
            resource["properties"]["provisioningState"] = "Succeeded"

        op = self._new_operation(then=finish)
        self.provisioning[path.lower()] = urlparse(op).path.rsplit("/", 1)[1]
        return _response(request, 201, resource, {"Azure-AsyncOperation": op, **self._wait_header()})

    def _list_schedules(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        """Schedules_List: ``listViewType`` EnabledOnly (the spec's default), DisabledOnly or All."""
        prefix = self._arm(request).lower() + "/"
        values = [r for p, r in self.resources.items() if p.startswith(prefix)]
        view = recorded.query.get("listViewType", "EnabledOnly").lower()
        if view != "all":
            values = [r for r in values if bool(r["properties"].get("isEnabled", True)) == (view == "enabledonly")]
        return self.page(request, recorded, values)

    def _delete_schedule(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        """Schedules_Delete: 202 with Location (``final-state-via: location``), 204 when there is none."""
        path = self._arm(request).lower()
        if path not in self.resources:
            return _response(request, 204)

        def gone() -> None:
            self.resources.pop(path, None)
            self.provisioning.pop(path, None)

        return _response(request, 202, None, {"Location": self._new_operation(then=gone, results=True),
                                              **self._wait_header()})

    # -- models --------------------------------------------------------------------------------------
    def _list_model_containers(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        """ModelContainers_List: one container per model name, made from its stored versions, in the order the
        models were first registered (the spec gives no order). The fake archives no container: each is active, so
        ``listViewType`` ArchivedOnly lists none."""
        versions: dict[str, list[int]] = {}
        names: dict[str, str] = {}
        for path, resource in self.resources.items():
            if self._asset_kind(path) == "models":
                model = resource["id"].split("/")[-3]
                names.setdefault(model.lower(), model)
                versions.setdefault(model.lower(), []).append(int(resource["name"]) if resource["name"].isdigit() else 0)
        view = recorded.query.get("listViewType", "ActiveOnly")  # the spec's default
        containers = [] if view == "ArchivedOnly" else [{
            "id": f"{WS_PATH}/models/{names[key]}", "name": names[key],
            "type": "Microsoft.MachineLearningServices/workspaces/models",
            "systemData": {"createdAt": "2026-11-22T10:00:00Z", "createdBy": "mlrunway-tests",
                           "createdByType": "Application", "lastModifiedAt": "2026-11-22T10:00:00Z"},
            "properties": {"isArchived": False, "latestVersion": str(max(numbers)),
                           "nextVersion": str(max(numbers) + 1), "provisioningState": "Succeeded"},
        } for key, numbers in versions.items()]
        return self.page(request, recorded, containers)

    def _put_model(self, request: Any, recorded: Recorded, name: str, version: str) -> HttpResponseImpl:
        body = recorded.json()
        uri = body["properties"].get("modelUri", "")
        job = re.match(r"azureml://jobs/([^/]+)/outputs/artifacts/paths/(.*)$", uri)
        if job and self.rewrite_model_uris:  # one plausible service: it resolves a job URI to the artifact store
            body["properties"]["modelUri"] = (f"azureml://subscriptions/{SUBSCRIPTION}/resourcegroups/{RESOURCE_GROUP}"
                                              f"/workspaces/{WORKSPACE}/datastores/workspaceartifactstore/paths/"
                                              f"ExperimentRun/dcid.{job[1]}/{job[2]}")
        body["properties"].setdefault("provisioningState", "Succeeded")
        body["properties"].setdefault("flavors", {})
        created = self._arm(request).lower() not in self.resources
        return _response(request, 201 if created else 200, self._store(self._arm(request), body))

    # -- online endpoints and deployments ------------------------------------------------------------
    def _put_online(self, request: Any, recorded: Recorded, name: str, dep: str | None = None) -> HttpResponseImpl:
        path = self._arm(request)
        if self.conflict_writes:  # another operation on the endpoint is still running
            self.conflict_writes -= 1
            return _error(request, 409, "Conflict", f"Endpoint {name} is busy: another operation (a deployment "
                          "update) is in progress. Try again once it has finished.")
        if path.lower() in self.failed_creations:
            return _error(request, 400, "BadArgument", f"Deployment {dep} failed its creation and cannot be updated: "
                          "delete it and create it again.")
        if dep is None and self.region_endpoints.get(name.lower(), WS_PATH) != WS_PATH:
            # The service's answer, as users have quoted it (the spec gives none): a 400 whose words are in the
            # error's details (ErrorDetail.details, code InferencingClientCallFailed), under a general message.
            return _response(request, 400, {"error": {
                "code": "UserError", "message": "Online endpoint creation failed: a call to the inferencing "
                "service was refused.", "details": [{"code": "InferencingClientCallFailed", "message":
                "There is already an endpoint with this name, Endpoint name needs to be unique within a region. "
                "Try some other name."}]}})
        body = SPEC.as_stored("PUT", recorded.path, recorded.query.get("api-version", ""), recorded.json())
        props = body["properties"]
        if dep is None:
            self.region_endpoints[name.lower()] = WS_PATH
            props.update(scoringUri=f"https://{name}.{REGION}.inference.ml.azure.com/score",
                         swaggerUri=f"https://{name}.{REGION}.inference.ml.azure.com/swagger.json")
            for deployment, weight in (props.get("traffic") or {}).items():
                if weight and self.resource("onlineEndpoints/deployments", name, deployment) is None:
                    return _error(request, 400, "BadArgument", f"traffic names deployment {deployment}, which does not exist")
        else:
            if self.resource("onlineEndpoints", name) is None:
                return _error(request, 404, "UserError", f"endpoint {name} not found")
            props.setdefault("scaleSettings", {"scaleType": "Default"})
        created = path.lower() not in self.resources
        props["provisioningState"] = "Creating" if created else "Updating"
        resource = self._store(path, body)
        failure = self.deployment_failure if dep is not None else None

        def finish() -> dict[str, Any] | None:
            resource["properties"]["provisioningState"] = "Failed" if failure else "Succeeded"
            if failure and created:
                self.failed_creations.add(path.lower())
            if failure:
                return {"code": self.deployment_failure_code, "message": failure}
            if dep is not None:
                self._scorers.pop(f"{name}/{dep}", None)
            return None

        op = self._new_operation(then=finish)
        self.provisioning[path.lower()] = op_id = urlparse(op).path.rsplit("/", 1)[1]
        if dep is not None and not created and self.scaling:  # an update scales the deployment out on its way
            self.operations[op_id]["during"] = lambda: resource["properties"].update(provisioningState="Scaling")
        # The resource's free-form properties carry its last operation's URL (azureml-examples' deploy-rest.sh
        # reads it there); the spec declares Azure-AsyncOperation on 201 only, so an update answered 200 has none.
        resource["properties"].setdefault("properties", {})["AzureAsyncOperationUri"] = op
        headers = {"Azure-AsyncOperation": op, **self._wait_header()} if created else {}
        return _response(request, 201 if created else 200, resource, headers)

    def _delete_online(self, request: Any, recorded: Recorded, name: str, dep: str | None = None) -> HttpResponseImpl:
        path = self._arm(request).lower()
        if path not in self.resources:
            return _response(request, 204)

        def gone() -> None:
            for key in [k for k in self.resources if k == path or k.startswith(path + "/")]:
                del self.resources[key]
                self.failed_creations.discard(key)
            if dep is None:
                self.region_endpoints.pop(name.lower(), None)

        return _response(request, 202, None, {"Location": self._new_operation(then=gone, results=True),
                                              **self._wait_header()})

    def _list_keys(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        if self.resource("onlineEndpoints", name) is None:
            return _error(request, 404, "UserError", f"endpoint {name} not found")
        return _response(request, 200, self.keys)

    def _token(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        """An AMLToken endpoint's scoring token (``EndpointAuthToken``: epoch seconds), valid for
        ``token_lifetime_s``, to be refreshed after half of it."""
        if self.resource("onlineEndpoints", name) is None:
            return _error(request, 404, "UserError", f"endpoint {name} not found")
        token, now = uuid.uuid4().hex, int(time.time())
        self.tokens[token] = now + self.token_lifetime_s
        return _response(request, 200, {"accessToken": token, "expiryTimeUtc": now + self.token_lifetime_s,
                                        "refreshAfterTimeUtc": now + self.token_lifetime_s // 2, "tokenType": "Bearer"})

    def _authorized(self, endpoint: dict[str, Any], header: str) -> bool:
        """The scoring URI's check, by the endpoint's auth mode: a key, an unexpired token of the endpoint's token
        route (AMLToken), or a Microsoft Entra token of the caller (AADToken: the fake credential's)."""
        token = header.removeprefix("Bearer ")
        mode = str(endpoint["properties"].get("authMode", "Key")).lower()
        if mode == "amltoken":
            return self.tokens.get(token, 0) > time.time()
        if mode == "aadtoken":
            return token == FakeCredential.TOKEN
        return token in self.keys.values()

    def _get_logs(self, request: Any, recorded: Recorded, name: str, dep: str) -> HttpResponseImpl:
        tail = recorded.json().get("tail", 100)
        if recorded.json().get("containerType") == "StorageInitializer":
            return _response(request, 200, {"content": "\n".join(self.storage_log[-tail:])})
        lines = ["Starting scoring container", f"Loading model for deployment {dep}"]
        if self.deployment_failure:
            lines.append(f"ERROR: {self.deployment_failure}")
        return _response(request, 200, {"content": "\n".join(lines[-tail:])})

    def _score(self, request: Any, recorded: Recorded, endpoint: str) -> HttpResponseImpl:
        resource = self.resource("onlineEndpoints", endpoint)
        if resource is None:
            return _error(request, 404, "NotFound", f"no endpoint {endpoint}")
        if not self._authorized(resource, recorded.headers.get("Authorization", "")):
            return _response(request, 401, b"Unauthorized", content_type="text/plain")
        deployment = recorded.headers.get("azureml-model-deployment")
        if not deployment:
            live = {d: w for d, w in (resource["properties"].get("traffic") or {}).items() if w}
            if not live:
                return _response(request, 404, b"No valid deployments to route to", content_type="text/plain")
            self._routed += 1  # by weight: request n lands at position 37n mod 100 of the cumulative weights
            position = (self._routed * 37) % 100
            ranges = itertools.accumulate(weight for _, weight in sorted(live.items()))
            deployment = next(name for (name, _), upto in zip(sorted(live.items()), ranges, strict=True)
                              if position < upto)
        if self.resource("onlineEndpoints/deployments", endpoint, deployment) is None:
            return _response(request, 404, f"deployment {deployment} not found".encode(), content_type="text/plain")
        mirror = {d: w for d, w in (resource["properties"].get("mirrorTraffic") or {}).items() if w}
        if mirror and not recorded.headers.get("azureml-model-deployment"):  # a copy of live traffic, discarded
            self._mirror_count += 1
            target, percent = next(iter(mirror.items()))
            if (self._mirror_count * percent) % 100 < percent:
                self._answer(request, recorded, endpoint, target)
        return self._answer(request, recorded, endpoint, deployment)

    def _answer(self, request: Any, recorded: Recorded, endpoint: str, deployment: str) -> HttpResponseImpl:
        started = time.monotonic()
        try:
            response = self._run_scorer(request, recorded, endpoint, deployment)
        except Exception as exc:  # noqa: BLE001 - as the scoring server: the script's exception is a 500, a 424 here
            response = _response(request, 424, json.dumps({"message": str(exc)}).encode(), {
                "azureml-model-deployment": deployment, "ms-azureml-model-error-statuscode": "500",
                "ms-azureml-model-error-reason": "model_error"})
        self.served.append((time.time(), endpoint, deployment, response.status_code,
                            response.headers.get("ms-azureml-model-error-statuscode"),
                            (time.monotonic() - started) * 1000))
        return response

    def _run_scorer(self, request: Any, recorded: Recorded, endpoint: str, deployment: str) -> HttpResponseImpl:
        result = self._scorer(endpoint, deployment).run(recorded.body.decode())
        headers = {"azureml-model-deployment": deployment}
        if hasattr(result, "status_code"):  # score.py's AMLResponse: its message is the body
            message = result.message if isinstance(result.message, str) else json.dumps(result.message)
            if int(result.status_code) != 200:  # Azure: any non-200 of score.py is a 424, the original in headers
                headers |= {"ms-azureml-model-error-statuscode": str(result.status_code),
                            "ms-azureml-model-error-reason": "model_error"}  # Azure's word; the message is the body
                return _response(request, 424, message.encode(), headers)
            return _response(request, 200, message.encode(), headers)
        text = result if isinstance(result, str) else json.dumps(result)
        return _response(request, 200, text.encode(), headers)

    def _metrics(self, request: Any, recorded: Recorded, name: str) -> HttpResponseImpl:
        """Azure Monitor's metrics of an online endpoint (monitor spec 2024-02-01, ``GetMetric.json``'s shape),
        from what the fake scored: ``RequestsPerMinute`` by ``statusCode``/``statusCodeClass``/
        ``modelStatusCode`` and ``RequestLatency_P99``, per minute, for the deployment the filter names, in the
        aggregations their definitions allow (Average, Minimum, Maximum; anything else is Azure Monitor's 400).
        ``metrics_lag_s``: a request is in the answer only that long after it was served."""
        q = recorded.query
        for metric in q["metricnames"].split(","):
            refused = set(q.get("aggregation", "Average").split(",")) - METRIC_AGGREGATIONS.get(metric, set())
            if refused:
                return _response(request, 400, {"code": "BadRequest", "message": f"Metric: {metric} does not "
                                 f"support requested aggregation: {sorted(refused)[0]}"})
        start, end = (datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in q["timespan"].split("/"))
        deployment = re.search(r"deployment eq '([^']+)'", q.get("$filter", ""))
        arrived = time.time() - self.metrics_lag_s
        rows = [r for r in self.served if r[1] == name and start <= r[0] < end and r[0] <= arrived
                and (deployment is None or r[2] == deployment[1])]
        value = []
        for metric in q["metricnames"].split(","):
            groups: dict[tuple[tuple[str, str], ...], dict[int, list[float]]] = {}
            for when, _, dep, status, model, ms in rows:
                dims = (("deployment", dep),)
                if metric == "RequestsPerMinute":
                    dims += (("statusCode", str(status)), ("statusCodeClass", f"{status // 100}xx"),
                             ("modelStatusCode", model or ""))
                groups.setdefault(dims, {}).setdefault(int(when // 60 * 60), []).append(ms)
            series = []
            for dims, minutes in groups.items():
                data = []
                for minute, latencies in sorted(minutes.items()):
                    stamp = datetime.fromtimestamp(minute, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    ordered = sorted(latencies)
                    data.append({"timeStamp": stamp, "average": float(len(latencies))} if metric == "RequestsPerMinute"
                                else {"timeStamp": stamp, "average": ordered[min(len(ordered) - 1,
                                                                                  int(0.99 * len(ordered)))]})
                series.append({"metadatavalues": [{"name": {"value": k.lower(), "localizedValue": k}, "value": v}
                                                  for k, v in dims], "data": data})
            value.append({"id": f"{recorded.path.rsplit('/metrics', 1)[0]}/metrics/{metric}",
                          "type": "Microsoft.Insights/metrics", "name": {"value": metric, "localizedValue": metric},
                          "unit": "Count" if metric == "RequestsPerMinute" else "Milliseconds",
                          "timeseries": series, "errorCode": "Success"})
        return _response(request, 200, {"cost": 0, "timespan": q["timespan"], "interval": q.get("interval", "PT1M"),
                                        "value": value, "namespace": "microsoft.machinelearningservices/workspaces/"
                                        "onlineendpoints", "resourceregion": REGION})

    def _scorer(self, endpoint: str, deployment: str) -> Any:
        """The deployment's uploaded score.py, started on its uploaded model, as the scoring container would."""
        key = f"{endpoint}/{deployment}"
        if key not in self._scorers:
            props = self.resource("onlineEndpoints/deployments", endpoint, deployment)["properties"]
            code = self.resources[props["codeConfiguration"]["codeId"].lower()]["properties"]["codeUri"]
            model = self.resources[props["model"].lower()]["properties"]["modelUri"]
            folder = Path(tempfile.mkdtemp(dir=self.root, prefix=f"{deployment}-"))
            code_dir = self._materialize(code, folder / "code")
            model_dir = self._materialize(model, folder / "model")
            spec = importlib.util.spec_from_file_location(f"score_{uuid.uuid4().hex}",
                                                          code_dir / props["codeConfiguration"]["scoringScript"])
            module = importlib.util.module_from_spec(spec)
            previous = os.environ.get("AZUREML_MODEL_DIR")
            os.environ["AZUREML_MODEL_DIR"] = str(model_dir)
            try:
                spec.loader.exec_module(module)
                module.init()
            finally:
                if previous is None:
                    os.environ.pop("AZUREML_MODEL_DIR")
                else:
                    os.environ["AZUREML_MODEL_DIR"] = previous
            self._scorers[key] = module
        return self._scorers[key]

    def _run_command(self, name: str, props: dict[str, Any]) -> None:
        """Run one of mlrunway's own command jobs (export, reference) as the compute would: its uploaded code folder
        and inputs materialized from their blobs, its command run in a fresh interpreter where ``mlrunway`` cannot be
        imported (the job's environment has none), and its named outputs uploaded where the service keeps them
        (``azureml/<job>/<output>/`` of the default datastore), its ``./outputs`` files in the artifact store. What the
        command printed is kept in ``job_logs`` and is its ``std_log.txt``."""
        folder = Path(tempfile.mkdtemp(dir=self.root, prefix=f"{name}-"))
        code = self._materialize(self.resources[props["codeId"].lower()]["properties"]["codeUri"], folder / "code")
        values: dict[str, str] = {}
        for key, value in (props.get("inputs") or {}).items():
            if value.get("jobInputType") in ("uri_folder", "custom_model"):
                values[f"inputs.{key}"] = str(self._materialize(value["uri"], folder / "inputs" / key))
            elif value.get("jobInputType") == "uri_file":  # the file itself, not its folder
                (file,) = self._materialize(value["uri"], folder / "inputs" / key).iterdir()
                values[f"inputs.{key}"] = str(file)
            else:
                values[f"inputs.{key}"] = str(value.get("value"))
        for key in props.get("outputs") or {}:
            values[f"outputs.{key}"] = str(folder / "outputs" / key)
            (folder / "outputs" / key).mkdir(parents=True)
        argv = [re.sub(r"\$\{\{\s*([a-z]+\.[A-Za-z_0-9]+)\s*\}\}", lambda m: values[m.group(1)], part)
                for part in props["command"].split()]
        assert argv[0] == "python", argv
        # python -m <module> ... or python <script> ...: run as Python would, with mlrunway unimportable.
        runner = ("import runpy, sys; sys.modules['mlrunway'] = None; how = sys.argv.pop(1); what = sys.argv.pop(1); "
                  "sys.argv[0] = what; (runpy.run_module(what, run_name='__main__', alter_sys=True) if how == '-m' "
                  "else runpy.run_path(what, run_name='__main__'))")
        argv = argv[1:] if argv[1] == "-m" else ["-f", *argv[1:]]
        env = {**os.environ, **(props.get("environmentVariables") or {})}
        env.pop("PYTHONPATH", None)
        done = subprocess.run([sys.executable, "-c", runner, *argv], cwd=code, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        self.job_logs[name] = done.stdout + done.stderr
        if done.returncode != 0:
            self._fail_command(name, props, f"exit code {done.returncode}: {done.stderr[-1500:]}")
            return
        for file in sorted((code / "outputs").rglob("*")):  # ./outputs: the run's artifacts, as the service keeps them
            if file.is_file():
                self.blobs[f"{ARTIFACT_CONTAINER}/ExperimentRun/dcid.{name}/outputs/"
                           f"{file.relative_to(code / 'outputs')}"] = file.read_bytes()
        for key, output in (props.get("outputs") or {}).items():  # to the default datastore, its URI recorded
            output["uri"] = f"azureml://datastores/{self.default_datastore}/paths/azureml/{name}/{key}/"
            for file in sorted((folder / "outputs" / key).rglob("*")):
                if file.is_file():
                    self.blobs[f"{self.container(output['uri'])}/azureml/{name}/{key}/"
                               f"{file.relative_to(folder / 'outputs' / key)}"] = file.read_bytes()

    def _fail_command(self, name: str, props: dict[str, Any], error: str) -> None:
        props["status"] = self.runs[name]["status"] = "Failed"
        self.job_error[name] = error

    def _materialize(self, uri: str, dest: Path) -> Path:
        """Copy the blobs under a datastore URI (or a blob URL) into ``dest``."""
        if "/paths/" in uri:
            prefix = f"{self.container(uri)}/{uri.split('/paths/', 1)[1]}"
        else:
            prefix = urlparse(uri).path.lstrip("/")
        prefix = prefix.rstrip("/")
        for name, data in self.blobs.items():
            if name == prefix or name.startswith(prefix + "/"):
                target = dest / name[len(prefix):].lstrip("/") if name != prefix else dest / Path(name).name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        return dest

    # -- Run History and MLflow ----------------------------------------------------------------------
    def _time(self, run_id: str, status: str) -> None:
        """Run History's times of a run: its start when it first runs, its end ``run_seconds`` later."""
        run = self.runs[run_id]
        if status in ("Running", "Completed", "Failed", "Canceled") and "started" not in run:
            run["started"] = self.clock
        if status in ("Completed", "Failed", "Canceled") and "ended" not in run:
            run["ended"] = run["started"] + self.run_seconds.get(run_id, 1800.0)

    def _run_body(self, run_id: str) -> dict[str, Any]:
        run = self.runs[run_id]

        def utc(seconds: float | None) -> str | None:
            return None if seconds is None else \
                datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

        return {"runId": run_id, "parentRunId": run.get("parent"), "status": run.get("status", "NotStarted"),
                "experimentId": "0b7d4e8a-9c2f-1d5e-7b3a-9c406a3c9f1e", "displayName": run_id,
                "properties": {}, "tags": dict(run.get("tags", {})), "createdUtc": "2026-11-22T10:00:00Z",
                "startTimeUtc": utc(run.get("started")), "endTimeUtc": utc(run.get("ended"))}

    def _retail_prices(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        """The Retail Prices API: ``$filter``'s ``eq`` clauses (joined by ``and``, values compared case-sensitively)
        select items; ``currencyCode``
        is quoted as the docs write it; pages of ``retail_page_size`` with a ``NextPageLink`` to the next."""
        clauses = dict(re.findall(r"(\w+) eq '([^']*)'", recorded.query.get("$filter", "")))
        field = {"priceType": "type"}
        currency = recorded.query.get("currencyCode", "'USD'").strip("'")
        # Filter values are case-sensitive, as Microsoft documents them ("Standard_NC6s_v3", never ARM's upper case).
        items = [i for i in self.retail_items if i["currencyCode"] == currency and all(
            str(i.get(field.get(k, k), "")) == v for k, v in clauses.items())]
        skip = int(recorded.query.get("$skip") or 0)
        page = items[skip:skip + self.retail_page_size]
        more = skip + self.retail_page_size < len(items)
        link = (f"https://prices.azure.com:443/api/retail/prices?currencyCode='{currency}'&$filter="
                f"{quote(recorded.query.get('$filter', ''))}&$skip={skip + self.retail_page_size}") if more else None
        return _response(request, 200, {"BillingCurrency": currency, "CustomerEntityId": "Default",
                                        "CustomerEntityType": "Retail", "Items": page, "NextPageLink": link,
                                        "Count": len(page)})

    def _discovery(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        base = f"https://{API_HOST}"
        return _response(request, 200, {"api": base, "catalog": base, "experimentation": base, "history": base,
                                        "hyperdrive": base, "labeling": base, "modelmanagement": base,
                                        "pipelines": base, "studiocoreservices": base})

    def _run_children(self, request: Any, recorded: Recorded, run: str) -> HttpResponseImpl:
        runs = [self._run_body(r) for r, v in self.runs.items() if v.get("parent") == run]
        start = int(recorded.query.get("$continuationtoken") or 0)
        size = self.page_size or len(runs) or 1
        more = start + size < len(runs)
        return _response(request, 200, {"value": runs[start:start + size],
                                        "continuationToken": str(start + size) if more else None})

    def _run_details(self, request: Any, recorded: Recorded, run: str) -> HttpResponseImpl:
        if run not in self.runs:
            return _error(request, 404, "UserError", f"run {run} not found")
        log = f"{CONTAINER}/ExperimentRun/dcid.{run}/user_logs/std_log.txt"
        history = self.runs[run]["history"]
        printed = self.job_logs.get(run)  # a command it ran: what it printed; else a line per logged value
        self.blobs[log] = (printed if printed is not None else
                           "".join(f"epoch {i}: best_val_acc {v:.4f}\n" for i, v in enumerate(history))).encode()
        error = {"error": {"error": {"code": "UserError", "message": self.job_error[run]}}} if run in self.job_error else {}
        return _response(request, 200, {**self._run_body(run), **error, "logFiles": {
            "user_logs/std_log.txt": f"https://{BLOB_HOST}/{log}?sv=2021-08-06&sr=b&sig=fake"}})

    def _mlflow_run(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        run_id = recorded.query["run_id"]
        if run_id not in self.runs:
            return _response(request, 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": f"Run {run_id} not found"})
        run = self.runs[run_id]
        metrics = [{"key": "best_val_acc", "value": run["history"][-1], "step": len(run["history"]) - 1,
                    "timestamp": 0}] if run["history"] else []
        # What runs/log-batch logged on it since (a job's cost): runs/get answers each metric's latest value.
        metrics += [{"key": k, "value": v, "step": 0, "timestamp": 0} for k, v in run.get("metrics", {}).items()
                    if k != "best_val_acc"]
        params = [{"key": k, "value": str(v)} for k, v in run["params"].items()]
        return _response(request, 200, {"run": {"info": {"run_id": run_id, "status": "FINISHED"},
                                                "data": {"metrics": metrics, "params": params}}})

    def _mlflow_log_batch(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        """MLflow's runs/log-batch: each metric {key, value, timestamp, step} (all four required) and each tag {key,
        value} (RunTag, both strings) on the run."""
        body = recorded.json()
        if body.get("run_id") not in self.runs:
            return _response(request, 404, {"error_code": "RESOURCE_DOES_NOT_EXIST",
                                            "message": f"Run {body.get('run_id')} not found"})
        for metric in body.get("metrics", []):
            if set(metric) != {"key", "value", "timestamp", "step"}:
                return _response(request, 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": str(metric)})
            self.runs[body["run_id"]].setdefault("metrics", {})[metric["key"]] = metric["value"]
        if body.get("tags") and self.refuse_tags:
            return _response(request, 403, {"error_code": "PERMISSION_DENIED",
                                            "message": "The caller may not set tags on this run."})
        for tag in body.get("tags", []):  # RunTag {key, value}: the run's tags, which Run History shows as its own
            if set(tag) != {"key", "value"} or not isinstance(tag["value"], str):
                return _response(request, 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": str(tag)})
            self.runs[body["run_id"]].setdefault("tags", {})[tag["key"]] = tag["value"]
        return _response(request, 200, {})

    def _mlflow_history(self, request: Any, recorded: Recorded) -> HttpResponseImpl:
        run = self.runs.get(recorded.query["run_id"])
        if run is None:
            return _response(request, 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such run"})
        values = run["history"] if recorded.query["metric_key"] == "best_val_acc" else []
        points = [{"key": recorded.query["metric_key"], "value": v, "step": i, "timestamp": 1_700_000_000_000 + i}
                  for i, v in enumerate(values)]
        # MLflow's REST API pages a history (max_results, next_page_token); the fake pages small to prove it.
        start = int(recorded.query.get("page_token") or 0)
        page = points[start:start + self.history_page_size]
        body: dict[str, Any] = {"metrics": page}
        if start + self.history_page_size < len(points):
            body["next_page_token"] = str(start + self.history_page_size)
        return _response(request, 200, body)
