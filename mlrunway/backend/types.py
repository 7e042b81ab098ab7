"""Backend-neutral records: what crosses the ``Backend`` protocol, the same fields on every backend.

Status enums with their terminal sets; a job, a sweep trial, a sweep's result, a model version, an endpoint
(never its keys), a deployment and the settings a deployment is made with.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway.backend.capture import DataCollector
from mlrunway.early_termination import EarlyTerminationPolicy
from mlrunway.settings import EMPTY_IS_NONE, NOT_A_FLAG, parse, setting
from mlrunway.specs.sweep import Objective

log = logging.getLogger(__name__)


class JobStatus(enum.StrEnum):
    """Azure ML's job states that both backends report (Azure's others map onto these)."""

    QUEUED = "Queued"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"

    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED})


class ProvisioningState(enum.StrEnum):
    """Azure ML's provisioning states of an online endpoint or deployment (the REST spec's
    ``DeploymentProvisioningState``, an open enum), which both backends report."""

    CREATING = "Creating"
    UPDATING = "Updating"
    SCALING = "Scaling"
    DELETING = "Deleting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELED = "Canceled"

    def is_terminal(self) -> bool:
        return self in (ProvisioningState.SUCCEEDED, ProvisioningState.FAILED, ProvisioningState.CANCELED)

    @classmethod
    def parse(cls, value: object) -> ProvisioningState:
        """Any value a service may send (the spec's enum is open-ended): an unknown one is logged and read as
        still in progress (Updating), never a crash and never a terminal state."""
        text = str(getattr(value, "value", value) or "")
        for state in cls:
            if state.value.lower() == text.lower():
                return state
        log.warning("Unknown provisioning state %r: treated as still in progress", text)
        return cls.UPDATING


@dataclass(frozen=True, kw_only=True)
class DeploymentInfo:
    """Where a deployment's provisioning stands; ``error`` holds the reason and its log's tail on failure.

    ``model`` is the registered model it serves (``name:version``), empty when the backend does not say.
    ``operation`` is the service's handle on the provisioning that created or updated it (Azure: the
    Azure-AsyncOperation URL, where the failure's code and message are); pass it back to ``get_deployment``.
    """

    endpoint: str
    name: str
    provisioning_state: ProvisioningState
    error: str | None = None
    model: str = ""
    operation: str | None = None


DEFAULT_INSTANCE_TYPE = "Standard_DS3_v2"  # an Azure ML deployment's VM size where neither task nor connection names one


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class Instances:
    """A deployment's size, declared once (:mod:`mlrunway.settings`): the deploy task's ``instance_type`` and
    ``instance_count``, the trigger form's fields and an ``azure_ml`` connection's defaults. Empty: the
    connection's (locally, ``instance_count`` is the endpoint's scoring workers)."""

    instance_type: Annotated[str | None, EMPTY_IS_NONE] = setting(
        None, pattern=r"^[A-Za-z0-9_]+$", title="Instance type",
        description=f"VM size of the deployment (Azure ML), e.g. {DEFAULT_INSTANCE_TYPE}. Empty: the connection's.",
        problem="{value!r} is not a VM size", fix=f"write e.g. {DEFAULT_INSTANCE_TYPE}")
    instance_count: Annotated[int | None, EMPTY_IS_NONE, NOT_A_FLAG] = setting(
        None, ge=1, le=100, title="Instance count",
        description="Instances of the deployment (1 to 100). Empty: the connection's.",
        problem="{value!r} is not a whole number from 1 to 100", fix="write e.g. 1 (Azure ML bills each instance)")

    @classmethod
    def parse(cls, field: str, **given: Any) -> Instances:
        """From a task's arguments or a connection's fields (text is read as its number); ``field``: where."""
        return parse(cls, given, field, noun="deployment size")


@dataclass(frozen=True, kw_only=True)
class DeploymentSettings:
    """What a deployment is made of, on both backends.

    :param model: the registered model to serve, ``name:version``.
    :param code_dir: the folder holding the scoring script.
    :param scoring_script: the script's file name in ``code_dir`` (``init()`` and ``run(raw_data)``).
    :param environment_variables: for the scoring process.
    :param instance_type: Azure's VM size (default: the connection's); the local backend runs on this machine.
    :param instance_count: Azure's instance count (default: the connection's); locally, scoring workers.
    :param data_collector: what the deployment collects (:class:`~mlrunway.backend.capture.DataCollector`): on
        Azure ML the deployment's own data collector; locally, files under the workspace.
    """

    model: str
    code_dir: str
    scoring_script: str = "score.py"
    environment_variables: dict[str, str] = field(default_factory=dict)
    instance_type: str | None = None
    instance_count: int | None = None
    data_collector: DataCollector | None = None

    @property
    def model_name(self) -> str:
        return self.model.partition(":")[0]

    @property
    def model_version(self) -> int:
        return int(self.model.partition(":")[2])


@dataclass(frozen=True, kw_only=True)
class EndpointSettings:
    """An online endpoint's own settings. ``workers`` is how many server processes a local endpoint runs; an
    Azure endpoint sizes each deployment instead (``DeploymentSettings.instance_type``/``instance_count``)."""

    workers: int = 2


@dataclass(frozen=True, kw_only=True)
class EndpointInfo:
    """An online endpoint as both backends report it: never its keys (``endpoints.get_keys`` has them)."""

    name: str
    scoring_uri: str
    traffic: dict[str, int]
    provisioning_state: ProvisioningState
    mirror_traffic: dict[str, int] = field(default_factory=dict)
    auth_mode: str = "key"
    error: str | None = None
    damaged: bool = False  # its record could not be used (the error names the file): Failed, never an exception


@dataclass(frozen=True, kw_only=True)
class Usage:
    """What a job ran on and how long, for its cost (:mod:`mlrunway.ledger.cost`): ``started`` and ``ended`` as the
    backend records them (``ended`` None while it runs), ``size`` the VM size of its nodes (None: this machine, the
    local backend), ``tier`` ``dedicated``, ``low_priority`` or ``spot``, ``instances`` its nodes, ``processes``
    those that ran on this machine's cores (locally), ``cpu_seconds`` the CPU time they took (locally, measured when
    the job ends)."""

    started: float | None = None
    ended: float | None = None
    size: str | None = None
    tier: str | None = None
    instances: int = 1
    processes: int = 1
    cpu_seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class JobInfo:
    """What a backend knows of a job; ``error`` holds the reason and the tail of stderr on failure."""

    name: str
    kind: str
    status: JobStatus
    exit_code: int | None = None
    error: str | None = None
    timed_out: bool = False
    outputs: str | None = None
    mlflow_run_id: str | None = None
    created: float | None = None
    started: float | None = None
    ended: float | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    damaged: bool = False  # its record could not be used (the error names the file): Failed, not an exception
    budget_stop: str | None = None  # a sweep stopped by its budget: the decision; it ended, it did not fail

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["status"] = self.status.value
        return data


@dataclass(frozen=True, kw_only=True)
class TrialInfo:
    """One sweep trial: its hyperparameters, status, metric history and why it stopped early."""

    name: str
    params: dict[str, Any]
    status: JobStatus
    history: tuple[float, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)
    early_termination: dict[str, Any] | None = None
    error: str | None = None
    waiting: str | None = None  # what a Queued trial waits for (a Ray cluster to place its distributed processes)

    @property
    def stopped_early(self) -> bool:
        """Stopped by the early-termination policy. A decision taken after the trial had completed (its last
        intervals ran while nobody judged them) is recorded with ``applied: False`` and stopped nothing."""
        stop = self.early_termination
        return stop is not None and stop.get("applied", True) is not False

    @property
    def judged(self) -> tuple[float, ...]:
        """The values its score comes from: for a trial the policy stopped, those up to the interval it was
        stopped at (it may have logged more before the cancel landed; ``history`` holds all it logged), so the
        score does not depend on how fast a cancel lands; for any other trial, all of them."""
        if not self.stopped_early:
            return self.history
        return self.history[: int(self.early_termination["interval"])]  # type: ignore[index]

    @property
    def note(self) -> str:
        """One line on why it ended: the policy's decision with the intervals it ran, or the first line of the error."""
        stop = self.early_termination
        if stop is None:
            return (self.error or "").split("\n")[0]
        if not self.stopped_early:
            return str(stop["reason"])
        return f"stopped at interval {stop['interval']}, {len(self.history)} logged: {stop['reason']}"

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["status"] = self.status.value
        data["history"] = list(self.history)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialInfo:
        return cls(**{**data, "status": JobStatus(data["status"]), "history": tuple(data.get("history", ()))})


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """A sweep's record so far, the same fields on both backends from the sweep's first second.

    ``best_trial`` is the backend's choice when it made one; ``stopped_because`` says why the sweep stopped
    before its trials ran out (a timeout, a cancel); ``carried_over`` names the trials an earlier attempt
    completed that this one kept (see :mod:`mlrunway.backend.attempts`).
    """

    name: str
    status: JobStatus
    objective: Objective
    trials: tuple[TrialInfo, ...] = ()
    best_trial: str | None = None
    stopped_because: str | None = None
    error: str | None = None
    carried_over: tuple[str, ...] = ()
    policy: EarlyTerminationPolicy | None = None  # the early-termination policy it ran with, where known
    damaged: bool = False  # its record could not be used (the error names the file): Failed, with no trials


@dataclass(frozen=True, kw_only=True)
class ModelVersion:
    """One registered version of a model: where its files are, and what was recorded with it."""

    name: str
    version: int
    path: str
    format: str = "custom"
    tags: dict[str, str] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    created: float = 0.0
    archived: bool = False
    # Its record could not be used: ``error`` names the file and the fix; the version is listed, never served.
    damaged: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as kept (a damaged version's marks are no part of it)."""
        return {k: v for k, v in vars(self).items() if k not in ("damaged", "error")}


def deployment_error(status: int, model_status: str | None) -> bool:
    """Whether an answer is the deployment's failure: a 5xx, a 408, or a 424 whose
    ``ms-azureml-model-error-statuscode`` is 500 or more. A client's own 400 (a 424 carrying 400 at the scoring
    URI) is not."""
    if status == 424:
        return model_status is not None and model_status.isdigit() and int(model_status) >= 500
    return status >= 500 or status == 408


@dataclass(frozen=True, kw_only=True)
class DeploymentMetrics:
    """What a deployment served over [start, end) (seconds since the epoch): requests, the errors it is to blame
    for (5xx, 408, and 424s whose model status is 500 or more) and p99 latency in ms (None without requests)."""

    deployment: str
    start: float
    end: float
    requests: int
    errors: int
    p99_ms: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "error_rate": round(self.error_rate, 6)}


@dataclass(frozen=True, kw_only=True)
class MirroredAnswer:
    """One mirrored request as the endpoint saw it: the champion's answer (returned to the client) beside the
    shadow deployment's (discarded), each with its HTTP status at the deployment and its latency. An answer
    too large to keep is None, with its SHA-256 in ``*_digest`` (such a pair can only be compared for equality).

    ``at`` is when both had answered (seconds since the epoch)."""

    at: float
    deployment: str
    champion: str
    champion_status: int
    shadow_status: int
    champion_ms: float
    shadow_ms: float
    champion_answer: str | None
    shadow_answer: str | None
    champion_digest: str = ""
    shadow_digest: str = ""
