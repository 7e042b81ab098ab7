"""The seam between the deploy task and how a model reaches an endpoint: the request, the steps a strategy asks
for, the event a wait ends with, and the ``DeploymentStrategy`` protocol.

A strategy is a state machine: ``start`` and ``resume`` return the next :class:`Step`, a wait (:class:`Provisioning`,
:class:`Window`, :class:`Approval`) that carries the JSON state to resume from, or :class:`Done`. Its host, the
deploy task, turns a wait into a trigger (or waits in the worker) and hands back a :class:`Resumed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from mlrunway import check
from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import DeploymentSettings, EndpointSettings, ProvisioningState
from mlrunway.backend.waiting import Outcome
from mlrunway.errors import EndpointError


@dataclass(frozen=True, kw_only=True)
class DeployRequest:
    """What the deploy task asks for, from its arguments and its run.

    :param endpoint: the stable endpoint (``endpoint_name``), or the run's own.
    :param settings: the deployment: the model (``name:version``), the code folder and scoring script, its size.
    :param run_key: the run's key: the holder of a stable endpoint's rollout lease.
    :param not_newest: why this run may not change production (a backfill, a catch-up run), or None.
    :param max_wait_s: the most a provisioning may take; ``poll_s`` between looks at it.
    :param reference_job: the name of the job that computes the smoke test's expected answer with score.py, when the
        smoke test needs one (a ``sample_request`` without ``expected_response``); None: ``<endpoint>-reference``.
    :param strategy_settings: the strategy's own settings group, as its :meth:`DeploymentStrategy.settings` read
        them from the deploy task's ``production`` object (None: the strategy's defaults).
    The rest are the deploy task's arguments of the same names (see operators/deploy_blue.py).
    """

    endpoint: str
    settings: DeploymentSettings
    endpoint_settings: EndpointSettings = field(default_factory=EndpointSettings)
    data_dir: str | None = None
    sample_request: Path | None = None
    expected_response: Path | None = None
    ignore_keys: tuple[str, ...] = ()
    run_key: str = ""
    not_newest: str | None = None
    max_wait_s: float = 3600.0
    poll_s: float = 1.0
    reference_job: str | None = None
    strategy_settings: Any = None

    @property
    def model(self) -> tuple[str, int]:
        """The model's name and version; a version that is no whole number >= 1 is a SpecError naming the field."""
        self.check_version()
        return self.settings.model_name, self.settings.model_version

    def check_version(self) -> None:
        version = self.settings.model.partition(":")[2]
        if not version.isdigit() or int(version) < 1:
            raise check.fail("model_version", f"{version!r} is no version", "give a version >= 1, or "
                             "rollback_to=previous")


@dataclass(frozen=True, kw_only=True)
class Provisioning:
    """Wait until the endpoint (``deployment`` None) or one of its deployments is provisioned; past
    ``max_wait_s`` the deployment is deleted."""

    state: dict[str, Any]
    endpoint: str
    deployment: str | None = None
    operation: str | None = None


@dataclass(frozen=True, kw_only=True)
class Window:
    """Wait ``seconds`` (a staged rollout's window), then resume."""

    state: dict[str, Any]
    seconds: float


@dataclass(frozen=True, kw_only=True)
class Approval:
    """Wait for a person's answer on ``model`` (its ``mlrunway.approval`` tag) until ``deadline`` (epoch s);
    ``evidence`` is what they decide on."""

    state: dict[str, Any]
    model: str
    deadline: float
    evidence: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Done:
    """The task's result; with ``failure``, the task fails with that sentence after its result is recorded (a
    rollback's figures). ``production`` is what now serves production when it changed (an asset event)."""

    result: dict[str, Any]
    failure: str | None = None
    production: dict[str, Any] | None = None


Step = Provisioning | Window | Approval | Done


@dataclass(frozen=True, kw_only=True)
class Resumed:
    """How a wait ended: its outcome, the status it ended in and what goes with it (an error; an approval's
    answerer), and a deployment's operation."""

    outcome: Outcome
    status: str | None = None
    error: str | None = None
    by: str | None = None
    operation: str | None = None

    @classmethod
    def of(cls, event: dict[str, Any]) -> Resumed:
        return cls(outcome=Outcome(event["outcome"]), status=event.get("status"), error=event.get("error"),
                   by=event.get("by"), operation=event.get("operation"))

    def provisioned(self, what: str, max_wait_s: float) -> None:
        """Raise EndpointError unless what was waited on ended Succeeded."""
        if self.outcome is Outcome.TIMEOUT:
            raise EndpointError(f"{what}: {self.error} (max_wait_s={max_wait_s:g})")
        if self.outcome is Outcome.ERROR:
            raise EndpointError(f"{what}: waiting on it failed: {self.error}")
        if self.outcome is Outcome.LOST:  # its state unreadable past the connection's transient_outage_s
            raise EndpointError(f"{what}: {self.error}; the run's cleanup deletes what it made")
        if ProvisioningState.parse(self.status) is not ProvisioningState.SUCCEEDED:
            raise EndpointError(self.error or f"{what} ended {self.status}")


class DeploymentStrategy(Protocol):
    """How a model reaches an endpoint. ``name`` is its registry key (:data:`mlrunway.deploy.STRATEGIES`)."""

    name: ClassVar[str]

    def validate(self, backend: Backend | None, deployment: Mapping[str, Any]) -> None:
        """Before any job: the deploy task's arguments (``deployment``, as the DAG renders them: ``code_dir``,
        ``data_dir``, the smoke test's and the strategy's own settings) as far as they can be known without a model;
        ``backend``: what the run's connection gives (None: not known here). A SpecError names the field."""
        ...

    def settings(self, backend: Backend, given: Mapping[str, Any]) -> Any:
        """The strategy's own settings group from the deploy task's ``production`` object, as rendered, for the
        request's ``strategy_settings``: the task passes the object through; a bad field is a SpecError naming it."""
        ...

    def start(self, backend: Backend, request: DeployRequest) -> Step: ...

    def resume(self, backend: Backend, request: DeployRequest, state: dict[str, Any], event: Resumed) -> Step: ...

    def abandon(self, backend: Backend, request: DeployRequest) -> None:
        """The task was killed while it waited: undo what serves nobody yet."""
        ...

    def clean_up(self, backend: Backend, endpoint: str, run_key: str) -> dict[str, Any]:
        """At the run's cleanup: what the strategy leaves behind on ``endpoint`` (the run's own endpoint is the
        cleanup's to delete); what it did, for the cleanup task's result."""
        ...
