"""DeployBlueOperator: the ONNX model as the `blue` deployment at 100% traffic, smoke-tested."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow.sdk import Context

from mlrunway import lineage
from mlrunway.airflow.assets import emit_production, production_alias
from mlrunway.airflow.triggers import ApprovalTrigger, DeploymentTrigger, WindowTrigger
from mlrunway.backend.capture import DataCollector
from mlrunway.backend.types import DeploymentSettings, EndpointSettings, Instances
from mlrunway.deploy import (
    APPROVAL_TAG,
    Approval,
    DeploymentStrategy,
    DeployRequest,
    Done,
    ProductionSettings,
    Provisioning,
    Resumed,
    SmokeTest,
    Step,
    Window,
    not_newest,
    record_deployment,
    strategy_for,
)
from mlrunway.errors import EndpointError, MlrunwayError, NotSupportedOnBackend
from mlrunway.ledger.budget import against_budget
from mlrunway.ledger.cost import cost_of_run, estimated
from mlrunway.operators._base import MlrunwayWaitingOperator

SMOKE_KEYS = tuple(f.name for f in fields(SmokeTest))
PRODUCTION_KEYS = ProductionSettings.keys()  # the champion strategy's settings, which the task passes through
FLAT_KEYS = SMOKE_KEYS + PRODUCTION_KEYS  # the task's own keywords until 0.3.0, read (with a warning) until 0.4.0
FLAT_READ_UNTIL = "0.4.0"


def grouped(arguments: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The smoke test's and a stable endpoint's settings among ``arguments`` (flat, as 0.2.x's keywords and the
    builder's deployment description name them), as the task's ``smoke`` and ``production``."""
    return {"smoke": {k: v for k, v in arguments.items() if k in SMOKE_KEYS},
            "production": {k: v for k, v in arguments.items() if k in PRODUCTION_KEYS}}


class DeployBlueOperator(MlrunwayWaitingOperator):
    """Create or update the run's endpoint, deploy `blue` at 0%, smoke-test it through the deployment header (the
    team's ``sample_request``, whose answer must match the expected one; for an image classifier without one, a
    real validation image), then move traffic to ``{"blue": 100}``. A failed smoke test fails the task and
    leaves traffic where it was.

    Deferrable (the default), the task waits in the triggerer while the endpoint and then the deployment
    provision (minutes on Azure; a local deployment is up within ``defer_after_s`` and is not deferred);
    ``max_wait_s`` bounds each of the two waits, and a deployment past it is deleted. Only the smoke test and
    the traffic change run in the worker.

    :param model_name: the ONNX model.
    :param model_version: its version.
    :param code_dir: folder holding the scoring script.
    :param scoring_script: its file name in ``code_dir`` (``init()`` and ``run(raw_data)``).
    :param data_dir: ImageFolder data; the smoke image comes from val/ (an image classifier's smoke test).
    :param smoke: the smoke test's settings (:class:`~mlrunway.deploy.SmokeTest`), ``sample_request``,
        ``expected_response`` and ``ignore_keys``:

    :param sample_request: a JSON request file score.py answers (Azure's ``request_file``), in the code folder
        or absolute: the smoke test sends it instead of an image, for any model, and `blue`'s answer must match
        the expected one (numbers by the ONNX parity rule, everything else equal) before traffic moves.
    :param expected_response: that expected answer, a JSON file in the code folder or absolute; default: the
        answer ``scoring_script`` gives to ``sample_request`` here, run once on the deployed model version (give
        this file when score.py cannot run in the worker's Python).
    :param ignore_keys: key names skipped wherever they appear in both answers (a request id, a timestamp).
    :param workers: server workers of a local endpoint.
    :param instance_type: VM size of the deployment (Azure; default: the connection's).
    :param instance_count: instances of the deployment (Azure; default: the connection's); locally, the
        server workers the deployment needs (default: ``workers``).

    Killed while it waits (marked failed, timed out), the task deletes `blue` if it is still provisioning: a
    deployment with no traffic yet serves nobody. The run's cleanup deletes the endpoint.

    **A stable endpoint** (``endpoint_name`` set) outlives runs (:mod:`mlrunway.deploy.stable`): the first run
    creates it with `blue` at 100% (``created``); a later one deploys its model to the slot not serving, at 0%,
    compares both on the evaluation set through the endpoint, and ends ``held``, ``skipped`` (a run that is not
    the newest interval never moves production), ``promoted`` after a staged rollout, or ``rolled_back`` (the task
    fails with the figures). The XComs ``decision`` and ``live`` say which; a change of the live model is an
    event of the endpoint's Asset (:mod:`mlrunway.airflow.assets`).

    :param production: a stable endpoint's settings (:class:`~mlrunway.deploy.ProductionSettings`, the strategy's
        own: the task passes them through), ``endpoint_name``, ``min_improvement``, ``evaluation``, ``rollout``,
        ``require_approval``, ``approval_timeout_s`` and ``rollback_to``:

    :param endpoint_name: the stable endpoint; empty: the run's own endpoint, deleted at cleanup.
    :param min_improvement: how much better on the evaluation set the challenger must be (default 0: better).
    :param evaluation: the team's evaluation set: ``{"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal":
        "minimize"}`` in the code folder; default, for an image classifier: the ``test/`` split of ``data_dir``.
    :param rollout: the staged rollout (:class:`~mlrunway.deploy.rollout.RolloutPolicy`): ``steps``,
        ``window_s``, ``mirror_percent``, ``mirror_window_s`` and the bounds.
    :param require_approval: after the gate, before any traffic moves, wait (deferred) for a person's answer on
        the challenger: ``python -m mlrunway.airflow.approval approve|reject <model> <version>``, or its
        ``mlrunway.approval`` tag set in the registry; a rejection or no answer within ``approval_timeout_s``
        (default :data:`~mlrunway.deploy.APPROVAL_TIMEOUT_S`, a week) ends ``held``.
    :param rollback_to: a registry alias (``previous``): deploy the version of ``model_name`` holding it instead
        of ``model_version``, through the same staged rollout, without the gate (a person decided).

    :param intended_use: what the model is for and not for, in the team's words: the first section of the model
        card each version that reaches an endpoint gets (:mod:`mlrunway.deploy.card`).
    :param model_card: what the card says of the training: ``{"job": ..., "sweep": ...}`` in azure-ai-ml's words,
        as the DAG gave them to the Train and Sweep tasks (:func:`mlrunway.lifecycle.lifecycle` passes
        them); the rest of the card comes from the registry and the sweep's record.
    :param budget: the run's budget (:class:`~mlrunway.ledger.budget.Budget`; None: the connection's), as the Train
        and Sweep tasks get it: the card states the run's cost against it.

    :param data_collector: what the deployment collects, in azure-ai-ml's shape (``{"collections": {"model_inputs":
        {"enabled": "true"}, "model_outputs": {"enabled": "true"}}, "sampling_rate": 1.0, "rolling_rate": "hour"}``,
        :mod:`mlrunway.backend.capture`); empty: nothing.

    :param strategy: the deployment strategy by name (:data:`mlrunway.deploy.STRATEGIES`); default
        ``champion_challenger`` with ``endpoint_name``, else ``blue``. The task only hosts it: each wait the
        strategy asks for becomes a trigger (or a wait in the worker) and its event goes back to the strategy.
    """

    template_fields = (*MlrunwayWaitingOperator.template_fields, "model_name", "model_version", "code_dir",
                       "data_dir", "instance_type", "instance_count", "smoke", "production", "scoring_script",
                       "strategy", "intended_use", "model_card", "data_collector", "budget")

    def __init__(self, *, model_name: str, model_version: int | str, code_dir: str, data_dir: str | None = None,
                 scoring_script: str = "score.py", workers: int = 2, instance_type: str | None = None,
                 instance_count: int | str | None = None, smoke: dict[str, Any] | None = None,
                 production: dict[str, Any] | None = None, strategy: str | None = None,
                 intended_use: str | None = None, model_card: dict[str, Any] | None = None,
                 data_collector: dict[str, Any] | None = None, budget: Mapping[str, Any] | str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [production_alias()])
        given = {key: kwargs.pop(key) for key in FLAT_KEYS if key in kwargs}
        if given:
            warnings.warn(f"DeployBlueOperator({', '.join(f'{key}=' for key in given)}) is read as smoke= and "
                          f"production= until mlrunway {FLAT_READ_UNTIL}: pass {grouped(given)}",
                          FutureWarning, stacklevel=2)
        super().__init__(**kwargs)
        flat = grouped(given)  # a whole-object template ("{{ params.production }}") is rendered before it is read
        self.smoke = smoke if isinstance(smoke, str) else {**(smoke or {}), **flat["smoke"]}
        self.production = production if isinstance(production, str) else {**(production or {}), **flat["production"]}
        self.model_name, self.model_version = model_name, model_version
        self.code_dir, self.data_dir, self.workers = code_dir, data_dir, workers
        self.scoring_script = scoring_script
        self.instance_type, self.instance_count = instance_type, instance_count
        self.strategy, self.intended_use, self.model_card = strategy, intended_use, model_card
        self.data_collector, self.budget = data_collector, budget

    @property
    def endpoint_name(self) -> str | None:
        """The stable endpoint (``production["endpoint_name"]``, as rendered); None: the run's own. A key that is
        no production setting is a SpecError naming it."""
        return ProductionSettings.endpoint_of(self._production())

    def _production(self) -> dict[str, Any]:
        """``production`` as rendered (a template not rendered yet: nothing)."""
        return self.production if isinstance(self.production, dict) else {}

    def chosen(self) -> DeploymentStrategy:
        return strategy_for(self.strategy, self.endpoint_name)

    def request(self, context: Context) -> DeployRequest:
        """The strategy's request, from the task's arguments and its run (built again in a resumed task); the
        ``production`` object goes to the strategy as given, which reads its own settings from it."""
        size = Instances.parse("deploy", instance_type=self.instance_type, instance_count=self.instance_count)
        endpoint, chosen = self.endpoint_name, self.chosen()
        strategy_settings = chosen.settings(self.backend, self._production())
        checked = SmokeTest.parse(self.smoke if isinstance(self.smoke, dict) else {}, "deploy.smoke")
        return DeployRequest(
            endpoint=endpoint or self.run_endpoint(context),
            settings=DeploymentSettings(model=f"{self.model_name}:{self.model_version}", code_dir=str(self.code_dir),
                                        scoring_script=self.scoring_script, instance_type=size.instance_type,
                                        instance_count=size.instance_count,
                                        data_collector=DataCollector.parse(self.data_collector)),
            endpoint_settings=EndpointSettings(workers=self.workers), data_dir=self.data_dir,
            sample_request=Path(self.code_dir) / checked.sample_request if checked.sample_request else None,
            expected_response=Path(self.code_dir) / checked.expected_response if checked.expected_response else None,
            ignore_keys=checked.keys,
            run_key=self.names(context).run_key, not_newest=self.not_newest(context), max_wait_s=self.max_wait_s,
            poll_s=self.poll_s, reference_job=self.names(context).reference_job, strategy_settings=strategy_settings)

    def run_endpoint(self, context: Context) -> str:
        """The run's own endpoint: its name, or the one it had before names were salted when a try made before the
        upgrade created that one (looked up by name, so the run neither deploys twice nor leaks it)."""
        names = self.names(context)
        if (older := self.backend.endpoints.first_existing(*names.endpoints[1:])) is not None:
            self.log.info("Endpoint %s was made by this run before endpoint names were salted: using it", older.name)
            return older.name
        return names.endpoint

    def execute(self, context: Context) -> dict[str, Any]:
        if (why := self.backend.capabilities.endpoints) is not None:  # refused at its start, never retried
            raise NotSupportedOnBackend(why)
        request = self._request = self.request(context)
        self.link(context, "endpoint", request.endpoint)
        return self.follow(context, request, self.chosen().start(self.backend, request))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        request = self._request = self.request(context)
        self.link(context, "endpoint", request.endpoint)  # a resumed task is a new process: record it again
        # A per-run deferral of the version before the seam carried no state: where it waited says it.
        carry = event.get("carry") or {"phase": "blue" if event.get("deployment") else "endpoint"}
        step = self.chosen().resume(self.backend, request, carry, Resumed.of(event))
        return self.follow(context, request, step)

    stable_resume = execute_complete  # where a stable endpoint's deferrals of that version come back

    def follow(self, context: Context, request: DeployRequest, step: Step) -> dict[str, Any]:
        """Host the strategy's steps until it is done: each wait deferred (or waited here), its event handed back."""
        while not isinstance(step, Done):
            trigger = self.trigger(step)
            if isinstance(step, Approval):
                self.ask(context, step)
            event = self.settled(trigger) if isinstance(trigger, DeploymentTrigger) else None
            if event is None and self.deferrable:
                self.defer(trigger=trigger, method_name="execute_complete")
            if event is None:
                event = trigger.wait_here(self.backend)
            step = self.chosen().resume(self.backend, request, step.state, Resumed.of(event))
        return self.finish(context, step)

    def settled(self, trigger: DeploymentTrigger) -> dict[str, Any] | None:
        """A provisioning that ends within ``defer_after_s`` is waited on here (a deferral costs more)."""
        ended = self.settle(lambda: trigger.look(self.backend), lambda event: event is not None)
        return None if ended is None else {**trigger.ids(), **ended}

    def trigger(self, step: Provisioning | Window | Approval) -> DeploymentTrigger | WindowTrigger | ApprovalTrigger:
        if isinstance(step, Provisioning):
            return DeploymentTrigger(self.backend_conn_id, step.endpoint, step.deployment, self.poll_s,
                                     time.time() + self.max_wait_s, operation=step.operation, carry=step.state)
        if isinstance(step, Window):
            return WindowTrigger(time.time() + step.seconds, step.state, self.backend_conn_id)
        return ApprovalTrigger(self.backend_conn_id, step.model, self.poll_s, step.deadline, step.state)

    def ask(self, context: Context, step: Approval) -> None:
        name, _, version = step.model.partition(":")
        context["ti"].xcom_push(key="approval", value=step.evidence)
        self.log.info("%s waits for approval before any traffic moves: %s. Answer with `python -m "
                      "mlrunway.airflow.approval approve|reject %s %s --conn %s` (or set its tag %s)", step.model,
                      step.evidence["gate"].get("summary"), name, version, self.backend_conn_id, APPROVAL_TAG)

    def finish(self, context: Context, done: Done) -> dict[str, Any]:
        """Push a stable endpoint's decision and what serves as XComs at once (a rolled-back task fails after
        this), announce a new production model, then return the result or fail with the strategy's sentence."""
        for key in ("decision", "live"):
            if key in done.result:
                context["ti"].xcom_push(key=key, value=done.result[key])
        cost = self.run_cost(context)
        if cost is not None:
            context["ti"].xcom_push(key="cost", value=cost)
        if done.production is not None:
            emit_production(context, done.result["endpoint"], {**done.production, **({"cost": cost} if cost else {})})
        page = self.write_model_cards(context, done.result, cost)
        if done.failure:
            raise EndpointError(done.failure)
        return {**done.result, "model_card": page, **({"cost": cost} if cost else {})}

    def run_cost(self, context: Context) -> dict[str, Any] | None:
        """What the run's jobs cost (train, the sweep's trials, export, the smoke test's reference), an estimate
        (:mod:`mlrunway.ledger.cost`); None where the backend does not say or the run started none (a version
        deployed by ``deploy_model``). A read that fails is logged: the deployment stands."""
        names = self.names(context)
        cost = estimated(f"run {names.run_key}", lambda: cost_of_run(self.backend, names))
        if cost is not None:
            self.log.info("The run's compute: %s", cost["text"])
            if (budget := self.run_budget) is not None:
                cost["budget"] = held = against_budget(budget, cost)
                self.log.info("Budget: %s", held["text"])
        return cost

    def write_model_cards(self, context: Context, result: dict[str, Any],
                          cost: dict[str, Any] | None = None) -> str | None:
        """The model card of each version the decision changed (:mod:`mlrunway.deploy.card`), kept with the run's
        reports and linked from the task; return the deployed version's page. A card that cannot be written is
        logged: the decision stands."""
        interval = context.get("data_interval_start"), context.get("data_interval_end")
        try:
            pages = record_deployment(
                self.backend, self.backend.reports, f"{self.model_name}:{self.model_version}", result,
                description=self.model_card or None, intended_use=self.intended_use or None,
                data_interval=(str(interval[0]), str(interval[1])) if all(interval) else None, cost=cost)
        except (OSError, MlrunwayError) as exc:
            self.log.warning("The model card of %s:%s was not written: %s", self.model_name, self.model_version, exc)
            return None
        name, _, version = str(result.get("model") or f"{self.model_name}:{self.model_version}").partition(":")
        self.link(context, "model_card", name, version)
        self.log.info("Model card: %s", pages[0])
        return str(pages[0])

    def on_kill(self) -> None:
        """The task was killed while it waited: the strategy undoes what serves nobody yet (a `blue` still
        provisioning); what serves is left to the run's cleanup."""
        if (request := getattr(self, "_request", None)) is not None:
            self.chosen().abandon(self.backend, request)

    # -- OpenLineage -------------------------------------------------------------------------------------
    def lineage_inputs(self) -> list[lineage.LineageDataset]:
        """The model version it deploys and the scoring code (versioned by its hash)."""
        return [lineage.model_version(self.lineage_namespace, self.model_name, self.model_version),
                lineage.code_snapshot(self.code_dir)]

    def lineage_outputs(self, result: dict[str, Any]) -> list[lineage.LineageDataset]:
        """The endpoint and the deployment the model went to (none when a stable endpoint skipped it)."""
        namespace, endpoint = self.lineage_namespace, result.get("endpoint")
        if not endpoint:
            return []
        deployed = [lineage.deployment(namespace, endpoint, result["deployment"])] if result.get("deployment") else []
        return [lineage.endpoint(namespace, endpoint), *deployed]

    def not_newest(self, context: Context) -> str | None:
        """Why this run may not change production (a backfill, a catch-up or cleared old run), or None. A scheduled
        run is not the newest when the DAG's next run after it is already due: the timetable says when (Airflow's
        core timetable, which the task SDK's does not expose)."""
        run = context.get("dag_run")
        run_type = str(getattr(getattr(run, "run_type", None), "value", getattr(run, "run_type", "manual")))
        next_due = None
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if run_type == "scheduled" and start is not None and end is not None:
            next_due = self.next_run_after(context["dag"].timetable, start, end)
        return not_newest(run_type, next_due, datetime.now(UTC))

    def next_run_after(self, timetable: Any, start: datetime, end: datetime) -> datetime | None:
        import pendulum
        from airflow.serialization.encoders import coerce_to_core_timetable
        from airflow.timetables.base import DataInterval, TimeRestriction

        try:
            info = coerce_to_core_timetable(timetable).next_dagrun_info(
                last_automated_data_interval=DataInterval(pendulum.instance(start), pendulum.instance(end)),
                restriction=TimeRestriction(earliest=None, latest=None, catchup=True))
        except Exception:  # noqa: BLE001 - a timetable that cannot say: the run type alone decides
            self.log.warning("The timetable cannot tell this run's successor; only backfills are held back",
                             exc_info=True)
            return None
        return getattr(info, "run_after", None)
