"""Command jobs and sweeps on Azure ML: the SDK's ``jobs`` operations for the jobs themselves, the workspace's
own REST services (``mlrunway.azure.rest``) for their metrics, params, logs, errors and a sweep's trials."""

from __future__ import annotations

import builtins
import functools
import logging
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from azure.ai.ml import MLClient
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError, ServiceRequestError, ServiceResponseError

from mlrunway import check
from mlrunway.azure.entities import command_job, sweep_job
from mlrunway.azure.environments import export_environment, is_gpu_size, scoring_environment, training_environment
from mlrunway.azure.outputs import job_outputs
from mlrunway.azure.rest import WorkspaceRest
from mlrunway.azure.writes import transient_reads, watched_write
from mlrunway.backend.naming import base_name
from mlrunway.backend.protocol import Jobs
from mlrunway.backend.snapshot import check_size, snapshot_files
from mlrunway.backend.types import JobInfo, JobStatus, SweepResult, TrialInfo, Usage
from mlrunway.early_termination import EarlyTerminationPolicy, applies_at, policy_from_dict
from mlrunway.errors import JobFailed, MlrunwayError, NotFound, SpecError
from mlrunway.ledger.budget import BUDGET_STOP_TAG
from mlrunway.specs.job import ROLE_TAG, CommandJobSpec
from mlrunway.specs.sweep import Objective, SweepSpec

__all__ = ["NOT_RESPONDING_S", "AzureJobs", "job_status"]

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
log = logging.getLogger(__name__)


SERVERLESS_DEFAULT = "the serverless default size"  # a serverless job without an instance type: the service picks


def utc_seconds(value: Any) -> float | None:
    """A time as epoch seconds: ISO 8601 text (Run History's ``startTimeUtc``) or a datetime (the SDK's
    ``creation_context.created_at``); None where absent or unreadable."""
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value)).timestamp() if value else None
    except ValueError:
        return None


def run_times(run: dict[str, Any]) -> tuple[float | None, float | None]:
    """A Run History run's ``startTimeUtc`` and ``endTimeUtc`` as epoch seconds; None where absent."""
    return utc_seconds(run.get("startTimeUtc")), utc_seconds(run.get("endTimeUtc"))


def job_status(azure_status: object) -> JobStatus:
    """Our status of an Azure ML job status (a string or the SDK's enum); an unknown one is logged, still running."""
    text = str(getattr(azure_status, "value", azure_status) or "NotStarted")
    if text not in _STATUS:
        log.warning("Unknown Azure ML job status %r: treated as still running", text)
    return _STATUS.get(text, JobStatus.RUNNING)


class AzureJobs(Jobs):
    """Azure ML runs its own sweeps' controllers (``recover`` is ``get``); files are not kept as run artifacts
    (not :class:`~mlrunway.backend.protocol.Artifacts`): they stay where they were written.

    :param ml: the workspace's ``MLClient``; ``rest``: its own REST services.
    :param compute: compute cluster for jobs and sweep trials; None runs them on serverless compute.
    :param job_instance_type: VM size of a serverless job (None: the service's default).
    :param environment: the jobs' environment; None picks ours for the compute's VM size.
    :param export_environment: the export job's (a job tagged ``mlrunway.role: export``); None: ours, the training
        image with onnx and onnxruntime added.
    :param cancel_wait_s: how long ``cancel`` waits for a canceled job to reach Canceled; ``poll_s`` between.
    :param refresh_s: how old a running trial's metrics may be before ``sweep_result`` reads them again (an
        ended trial's are read once; a trial whose status changed is read at once).
    :param reports: the backend's reports folder, where a budget's decision is kept if its tag is refused.
    """

    wait_poll_s = 10.0  # each poll is ARM and Run History reads, which count against the subscription's limits

    def __init__(self, ml: MLClient, rest: WorkspaceRest, *, compute: str | None = None,
                 job_instance_type: str | None = None, environment: str | None = None,
                 export_environment: str | None = None, cancel_wait_s: float = 300.0,
                 poll_s: float = 5.0, refresh_s: float = 60.0, not_responding_s: float = NOT_RESPONDING_S,
                 reports: Path | None = None) -> None:
        self.ml, self.rest = ml, rest
        self.compute, self.job_instance_type, self.environment = compute, job_instance_type, environment
        self.export_environment = export_environment
        self.cancel_wait_s, self.poll_s, self.refresh_s = cancel_wait_s, poll_s, refresh_s
        self.not_responding_s = not_responding_s
        self.reports = reports  # where a sweep's budget decision is kept when the service refuses its tag
        self._silent: dict[str, float] = {}  # job -> when this process first saw it NotResponding
        self._read: dict[tuple[str, str], tuple[float, TrialInfo]] = {}  # (sweep, trial) -> (when read, record)
        self._clusters: dict[str, tuple[str | None, str]] = {}  # compute name -> its VM size and tier
        self._sizes: dict[str, str] | None = None  # the region's VM sizes, lower-cased -> as the region spells them

    def _find(self, name: str) -> JobInfo | None:
        try:
            return self._info(self.ml.jobs.get(name))
        except ResourceNotFoundError:
            return None

    def record_stop(self, name: str, reason: str) -> None:
        """Record why sweep ``name`` is stopped (its budget) as a tag of its run (MLflow's ``runs/log-batch``; a run's
        tags are its job's in the studio), before the watcher cancels it: every reader then reads the same decision.
        Where the service refuses the tag, in the run's reports folder (``<reports>/<sweep>/budget-stop-<attempt>.txt``).
        """
        try:
            self.rest.set_tags(name, {BUDGET_STOP_TAG: reason})
        except Exception as exc:  # noqa: BLE001 - refused or away: the decision must still be on record
            if self.reports is None:
                raise
            log.warning("Sweep %s: the budget's decision could not be tagged on its run (%s: %s); it is kept in the "
                        "run's reports folder", name, type(exc).__name__, exc)
            path = self._stop_file(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(reason)

    def _stop_file(self, name: str) -> Path:
        assert self.reports is not None
        return self.reports / base_name(name) / f"budget-stop-{name}.txt"

    def _budget_stop(self, job: Any, status: JobStatus) -> str | None:
        """The decision a canceled sweep's watcher recorded on it before canceling it (:meth:`record_stop`)."""
        if job.type != "sweep" or status is not JobStatus.CANCELED:
            return None
        tags = (self.rest.run_history(job.name) or {}).get("tags") or {}
        if tags.get(BUDGET_STOP_TAG):
            return str(tags[BUDGET_STOP_TAG])
        kept = self._stop_file(job.name) if self.reports is not None else None
        return kept.read_text() if kept is not None and kept.is_file() else None

    def _info(self, job: Any) -> JobInfo:
        status = job_status(job.status)
        azure_status = str(getattr(job.status, "value", job.status))
        error = _WHY.get(azure_status)
        if azure_status == "NotResponding" and self._silent_too_long(job.name):
            status, error = JobStatus.FAILED, self._give_up(job.name)
        elif azure_status != "NotResponding":
            self._silent.pop(job.name, None)
        if status is JobStatus.FAILED and error is None:
            error = self.rest.error(job.name)
        budget_stop = self._budget_stop(job, status)
        return JobInfo(name=job.name, kind="sweep" if job.type == "sweep" else "command", status=status,
                       error=budget_stop or error, budget_stop=budget_stop, outputs=job_outputs(job.name),
                       mlflow_run_id=job.name,
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
        try:  # a transient failure is Unavailable: the watch's next poll cancels it again
            watched_write(f"the cancel of job {name}", lambda: self.ml.jobs.begin_cancel(name).result())
            canceled = "canceled it, so a retry runs no attempt beside it"
        except HttpResponseError as exc:
            canceled = f"its cancel failed ({exc.message}): cancel it in the studio before a retry"
        return (f"NotResponding on Azure ML for over {self.not_responding_s:.0f} s (no heartbeat from the job); "
                f"{canceled}")

    def validate(self, spec: CommandJobSpec) -> None:
        """The compute exists in the workspace (one ARM read) and local input paths exist; serverless (no
        compute) needs nothing."""
        self._vm_size(spec.compute or self.compute)
        if (spec.queue_settings or {}).get("job_tier", "null") != "null" and (spec.compute or self.compute):
            raise check.fail("command_job.queue_settings", f"applies to serverless jobs, and this job runs on compute "
                             f"cluster {spec.compute or self.compute!r}, whose own priority (dedicated or low "
                             "priority) decides", "leave compute empty (the job's and the connection's) to run on "
                             "serverless compute, or drop queue_settings")
        if Path(spec.code).is_dir():  # the SDK uploads what .amlignore / .gitignore leave: check its size first
            check_size("command_job.code", spec.code, snapshot_files(spec.code))
        for key, value in spec.inputs.items():
            path = getattr(value, "path", "")
            if path and "://" not in path and not Path(path).exists():
                raise check.fail(f"command_job.inputs.{key}", f"{path!r} does not exist here",
                                 "pass an existing local path (it is uploaded) or an azureml:// URI")

    def _vm_size(self, compute: str | None) -> str | None:
        """The VM size of a named compute (read once per backend), or the serverless job's instance type."""
        return self.job_instance_type if compute is None else self._cluster(compute)[0]

    def _cluster(self, compute: str) -> tuple[str | None, str]:
        """A compute cluster's VM size and tier (``dedicated`` or ``low_priority``), read once per backend."""
        if compute not in self._clusters:
            try:
                target = self.ml.compute.get(compute)
            except ResourceNotFoundError as exc:
                raise check.fail("azure_ml connection.compute", f"{compute!r} is not a compute of workspace "
                                 f"{self.ml.workspace_name}", "name an existing compute cluster, or leave compute "
                                 "empty to run on serverless compute") from exc
            size = getattr(target, "size", None)
            facts = (size and self.spelled(size), str(getattr(target, "tier", None) or "dedicated"))
            if self._sizes is None:  # the region's sizes could not be read: its spelling is read again next time
                return facts
            self._clusters[compute] = facts
        return self._clusters[compute]

    @functools.cached_property
    def region(self) -> str:
        """The workspace's region (one ARM read per backend): its VM sizes and prices are the region's."""
        return str(self.ml.workspaces.get(self.ml.workspace_name).location).lower()

    def spelled(self, size: str) -> str:
        """``size`` as the workspace's region lists its VM sizes (ARM answers a cluster's ``vmSize`` upper-cased,
        ``STANDARD_NC6S_V3``; Retail Prices matches ``armSkuName`` case-sensitively, ``Standard_NC6s_v3``): the
        region's sizes read once per backend (``compute.list_sizes``); a size it does not list is kept as given."""
        if self._sizes is None:
            try:
                listed = self.ml.compute.list_sizes(location=self.region)
                self._sizes = {str(s.name).lower(): str(s.name) for s in listed if s.name}
            except (HttpResponseError, ServiceRequestError, ServiceResponseError) as exc:
                log.warning("The region's VM sizes could not be read (%s): size %s is priced as ARM spells it",
                            exc, size)
                return size
        return self._sizes.get(size.lower(), size)

    def log_metrics(self, name: str, metrics: dict[str, float]) -> None:
        """Log ``metrics`` on the job's MLflow run (its run id is the job's name) on the workspace's tracking
        server (:class:`~mlrunway.backend.protocol.RunMetrics`)."""
        self.rest.log_metrics(name, metrics)

    # -- usage (Metered): what a job ran on, and its start and end as Run History records them ----------------
    @transient_reads
    def usage(self, name: str) -> Usage | None:
        """The job's compute (its cluster's VM size and tier, or a serverless job's instance type and job tier), its
        nodes, and its run's ``startTimeUtc`` and ``endTimeUtc`` from Run History (the job resource has no times)."""
        try:
            job = self.ml.jobs.get(name)
        except ResourceNotFoundError:
            return None
        started, ended = run_times(self.rest.run_history(name) or {})
        return None if started is None else self._usage(job, started, ended)

    @transient_reads
    def trial_usage(self, name: str) -> dict[str, Usage]:
        """Each started trial of the sweep, on the sweep's compute and trial resources, timed by its child run."""
        try:
            sweep = self.ml.jobs.get(name)
        except ResourceNotFoundError:
            return {}
        found = {}
        for child in self.rest.children(name):
            started, ended = run_times(child)
            if started is not None:
                found[child["runId"]] = self._usage(sweep, started, ended)
        return found

    def planned_usage(self, spec: CommandJobSpec) -> Usage:
        """The VM size and tier of the job's compute (its cluster's, one ARM read per backend, or a serverless job's
        instance type and job tier) and its nodes."""
        compute = spec.compute or self.compute
        if compute is not None:
            size, tier = self._cluster(compute)
        else:
            size = self.job_instance_type or SERVERLESS_DEFAULT
            tier = "spot" if str((spec.queue_settings or {}).get("job_tier") or "").lower() == "spot" else "dedicated"
        return Usage(size=size or SERVERLESS_DEFAULT, tier=tier, instances=spec.instance_count)

    def _usage(self, job: Any, started: float, ended: float | None) -> Usage:
        resources = getattr(job, "resources", None) or getattr(getattr(job, "trial", None), "resources", None)
        instances = int(getattr(resources, "instance_count", None) or 1)
        compute = str(job.compute or "").rsplit("/", 1)[-1].removeprefix("azureml:") or None
        if compute is not None:
            size, tier = self._cluster(compute)
        else:  # serverless: the job's instance type (else the service's default, which no rate card can name)
            size = getattr(resources, "instance_type", None) or self.job_instance_type or SERVERLESS_DEFAULT
            job_tier = str(getattr(getattr(job, "queue_settings", None), "job_tier", None) or "").lower()
            tier = "spot" if job_tier == "spot" else "dedicated"
        return Usage(started=started, ended=ended, size=size or SERVERLESS_DEFAULT, tier=tier, instances=instances)

    def submit(self, name: str, spec: CommandJobSpec) -> JobInfo:
        """Create job ``name``, or return the job already under that name (a retried task re-attaches)."""
        return self._create(name, command_job, spec, spec)

    def submit_sweep(self, name: str, sweep: SweepSpec) -> JobInfo:
        return self._create(name, sweep_job, sweep, sweep.trial)

    def _create(self, name: str, entity: Any, spec: Any, trial: CommandJobSpec) -> JobInfo:
        check.job_name("job.name", name)
        if (existing := self._find(name)) is not None:
            return existing
        compute = trial.compute or self.compute
        environment = self._environment(trial.tags.get(ROLE_TAG), compute)
        job = entity(spec, name=name, compute=compute, environment=environment, instance_type=self.job_instance_type)
        try:
            return self._info(self.ml.jobs.create_or_update(job))
        except HttpResponseError as exc:
            raise JobFailed(f"job {name} was refused by Azure ML: {exc.message}") from exc

    def _environment(self, role: str | None, compute: str | None) -> Any:
        """A job's environment when its spec names none: the export job's (the connection's export_environment, else
        ours with onnx), the reference job's (the deployments' scoring environment), or the trials' (the connection's
        environment, else ours), for the compute's VM size."""
        if role == "export":
            return self.export_environment or export_environment(is_gpu_size(self._vm_size(compute)))
        if role == "reference":  # the smoke test's reference answer: where the deployment's score.py runs
            return scoring_environment()
        return self.environment or training_environment(is_gpu_size(self._vm_size(compute)))

    @transient_reads
    def get(self, name: str) -> JobInfo:
        info = self._find(name)
        if info is None:
            raise NotFound(f"job {name!r} does not exist in workspace {self.ml.workspace_name}")
        return info

    def list(self, prefix: str = "") -> builtins.list[JobInfo]:
        """The workspace's jobs whose names start with ``prefix``, in name order (the service lists them in its own)."""
        jobs = sorted((job for job in self.ml.jobs.list() if job is not None and job.name.startswith(prefix)),
                      key=lambda job: job.name)
        return [self._info(job) for job in jobs]

    def cancel(self, name: str, reason: str = "canceled by user") -> JobInfo:
        """``jobs.begin_cancel``, then wait until the job has stopped; a job already ended is left as it is."""
        info = self.get(name)
        if info.status.is_terminal():
            return info
        watched_write(f"the cancel of job {name}", lambda: self.ml.jobs.begin_cancel(name).result())
        deadline = time.monotonic() + self.cancel_wait_s
        while not (info := self.get(name)).status.is_terminal() and time.monotonic() < deadline:
            time.sleep(self.poll_s)
        return info

    def logs(self, name: str, stream: str = "stdout") -> builtins.list[str]:
        """The job's ``user_logs/std_log.txt`` so far (what the script printed)."""
        return self.rest.std_log(name)

    def metrics(self, name: str) -> dict[str, float]:
        """The latest value of each metric the job logged to MLflow."""
        return self.rest.run_data(name)[1]

    def params(self, name: str) -> dict[str, Any]:
        """The params the job logged to MLflow (numbers where they are)."""
        return self.rest.run_data(name)[0]

    def metric_history(self, name: str, metric: str) -> tuple[float, ...]:
        """Every value the job logged of ``metric``, in step order (a job's MLflow run id is its name)."""
        return self.rest.metric_history(name, metric)

    def sweep_result(self, name: str) -> SweepResult:
        """The sweep's trials from the service (child jobs, their MLflow params and metric histories)."""
        try:
            sweep = self.ml.jobs.get(name)
        except ResourceNotFoundError as exc:
            raise NotFound(f"sweep {name!r} does not exist in the workspace") from exc
        if sweep.type != "sweep":
            raise SpecError(f"job {name}: is a {sweep.type} job, not a sweep; pass a sweep job's name")
        objective = Objective(primary_metric=sweep.objective.primary_metric, goal=sweep.objective.goal.lower())
        swept_status = job_status(sweep.status)
        budget_stop = self._budget_stop(sweep, swept_status)
        trials = []
        for child in sorted(self.rest.children(name), key=_trial_index):  # Run History lists them its own way
            status = job_status(child["status"])
            read_at, known = self._read.get((name, child["runId"]), (0.0, None))
            fresh = status.is_terminal() or time.monotonic() - read_at < self.refresh_s
            if known is not None and known.status is status and fresh and status is not JobStatus.CANCELED:
                trials.append(known)  # an ended trial's metrics never change; a running one's are recent enough
                continue
            params, metrics = self.rest.run_data(child["runId"])
            history = self.rest.metric_history(child["runId"], objective.primary_metric)
            stop, error = _why_canceled(sweep, swept_status, len(history), budget_stop) \
                if status is JobStatus.CANCELED else (None, None)
            trial = TrialInfo(name=child["runId"], params=params, status=status, history=history, metrics=metrics,
                              early_termination=stop, error=error)
            self._read[(name, child["runId"])] = (time.monotonic(), trial)
            trials.append(trial)
        best = (sweep.properties or {}).get("best_child_run_id")
        return SweepResult(name=name, status=swept_status, objective=objective, trials=tuple(trials), best_trial=best,
                           policy=_policy(sweep.early_termination),
                           stopped_because=budget_stop or (
                               "the sweep was canceled" if swept_status is JobStatus.CANCELED else None))


def _trial_index(child: dict[str, Any]) -> int:
    """A trial's index in its sweep: Azure ML names a sweep's children ``<sweep>_<index>``."""
    found = re.search(r"_(\d+)$", child["runId"])
    return int(found.group(1)) if found else -1


def _policy(sdk: Any) -> EarlyTerminationPolicy | None:
    """The sweep's early-termination policy in mlrunway's words (the SDK's object: its type and settings); None
    without one, or one mlrunway does not know (the report then replays nothing as its own)."""
    if sdk is None:
        return None
    settings = {key: getattr(sdk, key, None) for key in ("slack_factor", "slack_amount", "truncation_percentage",
                                                          "evaluation_interval", "delay_evaluation")}
    try:
        return policy_from_dict({"type": str(sdk.type).lower(), **{k: v for k, v in settings.items() if v is not None}})
    except (MlrunwayError, TypeError):
        return None


def _why_canceled(sweep: Any, swept_status: JobStatus, intervals: int,
                  budget_stop: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """A canceled trial's label, from the evidence the service leaves: stopped by the policy only when it was
    canceled at an interval where the policy applies in a sweep that was not itself canceled; by the budget where
    the sweep's watcher recorded that decision before canceling it."""
    policy = sweep.early_termination
    if budget_stop:
        return None, f"canceled after {intervals} intervals: {budget_stop}"
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
