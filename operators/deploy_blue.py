"""DeployBlueOperator: the ONNX model as the `blue` deployment at 100% traffic, smoke-tested."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from airflow.sdk import Context

from mlrunway.airflow.assets import production_alias
from mlrunway.airflow.triggers import DeploymentTrigger, Outcome
from mlrunway.backend.types import DeploymentSettings, EndpointSettings, ProvisioningState
from mlrunway.errors import EndpointError, NotFound
from mlrunway.pipeline import deploy_blue, promote_blue, start_blue
from operators._stable import StableEndpointMixin


class DeployBlueOperator(StableEndpointMixin):
    """Create or update the run's endpoint, deploy `blue` at 0%, smoke-test it with a real validation image
    through the deployment header, then move traffic to ``{"blue": 100}``. A failed smoke test fails the task
    and leaves traffic where it was.

    Deferrable (the default), the task waits in the triggerer while the endpoint and then the deployment
    provision (minutes on Azure; a local deployment is up within ``defer_after_s`` and is not deferred);
    ``max_wait_s`` bounds each of the two waits, and a deployment past it is deleted. Only the smoke test and
    the traffic change run in the worker.

    :param model_name: the ONNX model.
    :param model_version: its version.
    :param code_dir: folder holding the scoring script.
    :param scoring_script: its file name in ``code_dir`` (``init()`` and ``run(raw_data)``).
    :param data_dir: ImageFolder data; the smoke image comes from val/ (an image classifier's smoke test).
    :param sample_request: a JSON request file score.py answers (Azure's ``request_file``), in the code folder
        or absolute: the smoke test sends it instead of an image, for any model.
    :param workers: server workers of a local endpoint.
    :param instance_type: VM size of the deployment (Azure; default: the connection's).
    :param instance_count: instances of the deployment (Azure; default: the connection's); locally, the
        server workers the deployment needs (default: ``workers``).

    Killed while it waits (marked failed, timed out), the task deletes `blue` if it is still provisioning: a
    deployment with no traffic yet serves nobody. The run's cleanup deletes the endpoint.

    **A stable endpoint** (``endpoint_name`` set) outlives runs (:mod:`mlrunway.production.stable`): the first run
    creates it with `blue` at 100% (``created``); a later one deploys its model to the slot not serving, at 0%,
    compares both on the evaluation set through the endpoint, and ends ``held``, ``skipped`` (a run that is not
    the newest interval never moves production), ``promoted`` after a staged rollout, or ``rolled_back`` (the task
    fails with the figures). The XComs ``decision`` and ``live`` say which; a change of the live model is an
    event of the endpoint's Asset (:mod:`mlrunway.airflow.assets`).

    :param endpoint_name: the stable endpoint; empty: the run's own endpoint, deleted at cleanup.
    :param min_improvement: how much better on the evaluation set the challenger must be (default 0: better).
    :param evaluation: the team's evaluation set: ``{"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal":
        "minimize"}`` in the code folder; default, for an image classifier: the ``test/`` split of ``data_dir``.
    :param rollout: the staged rollout (:class:`~mlrunway.production.rollout.RolloutPolicy`): ``steps``,
        ``window_s``, ``mirror_percent``, ``mirror_window_s`` and the bounds.
    :param require_approval: after the gate, before any traffic moves, wait (deferred) for a person's answer on
        the challenger: ``python -m mlrunway.airflow.approval approve|reject <model> <version>``, or its
        ``mlrunway.approval`` tag set in the registry; a rejection or no answer within ``approval_timeout_s``
        ends ``held``.
    :param rollback_to: a registry alias (``previous``): deploy the version of ``model_name`` holding it instead
        of ``model_version``, through the same staged rollout, without the gate (a person decided).
    """

    template_fields = (*StableEndpointMixin.template_fields, "model_name", "model_version", "code_dir",
                       "data_dir", "instance_type", "instance_count", "sample_request", "scoring_script", "endpoint_name",
                       "min_improvement", "evaluation", "rollout", "rollback_to", "require_approval")

    def __init__(self, *, model_name: str, model_version: int | str, code_dir: str, data_dir: str | None = None,
                 sample_request: str | None = None, scoring_script: str = "score.py", workers: int = 2,
                 instance_type: str | None = None, instance_count: int | str | None = None,
                 endpoint_name: str | None = None, min_improvement: float | str = 0.0,
                 evaluation: dict[str, Any] | None = None, rollout: dict[str, Any] | None = None,
                 rollback_to: str | None = None, require_approval: bool | str = False,
                 approval_timeout_s: float = 7 * 24 * 3600.0, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [production_alias()])
        super().__init__(**kwargs)
        self.endpoint_name, self.min_improvement = endpoint_name, min_improvement
        self.evaluation, self.rollout, self.rollback_to = evaluation, rollout, rollback_to
        self.require_approval, self.approval_timeout_s = require_approval, approval_timeout_s
        self.model_name, self.model_version = model_name, model_version
        self.code_dir, self.data_dir, self.workers = code_dir, data_dir, workers
        self.sample_request, self.scoring_script = sample_request, scoring_script
        self.instance_type, self.instance_count = instance_type, instance_count

    def settings(self) -> DeploymentSettings:
        return DeploymentSettings(model=f"{self.model_name}:{int(self.model_version)}", code_dir=str(self.code_dir),
                                  scoring_script=self.scoring_script,
                                  instance_type=self.instance_type or None,
                                  instance_count=int(self.instance_count) if self.instance_count else None)

    def execute(self, context: Context) -> dict[str, Any]:
        if self.endpoint_name:
            return self.stable_begin(context)
        endpoint = self._endpoint = self.names(context).endpoint
        self.link(context, "endpoint", endpoint)
        if not self.deferrable:
            return deploy_blue(self.backend, endpoint, self.settings(), self.data_dir, sample_request=self.request(),
                               endpoint_settings=EndpointSettings(workers=self.workers), timeout_s=self.max_wait_s)
        self.backend.endpoints.begin_create_or_update(endpoint, EndpointSettings(workers=self.workers))
        info = self.settle(lambda: self.backend.endpoints.get(endpoint), lambda i: i.provisioning_state.is_terminal())
        return self.step(endpoint, None, info.provisioning_state)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        endpoint = self._endpoint = event["endpoint"]
        self.link(context, "endpoint", endpoint)  # a resumed task is a new process: record it again
        what = f"deployment {endpoint}/{event['deployment']}" if event["deployment"] else f"endpoint {endpoint}"
        outcome = Outcome(event["outcome"])
        if outcome is Outcome.TIMEOUT:
            raise EndpointError(f"{what}: {event['error']} (max_wait_s={self.max_wait_s:g})")
        if outcome is Outcome.ERROR:
            raise EndpointError(f"{what}: waiting on it failed: {event['error']}")
        return self.step(endpoint, event["deployment"], ProvisioningState(event["status"]), event.get("error"),
                         event.get("operation"))

    def on_kill(self) -> None:
        """The task was killed while `blue` provisioned: delete it (it has no traffic yet); one that already
        serves is left to the run's cleanup."""
        endpoint = getattr(self, "_endpoint", None)
        if endpoint is None:
            return
        try:
            if not self.backend.endpoints.get_deployment(endpoint, "blue").provisioning_state.is_terminal():
                self.backend.endpoints.delete_deployment(endpoint, "blue")
        except NotFound:
            pass

    def step(self, endpoint: str, deployment: str | None, state: ProvisioningState,
             error: str | None = None, operation: str | None = None) -> dict[str, Any]:
        """Where the rollout stands: wait while the endpoint or `blue` provisions, fail on a failure, else go on:
        from the endpoint to `blue`, from `blue` to the smoke test and the traffic."""
        what = f"deployment {endpoint}/{deployment}" if deployment else f"endpoint {endpoint}"
        if not state.is_terminal():
            self.log.info("%s is %s; waiting in the triggerer", what, state.value)
            self.defer(trigger=DeploymentTrigger(self.backend_conn_id, endpoint, deployment, self.poll_s,
                                                 time.time() + self.max_wait_s, operation=operation),
                       method_name="execute_complete")
        if state is not ProvisioningState.SUCCEEDED:
            raise EndpointError(error or f"{what} ended {state.value}")
        if deployment is None:
            started = start_blue(self.backend, endpoint, self.settings())
            info = self.settle(lambda: self.backend.endpoints.get_deployment(endpoint, "blue",
                                                                             operation=started.operation),
                               lambda i: i.provisioning_state.is_terminal())
            return self.step(endpoint, info.name, info.provisioning_state, info.error, info.operation)
        return promote_blue(self.backend, endpoint, self.model_name, int(self.model_version), self.data_dir,
                            self.request())

    def request(self) -> Path | None:
        """The smoke test's request file: ``sample_request`` in the code folder, or as given when absolute."""
        return None if not self.sample_request else Path(self.code_dir) / self.sample_request
