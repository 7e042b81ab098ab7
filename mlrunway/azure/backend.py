"""The Azure ML backend: the local backend's interface (jobs, models, endpoints) over one ``MLClient``.

Everything goes through azure-ai-ml and azure-core: the SDK for jobs, models, endpoints and deployments; the
workspace's own REST endpoints (MLflow tracking, Run History) through an azure-core pipeline with the same
credential for what the SDK has no public call for (metric histories, a job's log, a failed run's error).
"""

from __future__ import annotations

import base64
import builtins
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from azure.ai.ml import MLClient
from azure.ai.ml._azure_environments import _get_cloud_details
from azure.ai.ml.constants import ListViewType
from azure.ai.ml.entities import CodeConfiguration, ManagedOnlineDeployment, ManagedOnlineEndpoint, Model
from azure.core import PipelineClient
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.core.pipeline.policies import BearerTokenCredentialPolicy, RetryPolicy
from azure.core.rest import HttpRequest

from mlrunway.azure.entities import command_job, sweep_job
from mlrunway.azure.environments import is_gpu_size, scoring_environment, training_environment
from mlrunway.azure.lease import BlobLease, LeaseUnavailable
from mlrunway.backend.protocol import Backend, Capabilities
from mlrunway.backend.snapshot import check_size, snapshot_files
from mlrunway.backend.types import (
    DeploymentInfo,
    DeploymentMetrics,
    DeploymentSettings,
    EndpointInfo,
    EndpointSettings,
    JobInfo,
    JobStatus,
    ModelVersion,
    ProvisioningState,
    SweepResult,
    TrialInfo,
    deployment_error,
)
from mlrunway.backend.waiting import wait_for_job, wait_provisioned
from mlrunway.early_termination import applies_at
from mlrunway.errors import EndpointError, JobFailed, NotFound, NotSupportedOnBackend
from mlrunway.specs import check
from mlrunway.specs.job import CommandJobSpec
from mlrunway.specs.sweep import Objective, SweepSpec

# Every JobStatus of the REST spec (mfe.json) onto ours: before the script runs is Queued; running and winding
# down is Running; Completed, Failed, Canceled and Paused (which will not finish by itself) are terminal.
# NotResponding is not: the spec says such a run "can go from NotResponding to any of the previous states" (the
# SDK lists it as terminal), so it is waited for, up to NOT_RESPONDING_S, then canceled (see AzureJobs._info).
_STATUS = {
    "NotStarted": JobStatus.QUEUED, "Starting": JobStatus.QUEUED, "Provisioning": JobStatus.QUEUED,
    "Preparing": JobStatus.QUEUED, "Queued": JobStatus.QUEUED,
    "Running": JobStatus.RUNNING, "Finalizing": JobStatus.RUNNING, "CancelRequested": JobStatus.RUNNING,
    "Unknown": JobStatus.RUNNING, "NotResponding": JobStatus.RUNNING,
    "Completed": JobStatus.COMPLETED, "Failed": JobStatus.FAILED, "Canceled": JobStatus.CANCELED,
    "Paused": JobStatus.FAILED,
}
_WHY = {
    "Paused": "Paused on Azure ML: resume it in the studio, or a retry submits a new attempt",
}
NOT_RESPONDING_S = 1800.0  # how long a job may stay NotResponding (no heartbeat) before it is canceled
CLOUDS = ("AzureCloud", "AzureChinaCloud", "AzureUSGovernment")
log = logging.getLogger(__name__)


def job_status(azure_status: object) -> JobStatus:
    """Our status of an Azure ML job status (a string or the SDK's enum); an unknown one is logged, still running."""
    text = str(getattr(azure_status, "value", azure_status) or "NotStarted")
    if text not in _STATUS:
        log.warning("Unknown Azure ML job status %r: treated as still running", text)
    return _STATUS.get(text, JobStatus.RUNNING)


class AzureBackend:
    """:param compute: compute cluster for jobs and sweep trials; None runs them on serverless compute.
    :param job_instance_type: VM size of a serverless job (None: the service's default); with a cluster, its own.
    :param instance_type: VM size of online deployments; ``instance_count`` instances each.
    :param environment: the jobs' environment (a curated ``name@version`` or a registered one); None pins one to
        the project's torch (``mlrunway.azure.environments``).
    :param cloud: the Azure cloud (``AzureCloud``, ``AzureChinaCloud``, ``AzureUSGovernment``): it sets the ARM
        host, the token's scope and the studio's host; the workspace's own hosts come from the workspace.
    :param cache_dir: where downloaded models are kept.
    :param client_kwargs: for ``MLClient`` and the REST pipeline (a ``transport`` in tests).
    """

    kind = "azure"
    # Every poll is ARM and Run History reads, which count against the subscription's read limits. Azure Monitor
    # aggregates an endpoint's requests per minute and publishes them a few minutes late.
    capabilities = Capabilities(artifacts=False, studio=True, poll_interval_s=30.0, rollout=True,
                                metrics_lag_s=180.0, rollout_window_s=600.0)

    def __init__(self, client: MLClient, credential: Any, *, compute: str | None = None,
                 job_instance_type: str | None = None, instance_type: str = "Standard_DS3_v2", instance_count: int = 1,
                 environment: str | None = None, cloud: str = "AzureCloud", cache_dir: str | Path | None = None,
                 **client_kwargs: Any) -> None:
        self.client, self.credential = client, credential
        self.compute, self.job_instance_type, self.environment = compute or None, job_instance_type, environment
        self.instance_type, self.instance_count = instance_type, instance_count
        self.cache_dir = Path(cache_dir or tempfile.mkdtemp(prefix="mlrunway-azure-"))
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        check.one_of("azure_ml connection.cloud", cloud, CLOUDS)
        hosts = _get_cloud_details(cloud)  # the SDK's own table of each cloud's hosts
        arm = self.arm = str(hosts["resource_manager"]).rstrip("/")
        self.studio = str(hosts["aml_resource_id"]).rstrip("/")
        transport = self.transport = {k: v for k, v in client_kwargs.items() if k == "transport"}
        self.rest = PipelineClient(
            base_url=arm,
            policies=[RetryPolicy(retry_total=3), BearerTokenCredentialPolicy(credential, f"{arm}/.default")],
            **transport,
        )
        # Scoring (an endpoint key) and log files (a SAS URL) carry their own credential, never the AAD token.
        self.plain = PipelineClient(base_url=self.studio, policies=[RetryPolicy(retry_total=3)], **transport)
        self.jobs = AzureJobs(self)
        self.models = AzureModels(self)
        self.endpoints = AzureEndpoints(self)

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
        count = fields.get("instance_count") or 1
        check.positive_int("azure_ml connection.instance_count", int(count), maximum=100)
        return cls(client, cred, compute=fields.get("compute") or None,
                   job_instance_type=fields.get("job_instance_type") or None,
                   instance_type=fields.get("instance_type") or "Standard_DS3_v2", instance_count=int(count),
                   environment=fields.get("environment") or None, cloud=cloud,
                   cache_dir=fields.get("cache_dir") or None, **client_kwargs)

    @cached_property
    def monitor(self) -> Any:
        """Azure Monitor's metrics client (azure-monitor-query) on this cloud's ARM host."""
        from azure.monitor.query import MetricsQueryClient

        return MetricsQueryClient(self.credential, endpoint=self.arm, **self.transport)

    # -- the workspace's own REST endpoints --------------------------------------------------------
    @cached_property
    def services(self) -> dict[str, str]:
        """The workspace's own service hosts, as the workspace says (any cloud, any region, private links):
        ``mlflow`` from its MLflow tracking URI, ``history`` from its discovery document; and the workspace path
        they share (``/subscriptions/.../workspaces/<name>``)."""
        workspace = self.client.workspaces.get(self.client.workspace_name)
        mlflow = workspace.mlflow_tracking_uri.replace("azureml://", "https://", 1)
        host, path = mlflow.split("/mlflow/v1.0", 1)
        discovery = self.call("GET", workspace.discovery_url) or {}
        return {"mlflow": host, "history": str(discovery.get("history") or host).rstrip("/"), "workspace": path}

    def call(self, method: str, url: str, **kwargs: Any) -> Any:
        """One REST call through the authenticated pipeline; JSON back, or None for a 404."""
        response = self.rest.send_request(HttpRequest(method, url, **kwargs))
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json() if response.content else None

    def mlflow(self, tail: str, **params: Any) -> Any:
        hosts = self.services
        return self.call("GET", f"{hosts['mlflow']}/mlflow/v1.0{hosts['workspace']}/api/2.0/mlflow/{tail}",
                         params=params)

    def run_history(self, run_id: str, tail: str = "/details", **params: Any) -> Any:
        hosts = self.services
        return self.call("GET", f"{hosts['history']}/history/v1.0{hosts['workspace']}/runs/{run_id}{tail}",
                         params=params)

    # -- references --------------------------------------------------------------------------------
    def job_outputs(self, job_name: str) -> str:
        """Where a job's ``./outputs`` files are: the artifact store's own path. A model registered from it
        downloads whether or not the service rewrites the URI (``azureml://jobs/<name>/outputs/artifacts/...``
        would be read back as a datastore named ``artifacts`` if the service kept it)."""
        return f"azureml://datastores/workspaceartifactstore/paths/ExperimentRun/dcid.{job_name}/outputs/"

    def named_output(self, job_name: str, output: str) -> str:
        """A named output's default place: ``azureml/<job>/<output>/`` in the workspace's default datastore."""
        return f"azureml://datastores/workspaceblobstore/paths/azureml/{job_name}/{output}/"

    @contextmanager
    def output_folder(self, base: str, path: str) -> Iterator[Path]:
        """A job's outputs downloaded from their datastore into a scratch folder for the context (through the
        SDK's own artifact download, the one ``models.download`` uses), then removed."""
        from azure.ai.ml._artifacts._artifact_utilities import download_artifact_from_aml_uri

        with tempfile.TemporaryDirectory(dir=self.cache_dir) as scratch:
            uri = f"{base.rstrip('/')}/{path}".rstrip("/") + "/"
            download_artifact_from_aml_uri(uri, scratch, self.client.datastores)
            yield Path(scratch)

    @property
    def workspace_id(self) -> str:
        c = self.client
        return f"/subscriptions/{c.subscription_id}/resourcegroups/{c.resource_group_name}/workspaces/{c.workspace_name}"

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


class AzureJobs:
    """:param cancel_wait_s: how long ``cancel`` waits for a canceled job to reach Canceled; ``poll_s`` between.
    :param refresh_s: how old a running trial's metrics may be before ``sweep_result`` reads them again (an
        ended trial's are read once; a trial whose status changed is read at once).
    """

    def __init__(self, backend: AzureBackend, *, cancel_wait_s: float = 300.0, poll_s: float = 5.0,
                 refresh_s: float = 60.0, not_responding_s: float = NOT_RESPONDING_S) -> None:
        self.backend = backend
        self.ml = backend.client
        self.cancel_wait_s, self.poll_s, self.refresh_s = cancel_wait_s, poll_s, refresh_s
        self.not_responding_s = not_responding_s
        self._silent: dict[str, float] = {}  # job -> when this process first saw it NotResponding
        self._read: dict[tuple[str, str], tuple[float, TrialInfo]] = {}  # (sweep, trial) -> (when read, record)
        self._vm_sizes: dict[str, str | None] = {}  # compute name -> its VM size

    def _find(self, name: str) -> JobInfo | None:
        try:
            return self._info(self.ml.jobs.get(name))
        except ResourceNotFoundError:
            return None

    def _info(self, job: Any) -> JobInfo:
        status = job_status(job.status)
        azure_status = str(getattr(job.status, "value", job.status))
        error = _WHY.get(azure_status)
        if azure_status == "NotResponding" and self._silent_too_long(job.name):
            status, error = JobStatus.FAILED, self._give_up(job.name)
        elif azure_status != "NotResponding":
            self._silent.pop(job.name, None)
        if status is JobStatus.FAILED and error is None:
            details = self.backend.run_history(job.name) or {}
            error = ((details.get("error") or {}).get("error") or {}).get("message") or "failed on Azure ML"
        return JobInfo(name=job.name, kind="sweep" if job.type == "sweep" else "command", status=status, error=error,
                       outputs=self.backend.job_outputs(job.name), mlflow_run_id=job.name,
                       properties={"studio_url": job.studio_url,
                                   "azure_status": getattr(job.status, "value", job.status), **(job.properties or {})})

    def _silent_too_long(self, name: str) -> bool:
        """A NotResponding job may come back: it reads Running until it has been silent ``not_responding_s``."""
        first = self._silent.setdefault(name, time.monotonic())
        if time.monotonic() - first < self.not_responding_s:
            log.warning("job %s is NotResponding on Azure ML (no heartbeat for %.0f s of the %.0f s allowed); it may "
                        "come back", name, time.monotonic() - first, self.not_responding_s)
            return False
        return True

    def _give_up(self, name: str) -> str:
        """Cancel a job that stayed NotResponding, so that a retry never runs a new attempt beside it."""
        try:
            self.ml.jobs.begin_cancel(name).result()
            canceled = "canceled it, so a retry runs no attempt beside it"
        except HttpResponseError as exc:
            canceled = f"its cancel failed ({exc.message}): cancel it in the studio before a retry"
        return (f"NotResponding on Azure ML for over {self.not_responding_s:.0f} s (no heartbeat from the job); "
                f"{canceled}")

    def validate(self, spec: CommandJobSpec) -> None:
        """The compute exists in the workspace (one ARM read) and local input paths exist; serverless (no
        compute) needs nothing."""
        self._vm_size(spec.compute or self.backend.compute)
        if Path(spec.code).is_dir():  # the SDK uploads what .amlignore / .gitignore leave: check its size first
            check_size("command_job.code", spec.code, snapshot_files(spec.code))
        for key, value in spec.inputs.items():
            path = getattr(value, "path", "")
            if path and "://" not in path and not Path(path).exists():
                raise check.fail(f"command_job.inputs.{key}", f"{path!r} does not exist here",
                                 "pass an existing local path (it is uploaded) or an azureml:// URI")

    def _vm_size(self, compute: str | None) -> str | None:
        """The VM size of a named compute (read once per backend), or the serverless job's instance type."""
        if compute is None:
            return self.backend.job_instance_type
        if compute not in self._vm_sizes:
            try:
                target = self.ml.compute.get(compute)
            except ResourceNotFoundError as exc:
                raise check.fail("azure_ml connection.compute", f"{compute!r} is not a compute of workspace "
                                 f"{self.ml.workspace_name}", "name an existing compute cluster, or leave compute "
                                 "empty to run on serverless compute") from exc
            self._vm_sizes[compute] = getattr(target, "size", None)
        return self._vm_sizes[compute]

    def submit(self, name: str, spec: CommandJobSpec) -> JobInfo:
        """Create job ``name``, or return the job already under that name (a retried task re-attaches)."""
        return self._create(name, command_job, spec, spec)

    def submit_sweep(self, name: str, sweep: SweepSpec) -> JobInfo:
        return self._create(name, sweep_job, sweep, sweep.trial)

    def _create(self, name: str, entity: Any, spec: Any, trial: CommandJobSpec) -> JobInfo:
        check.job_name("job.name", name)
        if (existing := self._find(name)) is not None:
            return existing
        compute = trial.compute or self.backend.compute
        environment = self.backend.environment or training_environment(is_gpu_size(self._vm_size(compute)))
        job = entity(spec, name=name, compute=compute, environment=environment,
                     instance_type=self.backend.job_instance_type)
        try:
            return self._info(self.ml.jobs.create_or_update(job))
        except HttpResponseError as exc:
            raise JobFailed(f"job {name} was refused by Azure ML: {exc.message}") from exc

    def get(self, name: str) -> JobInfo:
        info = self._find(name)
        if info is None:
            raise NotFound(f"job {name!r} does not exist in workspace {self.ml.workspace_name}")
        return info

    def recover(self, name: str) -> JobInfo:
        """Azure ML runs its own sweeps' controllers: nothing to restart."""
        return self.get(name)

    def list(self, prefix: str = "") -> builtins.list[JobInfo]:
        """The workspace's jobs whose names start with ``prefix``."""
        return [self._info(job) for job in self.ml.jobs.list() if job is not None and job.name.startswith(prefix)]

    def cancel(self, name: str, reason: str = "canceled by user") -> JobInfo:
        """``jobs.begin_cancel``, then wait until the job has stopped; a job already ended is left as it is."""
        info = self.get(name)
        if info.status.is_terminal():
            return info
        self.ml.jobs.begin_cancel(name).result()
        deadline = time.monotonic() + self.cancel_wait_s
        while not (info := self.get(name)).status.is_terminal() and time.monotonic() < deadline:
            time.sleep(self.poll_s)
        return info

    def wait(self, name: str, *, timeout: float | None = None, poll_s: float = 10.0, on_poll: Any = None) -> JobInfo:
        return wait_for_job(self, name, timeout=timeout, poll_s=poll_s, on_poll=on_poll)

    def logs(self, name: str, stream: str = "stdout") -> builtins.list[str]:
        """The job's ``user_logs/std_log.txt`` so far (what the script printed)."""
        files = (self.backend.run_history(name) or {}).get("logFiles") or {}
        url = files.get("user_logs/std_log.txt")
        if not url:
            return []
        response = self.backend.plain.send_request(HttpRequest("GET", url))
        return response.text().splitlines() if response.status_code == 200 else []

    def metrics(self, name: str) -> dict[str, float]:
        """The latest value of each metric the job logged to MLflow."""
        return self._run_data(name)[1]

    def params(self, name: str) -> dict[str, Any]:
        """The params the job logged to MLflow (numbers where they are)."""
        return self._run_data(name)[0]

    def log_artifacts(self, name: str, folder: str | Path, artifact_path: str) -> None:
        """Not on Azure ML (``Capabilities.artifacts`` is False): files stay where they were written."""
        raise NotSupportedOnBackend(f"job {name}: keeping files as run artifacts is not supported on Azure ML; "
                                    "check backend.capabilities.artifacts first")

    def _run_data(self, run_id: str) -> tuple[dict[str, Any], dict[str, float]]:
        """The MLflow run's params (as numbers where they are) and latest metrics, from one ``runs/get``."""
        data = ((self.backend.mlflow("runs/get", run_id=run_id) or {}).get("run") or {}).get("data") or {}
        return ({p["key"]: _number(p["value"]) for p in data.get("params", [])},
                {m["key"]: m["value"] for m in data.get("metrics", [])})

    def metric_history(self, name: str, metric: str) -> tuple[float, ...]:
        """Every value the job logged of ``metric``, in step order (a job's MLflow run id is its name)."""
        points: list[dict[str, Any]] = []
        token: str | None = None
        while True:  # MLflow pages a long history: follow next_page_token to the end
            params = {"run_id": name, "metric_key": metric, **({"page_token": token} if token else {})}
            page = self.backend.mlflow("metrics/get-history", **params) or {}
            points += page.get("metrics", [])
            if not (token := page.get("next_page_token")):
                break
        return tuple(p["value"] for p in sorted(points, key=lambda p: (p.get("step", 0), p.get("timestamp", 0))))

    def sweep_result(self, name: str) -> SweepResult:
        """The sweep's trials from the service (child jobs, their MLflow params and metric histories)."""
        try:
            sweep = self.ml.jobs.get(name)
        except ResourceNotFoundError as exc:
            raise NotFound(f"sweep {name!r} does not exist in the workspace") from exc
        if sweep.type != "sweep":
            raise NotFound(f"job {name}: is a {sweep.type} job, not a sweep; pass a sweep job's name")
        objective = Objective(primary_metric=sweep.objective.primary_metric, goal=sweep.objective.goal.lower())
        swept_status = job_status(sweep.status)
        trials = []
        for child in self._children(name):
            status = job_status(child["status"])
            read_at, known = self._read.get((name, child["runId"]), (0.0, None))
            fresh = status.is_terminal() or time.monotonic() - read_at < self.refresh_s
            if known is not None and known.status is status and fresh and status is not JobStatus.CANCELED:
                trials.append(known)  # an ended trial's metrics never change; a running one's are recent enough
                continue
            params, metrics = self._run_data(child["runId"])
            history = self.metric_history(child["runId"], objective.primary_metric)
            stop, error = _why_canceled(sweep, swept_status, len(history)) if status is JobStatus.CANCELED \
                else (None, None)
            trial = TrialInfo(name=child["runId"], params=params, status=status, history=history, metrics=metrics,
                              early_termination=stop, error=error)
            self._read[(name, child["runId"])] = (time.monotonic(), trial)
            trials.append(trial)
        best = (sweep.properties or {}).get("best_child_run_id")
        return SweepResult(name=name, status=swept_status, objective=objective, trials=tuple(trials), best_trial=best,
                           stopped_because="the sweep was canceled" if swept_status is JobStatus.CANCELED else None)

    def _children(self, name: str) -> builtins.list[dict[str, Any]]:
        """Every child run of a sweep from Run History, following its continuation tokens (the SDK's
        ``jobs.list(parent_job_name=...)`` reads the first page only: a large sweep would lose trials)."""
        runs: builtins.list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self.backend.run_history(name, "/children", **({"$continuationtoken": token} if token else {}))
            runs += (page or {}).get("value") or []
            if not (token := (page or {}).get("continuationToken")):
                return runs


def _why_canceled(sweep: Any, swept_status: JobStatus, intervals: int) -> tuple[dict[str, Any] | None, str | None]:
    """A canceled trial's label, from the evidence the service leaves: stopped by the policy only when it was
    canceled at an interval where the policy applies in a sweep that was not itself canceled."""
    policy = sweep.early_termination
    if swept_status is JobStatus.CANCELED:
        return None, "canceled: the sweep was canceled"
    if policy is not None and intervals and applies_at(policy.evaluation_interval or 1, policy.delay_evaluation or 0,
                                                       intervals):
        return {"reason": f"canceled by the sweep's {policy.type} policy at interval {intervals}",
                "interval": intervals}, None
    timeout = getattr(sweep.limits, "trial_timeout", None)
    cause = f"the trial timeout ({timeout} s), the sweep's timeout or a user" if timeout else \
        "the sweep's timeout or a user"
    return None, f"canceled after {intervals} intervals, where no early-termination policy applies: {cause}"


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class AzureModels:
    def __init__(self, backend: AzureBackend) -> None:
        self.backend = backend
        self.ml = backend.client

    def _record(self, model: Any) -> ModelVersion:
        properties = {k: _maybe_json(v) for k, v in (model.properties or {}).items()}
        return ModelVersion(name=model.name, version=int(model.version), path=model.path, format=model.type,
                            tags=dict(model.tags or {}), properties=properties, description=model.description or "")

    def register(self, name: str, path: str | Path, *, base: str | Path | None = None, format: str = "custom",
                 tags: dict[str, str] | None = None, properties: dict[str, Any] | None = None,
                 description: str = "") -> ModelVersion:
        """Register the next version of ``name``: job outputs by their ``azureml://`` URI, local files by upload."""
        if isinstance(base, str) and base.startswith("azureml://"):
            source = f"{base.rstrip('/')}/{path}"
        else:
            source = str(Path(base, path) if base is not None else Path(path))
            if not Path(source).exists():
                raise check.fail("model.path", f"{source} does not exist", "pass the model's file or folder")
        # Archived versions keep their numbers: count them too (the service lists active ones by default).
        try:
            versions = [int(m.version) for m in self.ml.models.list(name, list_view_type=ListViewType.ALL)]
        except ResourceNotFoundError:
            versions = []
        model = Model(name=name, version=str(max(versions, default=0) + 1), path=source, type="custom_model",
                      tags=dict(tags or {}), description=description,
                      properties={"format": format, **{k: v if isinstance(v, str) else json.dumps(v)
                                                       for k, v in (properties or {}).items()}})
        return self._record(self.ml.models.create_or_update(model))

    def get(self, name: str, version: int | str | None = None) -> ModelVersion:
        try:
            if version in (None, "latest"):
                return self._record(self.ml.models.get(name, label="latest"))
            return self._record(self.ml.models.get(name, str(version)))
        except ResourceNotFoundError as exc:
            raise NotFound(f"model {name}:{version} does not exist in workspace {self.ml.workspace_name}") from exc

    def list(self, name: str | None = None) -> builtins.list[ModelVersion]:
        try:
            return sorted((self._record(m) for m in self.ml.models.list(name)), key=lambda m: m.version)
        except ResourceNotFoundError:
            return []

    def download(self, name: str, version: int | str | None, dest: str | Path) -> Path:
        """The version's files in ``dest`` (the SDK downloads them under ``<dest>/<name>/``)."""
        model = self.get(name, version)
        dest = Path(dest)
        with tempfile.TemporaryDirectory(dir=self.backend.cache_dir) as scratch:
            self.ml.models.download(name, str(model.version), download_path=scratch)
            root = Path(scratch) / name
            files = [p for p in root.rglob("*") if p.is_file()]
            if not files:
                raise NotFound(f"model {name}:{model.version}: no files at {model.path}")
            # A folder model comes down as <name>/<folder>/...: hand over the folder's contents.
            entries = list(root.iterdir())
            top = entries[0] if len(entries) == 1 and entries[0].is_dir() else root
            shutil.copytree(top, dest, dirs_exist_ok=True)
        return dest

    def update_tags(self, name: str, version: int, tags: dict[str, str | None]) -> ModelVersion:
        """Tags of a registered version are mutable on Azure ML: the version is sent again with its new tags."""
        try:
            model = self.ml.models.get(name, str(version))
        except ResourceNotFoundError as exc:
            raise NotFound(f"model {name}:{version} does not exist") from exc
        model.tags = {k: v for k, v in {**(model.tags or {}), **tags}.items() if v is not None}
        return self._record(self.ml.models.create_or_update(model))

    def archive(self, name: str, version: int) -> ModelVersion:
        try:
            self.ml.models.archive(name, str(version))
        except ResourceNotFoundError as exc:
            raise NotFound(f"model {name}:{version} does not exist") from exc
        return self.get(name, version)


LEASE_TAG = "mlrunway.lease"
WRITE_BACKOFF_S = 1.0  # the first wait after a 409 or 429 without Retry-After; doubled each time, up to 60 s
T = TypeVar("T")


def _retry_after(exc: HttpResponseError) -> float | None:
    """The service's Retry-After (seconds), if its answer had one."""
    try:
        return float(exc.response.headers["Retry-After"])  # type: ignore[union-attr]
    except (AttributeError, KeyError, TypeError, ValueError):
        return None

AUTH_RENEW_S = 300.0  # scoring keys are read again after 5 minutes; a token is renewed 5 minutes before it expires


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


def _maybe_json(value: str) -> Any:
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def _model_ref(model: Any) -> str:
    """``name:version`` of a deployment's model, whether the SDK gives an asset id or a reference."""
    text = str(getattr(model, "id", None) or model or "")
    if "/models/" in text:  # azureml://.../models/<name>/versions/<version> or an ARM id
        tail = text.split("/models/", 1)[1].split("/")
        return f"{tail[0]}:{tail[2]}" if len(tail) >= 3 else tail[0]
    return text.removeprefix("azureml:")


class AzureEndpoints:
    """:param write_retry_s: how long a write the service answers 409 (another operation on the endpoint is
        running: a deployment still updating) or 429 (throttled) is tried again, with backoff, before it fails."""

    def __init__(self, backend: AzureBackend, *, poll_s: float = 10.0, write_retry_s: float = 600.0) -> None:
        self.backend = backend
        self.ml = backend.client
        self.poll_s, self.write_retry_s = poll_s, write_retry_s
        self._auth: dict[str, tuple[str, float]] = {}  # endpoint -> (Authorization header, renew it after)

    def _write(self, what: str, send: Callable[[], T]) -> T:
        """``send()``, again after 409 Conflict and 429 Too Many Requests (the service's ``Retry-After``, else
        1, 2, 4... s) until ``write_retry_s`` has passed; then the last error, naming what was being written."""
        deadline, backoff = time.monotonic() + self.write_retry_s, WRITE_BACKOFF_S
        while True:
            try:
                return send()
            except HttpResponseError as exc:
                if exc.status_code not in (409, 429):
                    raise
                wait = _retry_after(exc) or backoff
                said = getattr(exc.error, "message", None) or exc.message
                if time.monotonic() + wait > deadline:
                    raise EndpointError(f"{what}: still refused after {self.write_retry_s:g} s of retries "
                                        f"(HTTP {exc.status_code}: {said})") from exc
                log.warning("%s: HTTP %s (%s); again in %.1f s", what, exc.status_code, said, wait)
                time.sleep(wait)
                backoff = min(backoff * 2, 60.0)

    def _info(self, endpoint: Any) -> EndpointInfo:
        return EndpointInfo(name=endpoint.name, scoring_uri=endpoint.scoring_uri, traffic=dict(endpoint.traffic or {}),
                            mirror_traffic=dict(endpoint.mirror_traffic or {}), auth_mode=endpoint.auth_mode or "key",
                            provisioning_state=ProvisioningState.parse(endpoint.provisioning_state))

    def get_keys(self, name: str) -> dict[str, str]:
        """Key auth: ``primary`` and ``secondary``. Token auth (AMLToken: the service's token route; AADToken: a
        token of the credential for ml.azure.com): ``token``, ``token_type`` and ``expires`` (epoch seconds)."""
        credentials = self.ml.online_endpoints.get_keys(name)
        if hasattr(credentials, "primary_key"):
            return {"primary": credentials.primary_key, "secondary": credentials.secondary_key}
        return {"token": credentials.access_token, "token_type": getattr(credentials, "token_type", None) or "Bearer",
                "expires": str(credentials.expiry_time_utc or 0)}

    def _authorization(self, endpoint: str, *, fresh: bool = False) -> str:
        """The scoring request's Authorization header, kept until it needs renewing: a token until its refresh
        time (AMLToken's ``refreshAfterTimeUtc``, else 5 minutes before it expires), keys for 5 minutes (a
        regenerated key is picked up)."""
        cached = self._auth.get(endpoint)
        if cached and not fresh and time.time() < cached[1]:
            return cached[0]
        credentials = self.ml.online_endpoints.get_keys(endpoint)
        if hasattr(credentials, "primary_key"):
            header, renew = f"Bearer {credentials.primary_key}", time.time() + AUTH_RENEW_S
        else:
            expires = float(credentials.expiry_time_utc or 0)
            refresh = float(getattr(credentials, "refresh_after_time_utc", 0) or 0)
            header, renew = f"Bearer {credentials.access_token}", refresh or expires - AUTH_RENEW_S
        self._auth[endpoint] = (header, renew)
        return header

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
        self._write(f"endpoint {name}", lambda: self.ml.online_endpoints.begin_create_or_update(endpoint))
        return self.get(name)

    def create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo:
        """As ``begin_create_or_update``, then wait until the endpoint is provisioned."""
        self.begin_create_or_update(name)
        return self._info(wait_provisioned(lambda: self.ml.online_endpoints.get(name), f"endpoint {name}",
                                           poll_s=self.poll_s))

    def begin_create_or_update_deployment(self, endpoint: str, name: str,
                                          settings: DeploymentSettings) -> DeploymentInfo:
        """Send a ``ManagedOnlineDeployment`` of the settings' model with its scoring script; don't wait."""
        deployment = ManagedOnlineDeployment(
            name=name, endpoint_name=endpoint, model=f"azureml:{settings.model_name}:{settings.model_version}",
            code_configuration=CodeConfiguration(code=settings.code_dir, scoring_script=settings.scoring_script),
            environment=scoring_environment(),
            instance_type=settings.instance_type or self.backend.instance_type,
            instance_count=settings.instance_count or self.backend.instance_count,
            environment_variables=dict(settings.environment_variables),
        )
        self._delete_if_failed(endpoint, name)
        try:
            poller = self._write(f"deployment {endpoint}/{name}",
                                 lambda: self.ml.online_deployments.begin_create_or_update(deployment))
        except HttpResponseError as exc:
            raise EndpointError(f"deployment {endpoint}/{name} was refused: {exc.message}") from exc
        return self.get_deployment(endpoint, name, operation=_operation_url(poller))

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
        self._write(f"deletion of {endpoint}/{name}",
                    lambda: self.ml.online_deployments.begin_delete(name=name, endpoint_name=endpoint).result())

    def create_or_update_deployment(self, endpoint: str, name: str, settings: DeploymentSettings, *,
                                    timeout_s: float = 3600.0) -> DeploymentInfo:
        """As ``begin_create_or_update_deployment``, then wait; a failure raises with the deployment's log."""
        info = self.begin_create_or_update_deployment(endpoint, name, settings)
        if not info.provisioning_state.is_terminal():
            info = wait_provisioned(lambda: self.get_deployment(endpoint, name, operation=info.operation),
                                    f"deployment {endpoint}/{name}", timeout=timeout_s, poll_s=self.poll_s)
        if info.provisioning_state is not ProvisioningState.SUCCEEDED:
            raise EndpointError(info.error or f"deployment {endpoint}/{name} {info.provisioning_state.value}")
        return info

    def get_deployment(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo:
        """The deployment's provisioning state. A failure carries why: the code and message of its operation
        (``operation``, from ``begin_create_or_update_deployment``: ImageBuildFailure, OutOfQuota, ...), then
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
            status = self.backend.call("GET", operation) or {}
        except HttpResponseError as exc:
            return f"its operation could not be read ({exc.message})"
        error = status.get("error") or {}
        return f"{error.get('code', status.get('status', 'Unknown'))}: {error.get('message', 'no message')}"

    def list_deployments(self, endpoint: str) -> builtins.list[DeploymentInfo]:
        return [self.get_deployment(endpoint, d.name)
                for d in self.ml.online_deployments.list(endpoint_name=endpoint) if d is not None]

    def delete_deployment(self, endpoint: str, name: str) -> bool:
        """``online_deployments.begin_delete`` and wait (Azure cannot cancel a provisioning otherwise); False when it
        was already gone (Azure answers a DELETE of a missing deployment with 204, so ask first)."""
        try:
            self.ml.online_deployments.get(name=name, endpoint_name=endpoint)
        except ResourceNotFoundError:
            return False
        self._write(f"deletion of {endpoint}/{name}",
                    lambda: self.ml.online_deployments.begin_delete(name=name, endpoint_name=endpoint).result())
        return True

    def set_traffic(self, endpoint: str, traffic: dict[str, int],
                    mirror_traffic: dict[str, int] | None = None) -> EndpointInfo:
        current = self.ml.online_endpoints.get(endpoint)
        current.traffic = dict(traffic)
        if mirror_traffic is not None:
            current.mirror_traffic = dict(mirror_traffic)
        return self._info(self._write(f"traffic {traffic} of endpoint {endpoint}",
                                      lambda: self.ml.online_endpoints.begin_create_or_update(current).result()))

    def deployment_metrics(self, endpoint: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
        """The deployment's requests, errors and p99 latency over [start, end) from the endpoint's Azure Monitor
        metrics (per minute): ``RequestsPerMinute`` split by ``statusCode`` and ``modelStatusCode`` (an error is
        a 5xx, a 408, or a 424 whose model status is 500 or more) and ``RequestLatency_P99`` (the worst minute).
        Each is asked for with the aggregation its definition documents, Average: at a one-minute grain, a
        minute's average of requests per minute is that minute's count."""
        resource = self.ml.online_endpoints.get(endpoint).id
        timespan = (datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(max(end, start + 1), UTC))
        only = f"deployment eq '{deployment}'"
        counts = self.backend.monitor.query_resource(
            resource, ["RequestsPerMinute"], timespan=timespan, granularity=timedelta(minutes=1),
            aggregations=["Average"], filter=f"{only} and statusCode eq '*' and modelStatusCode eq '*'")
        requests = errors = 0
        for series in counts.metrics[0].timeseries if counts.metrics else []:
            dims = {k.lower(): v for k, v in series.metadata_values.items()}
            total = round(sum(point.average or 0 for point in series.data))
            requests += total
            status, model = dims.get("statuscode") or "0", dims.get("modelstatuscode")
            errors += total if deployment_error(int(status) if status.isdigit() else 0, model) else 0
        latency = self.backend.monitor.query_resource(
            resource, ["RequestLatency_P99"], timespan=timespan, granularity=timedelta(minutes=1),
            aggregations=["Average"], filter=only)
        p99s = [point.average for series in (latency.metrics[0].timeseries if latency.metrics else [])
                for point in series.data if point.average is not None]
        return DeploymentMetrics(deployment=deployment, start=start, end=end, requests=requests, errors=errors,
                                 p99_ms=max(p99s) if p99s else None)

    @cached_property
    def blob_lease(self) -> BlobLease | None:
        """The atomic lease in the workspace's default storage (``mlrunway.azure.lease``); None once refused."""
        return BlobLease.for_workspace(self.ml, self.backend.credential, **self.backend.transport)

    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """The rollout lease: a blob lease in the workspace's default storage (atomic: of two runs starting in
        the same second, one proceeds), recorded as the endpoint's ``mlrunway.lease`` tag for anyone reading the
        endpoint. Without the Storage Blob Data Contributor role there, the tag alone, with a warning."""
        try:
            if self.blob_lease is not None and (held := self.blob_lease.lease(endpoint, holder, ttl_s)) is not None:
                return held
        except LeaseUnavailable as exc:
            self._tag_only(exc)
        held = self._tag_lease(endpoint, holder, ttl_s)
        if held is not None and self.blob_lease is not None:  # a run of an earlier mlrunway holds the tag alone
            self.blob_lease.release(endpoint, holder)
        return held

    def release(self, endpoint: str, holder: str) -> None:
        try:
            if self.blob_lease is not None:
                self.blob_lease.release(endpoint, holder)
        except LeaseUnavailable as exc:
            self._tag_only(exc)
        self._tag_release(endpoint, holder)

    def _tag_only(self, exc: LeaseUnavailable) -> None:
        log.warning("%s; until then the rollout lease is the endpoint's tag alone, which two runs starting in the "
                    "same seconds can both take", exc)
        self.blob_lease = None

    def _tag_lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """The lease as the endpoint's tag (``mlrunway.lease``: holder and expiry), written with the endpoint's
        update. A missing endpoint has nothing to interleave with: granted unwritten (the caller creates the
        endpoint and leases again). Read, then write: not atomic (the spec has no ETag on endpoints)."""
        current, held = self._lease_of(endpoint)
        if current is None:
            return None
        if held and held.get("holder") != holder and float(held.get("until", 0)) > time.time():
            return f"{held['holder']} (until {datetime.fromtimestamp(float(held['until']), UTC):%H:%M:%S} UTC)"
        current.tags = {**(current.tags or {}), LEASE_TAG: json.dumps({"holder": holder, "until": time.time() + ttl_s})}
        self._write(f"the lease of endpoint {endpoint}",
                    lambda: self.ml.online_endpoints.begin_create_or_update(current).result())
        return None

    def _tag_release(self, endpoint: str, holder: str) -> None:
        current, held = self._lease_of(endpoint)
        if current is not None and held and held.get("holder") == holder:
            current.tags = {k: v for k, v in (current.tags or {}).items() if k != LEASE_TAG}
            self._write(f"the lease of endpoint {endpoint}",
                        lambda: self.ml.online_endpoints.begin_create_or_update(current).result())

    def _lease_of(self, endpoint: str) -> tuple[Any, dict[str, Any] | None]:
        """The endpoint (None when it does not exist) and the lease its tag holds (None when there is none)."""
        try:
            current = self.ml.online_endpoints.get(endpoint)
        except ResourceNotFoundError:
            return None, None
        held = _maybe_json((current.tags or {}).get(LEASE_TAG, ""))
        return current, held if isinstance(held, dict) else None

    def get_logs(self, endpoint: str, deployment: str, lines: int = 100, *, container: str | None = None) -> str:
        """The tail of a deployment's log: its inference server's, or ``container="storage-initializer"``."""
        try:
            return self.ml.online_deployments.get_logs(deployment, endpoint, lines, container_type=container) \
                or "(empty)"
        except HttpResponseError as exc:
            return f"(no logs: {exc.message})"

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
        response = self.backend.plain.send_request(HttpRequest("POST", uri, content=body, headers=headers))
        if response.status_code == 401:  # a key regenerated, a token revoked: once more with fresh credentials
            headers["Authorization"] = self._authorization(endpoint, fresh=True)
            response = self.backend.plain.send_request(HttpRequest("POST", uri, content=body, headers=headers))
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


def _satisfies_protocol(backend: AzureBackend) -> Backend:
    """mypy proves here that AzureBackend is a ``Backend`` (a mismatch fails ``make test``)."""
    return backend
