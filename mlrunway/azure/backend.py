"""The Azure ML backend: the local backend's interface (jobs, models, endpoints) over one ``MLClient``.

Everything goes through azure-ai-ml and azure-core: the SDK for jobs, models, endpoints and deployments; the
workspace's own REST endpoints (MLflow tracking, Run History) through an azure-core pipeline with the same
credential for what the SDK has no public call for (metric histories, a job's log, a failed run's error).

This module sets up and wires; each resource is its own module over the small clients it is given:
``jobs`` (the SDK and ``rest``, the workspace's REST services), ``models`` (the SDK), ``endpoints`` with
``deployments``, ``monitor`` (Azure Monitor), ``lease`` (Blob Storage) and ``writes`` (409/429 retries).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

from azure.ai.ml import MLClient
from azure.core.exceptions import ResourceNotFoundError

from mlrunway import check, lineage
from mlrunway.azure import outputs
from mlrunway.azure.clouds import CLOUDS, hosts
from mlrunway.azure.deployments import AzureDeployments
from mlrunway.azure.endpoints import AzureEndpoints
from mlrunway.azure.environments import TORCH_VERSION
from mlrunway.azure.jobs import AzureJobs
from mlrunway.azure.lease import RolloutLease
from mlrunway.azure.metrics import DeploymentMonitor
from mlrunway.azure.model_monitor import ModelMonitors, MonitorSettings
from mlrunway.azure.models import AzureModels
from mlrunway.azure.prices import RetailPrices
from mlrunway.azure.rest import WorkspaceRest
from mlrunway.azure.writes import RetriedWrites
from mlrunway.backend.capture import ModelMonitor
from mlrunway.backend.protocol import (
    Backend,
    Capabilities,
    Lineage,
    Metered,
    MeteredEndpoints,
    Priced,
    Rollout,
    RunMetrics,
    Studio,
)
from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import DEFAULT_INSTANCE_TYPE, Instances
from mlrunway.backend.waiting import Waits
from mlrunway.onnx_export.registered import ExportSettings

__all__ = ["AzureBackend"]


TRANSIENT_OUTAGE_S: float = Waits().transient_outage_s  # how long a wait rides out reads without news, by default


class AzureBackend:
    """:param compute: compute cluster for jobs and sweep trials; None runs them on serverless compute.
    :param job_instance_type: VM size of a serverless job (None: the service's default); with a cluster, its own.
    :param instance_type: VM size of online deployments; ``instance_count`` instances each.
    :param environment: the jobs' environment (a curated ``name@version`` or a registered one); None pins one to
        the project's torch (``mlrunway.azure.environments``).
    :param export_environment: the export job's environment (its torch must be the trials'); None: the training
        image with onnx, onnxscript and the scoring environment's onnxruntime added.
    :param cloud: the Azure cloud (``AzureCloud``, ``AzureChinaCloud``, ``AzureUSGovernment``): it sets the ARM
        host, the token's scope and the studio's host; the workspace's own hosts come from the workspace.
    :param cache_dir: where downloaded models are kept.
    :param reports: where the runs' sweep reports are saved and read, on the machine Airflow runs on (a folder the
        workers and the API server share); default ``~/.mlrunway/reports/<workspace>``.
    :param model_monitor: the workspace's model monitor of a production endpoint (:mod:`mlrunway.azure.model_monitor`);
        None: none is made.
    :param transient_outage_s: how long a wait rides out reads that bring no news (a 408, 429, 5xx or dropped
        connection after azure-core's own retries) before it gives up on the watch: the connection's extra of that
        name, 15 minutes by default.
    :param client_kwargs: for ``MLClient`` and the REST pipeline (a ``transport`` in tests).
    """

    kind = "azure"
    # Every poll is ARM and Run History reads, which count against the subscription's read limits. Azure Monitor
    # aggregates an endpoint's requests per minute and publishes them a few minutes late.
    capabilities = Capabilities(poll_interval_s=30.0, metrics_lag_s=180.0, rollout_window_s=600.0,
                                metrics_period_s=60.0)

    def __init__(self, client: MLClient, credential: Any, *, compute: str | None = None,
                 job_instance_type: str | None = None, instance_type: str = DEFAULT_INSTANCE_TYPE, instance_count: int = 1,
                 environment: str | None = None, export_environment: str | None = None, cloud: str = "AzureCloud", cache_dir: str | Path | None = None,
                 reports: str | Path | None = None, model_monitor: MonitorSettings | None = None,
                 transient_outage_s: float = TRANSIENT_OUTAGE_S, rate_card: RateCard | None = None,
                 **client_kwargs: Any) -> None:
        self.client, self.credential = client, credential
        # The jobs train with the project's environment's torch, unless a team names its own environment (whose torch
        # mlrunway cannot know: export then trusts the worker's).
        self.capabilities = replace(type(self).capabilities, transient_outage_s=transient_outage_s,
                                    trainer_torch=None if environment else TORCH_VERSION)
        self.compute, self.job_instance_type, self.environment = compute or None, job_instance_type, environment
        self.instance_type, self.instance_count = instance_type, instance_count
        self.cache_dir = Path(cache_dir or tempfile.mkdtemp(prefix="mlrunway-azure-"))
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.reports = Path(reports or Path.home() / ".mlrunway" / "reports" / str(client.workspace_name)).expanduser()
        check.one_of("azure_ml connection.cloud", cloud, CLOUDS)
        cloud_hosts = hosts(cloud)
        self.arm, self.studio = cloud_hosts.arm, cloud_hosts.studio
        transport = self.transport = {k: v for k, v in client_kwargs.items() if k == "transport"}
        self.workspace_rest = WorkspaceRest(client, credential, cloud_hosts, **transport)
        self.rest, self.plain = self.workspace_rest.rest, self.workspace_rest.plain
        self.jobs = AzureJobs(client, self.workspace_rest, compute=self.compute, job_instance_type=job_instance_type,
                              environment=environment, export_environment=export_environment, reports=self.reports)
        self.models = AzureModels(client, self.cache_dir)
        self.endpoints = self._endpoints(RetriedWrites())
        self.monitors = ModelMonitors(client, model_monitor) if model_monitor else None
        self.rate_card = rate_card or RateCard()

    def rates_for(self, sizes: Iterable[str]) -> RateCard:
        """The connection's card; with ``retail_prices``, each size it lacks (in any tier) priced from Azure's Retail
        Prices API for the workspace's region (:mod:`mlrunway.azure.prices`)."""
        card = self.rate_card
        lacking = [s for s in sizes if not any(k.split(":")[0] == s.lower() for k in card.per_hour)]
        if not card.retail_prices or not lacking:
            return card
        prices = RetailPrices(self.reports, self._region, card.currency, **self.transport)
        return card.filled({(size if tier == "dedicated" else f"{size}:{tier}"): rate  # asked as the region spells it
                            for size in lacking for tier, rate in prices.rates(self.jobs.spelled(size)).items()})

    @property
    def _region(self) -> str:
        return self.jobs.region

    def _endpoints(self, write: RetriedWrites) -> AzureEndpoints:
        """The endpoints and the parts of them in their own modules, all writing through ``write``."""
        deployments = AzureDeployments(self.client, self.workspace_rest, write, instance_type=self.instance_type,
                                       instance_count=self.instance_count)
        lease = RolloutLease(self.client, self.credential, write, **self.transport)
        return AzureEndpoints(self.client, self.workspace_rest, deployments=deployments, write=write, lease=lease,
                              monitor=DeploymentMonitor(self.credential, self.arm, **self.transport))

    @classmethod
    def from_connection(cls, fields: dict[str, Any], secret: str | None = None, **client_kwargs: Any) -> AzureBackend:
        """The backend an ``azure_ml`` connection names (its extras as ``fields``, its password as ``secret``)."""
        from mlrunway.azure.credentials import credential, workspace_ref

        ref = workspace_ref(fields)
        cloud = fields.get("cloud") or "AzureCloud"
        check.one_of("azure_ml connection.cloud", cloud, CLOUDS)
        cred = client_kwargs.pop("credential", None) or credential(fields, secret)
        client = MLClient(cred, ref.subscription_id, ref.resource_group, ref.workspace_name, show_progress=False,
                          cloud=cloud, **client_kwargs)
        size = Instances.parse("azure_ml connection", instance_type=fields.get("instance_type"),
                               instance_count=fields.get("instance_count"))
        outage_s = Waits.parse(fields, "azure_ml connection").transient_outage_s
        return cls(client, cred, compute=fields.get("compute") or None,
                   job_instance_type=fields.get("job_instance_type") or None,
                   instance_type=size.instance_type or DEFAULT_INSTANCE_TYPE, instance_count=size.instance_count or 1,
                   environment=fields.get("environment") or None, cloud=cloud,
                   export_environment=ExportSettings.parse(fields.get("export_environment"),
                                                           "azure_ml connection.export_environment").environment,
                   cache_dir=fields.get("cache_dir") or None, reports=fields.get("reports_folder") or None,
                   model_monitor=MonitorSettings.parse(fields.get("model_monitor")), transient_outage_s=outage_s,
                   rate_card=RateCard.parse(fields.get("rates")), **client_kwargs)

    @property
    def endpoint_salt(self) -> str:
        """The workspace's ARM id, lower-cased (ARM ids are case-insensitive): online endpoint names are unique in
        the whole region, so a run's endpoint name derives from its workspace too (``RunNames``). Deterministic, so
        a retry finds what its first try made; not kept in the connection, which may be made again."""
        return (f"/subscriptions/{self.client.subscription_id}/resourceGroups/{self.client.resource_group_name}"
                f"/providers/Microsoft.MachineLearningServices/workspaces/{self.client.workspace_name}").lower()

    # -- references --------------------------------------------------------------------------------
    def job_outputs(self, job_name: str) -> str:
        """Where a job's ``./outputs`` files are (``mlrunway.azure.outputs``)."""
        return outputs.job_outputs(job_name)

    def named_output(self, job_name: str, output: str) -> str:
        """Where a job's named output is: the URI the service recorded on the job, else ``azureml/<job>/<output>/``
        in the workspace's default datastore (read once per backend: it need not be ``workspaceblobstore``)."""
        try:
            job = self.client.jobs.get(job_name)
        except ResourceNotFoundError:
            job = None
        recorded = getattr((getattr(job, "outputs", None) or {}).get(output), "path", None)
        return outputs.named_output(job_name, output, self._default_datastore, str(recorded or "") or None)

    @cached_property
    def _default_datastore(self) -> str:
        return str(self.client.datastores.get_default().name)

    def output_folder(self, base: str, path: str) -> AbstractContextManager[Path]:
        """A job's outputs downloaded from their datastore into a scratch folder for the context, then removed."""
        return outputs.output_folder(self.client.datastores, self.cache_dir, base, path)

    def output_files(self, base: str, path: str, names: Sequence[str]) -> AbstractContextManager[Path]:
        """Those of ``names`` under ``base``/``path`` that exist, downloaded one by one (:class:`OutputFiles`)."""
        return outputs.output_files(self.client.datastores, self.cache_dir, base, path, names)

    def output_exists(self, base: str, path: str, name: str) -> bool:
        return outputs.output_exists(self.client.datastores, base, path, name)

    @property
    def workspace_id(self) -> str:
        c = self.client
        return f"/subscriptions/{c.subscription_id}/resourcegroups/{c.resource_group_name}/workspaces/{c.workspace_name}"

    @property
    def lineage_namespace(self) -> str:
        """The workspace, as its ``azureml://`` URIs start (``azureml://subscriptions/<sub>/resourceGroups/...``)."""
        c = self.client
        return lineage.azure_namespace(str(c.subscription_id), str(c.resource_group_name), str(c.workspace_name))

    def ensure_monitor(self, endpoint: str, deployment: str,
                       metric_thresholds: dict[str, dict[str, float]]) -> str | None:
        """The workspace's model monitor of ``deployment``, when the connection asks for one (``model_monitor``)."""
        return self.monitors.ensure(endpoint, deployment, metric_thresholds) if self.monitors else None

    def link(self, kind: str, name: str, version: int | str | None = None) -> str:
        """The Azure ML studio page of a job, sweep, model or endpoint."""
        wsid = f"wsid={self.workspace_id}"
        if kind in ("job", "sweep"):
            return f"{self.studio}/runs/{name}?{wsid}"
        if kind == "model":
            return f"{self.studio}/model/{name}:{version}/details?{wsid}"
        if kind == "endpoint":
            return f"{self.studio}/endpoints/realtime/{name}/detail?{wsid}"
        raise ValueError(f"link kind {kind!r}: use job, sweep, model or endpoint")


def _satisfies_protocol(backend: AzureBackend) -> tuple[Backend, Studio, Rollout, Lineage, ModelMonitor, Metered,
                                                        MeteredEndpoints, Priced, RunMetrics]:
    """mypy proves here that AzureBackend is a ``Backend`` with a ``Studio``, ``Rollout`` endpoints, its
    ``Lineage`` namespace, a ``ModelMonitor``, ``Metered`` jobs whose runs take metrics (``RunMetrics``),
    ``MeteredEndpoints`` and a rate card (``Priced``): a mismatch fails ``make test``; its jobs keep no artifacts."""
    return backend, backend, backend.endpoints, backend, backend, backend.jobs, backend.endpoints, backend, backend.jobs
