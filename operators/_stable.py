"""DeployBlueOperator's stable-endpoint mode: the steps of :mod:`mlrunway.production.stable`, each wait deferred
(provisioning in the DeploymentTrigger, each rollout window in a DateTimeTrigger), never in a worker slot."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Context

from mlrunway import check
from mlrunway.airflow.assets import emit_production
from mlrunway.airflow.triggers import (
    APPROVAL_BY_TAG,
    APPROVAL_TAG,
    ApprovalTrigger,
    DeploymentTrigger,
    Outcome,
    WindowTrigger,
)
from mlrunway.backend import protocol
from mlrunway.backend.types import DeploymentSettings, ProvisioningState
from mlrunway.errors import EndpointError, NotSupportedOnBackend
from mlrunway.pipeline import promote_blue
from mlrunway.production import stable
from mlrunway.production.rollout import RolloutPolicy
from mlrunway.production.stable import Rollout
from operators._base import MlrunwayWaitingOperator

LEASE_MARGIN_S = 900.0


class StableEndpointMixin(MlrunwayWaitingOperator):
    """What DeployBlueOperator does when ``endpoint_name`` is set (see its docstring)."""

    endpoint_name: str | None
    min_improvement: float | str
    evaluation: dict[str, Any] | None
    rollout: dict[str, Any] | None
    rollback_to: str | None
    require_approval: bool | str
    approval_timeout_s: float

    def settings(self) -> DeploymentSettings:
        raise NotImplementedError

    def request(self) -> Any:
        raise NotImplementedError

    code_dir: str
    data_dir: str | None
    model_name: str
    model_version: int | str

    def stable_begin(self, context: Context) -> dict[str, Any]:
        endpoint = check.endpoint_name(str(self.endpoint_name), "endpoint_name")
        if not isinstance(self.backend.endpoints, protocol.Rollout):
            raise NotSupportedOnBackend(f"endpoint_name={endpoint!r}: the {self.backend.kind} backend has no "
                                        "staged rollout yet; leave endpoint_name empty for the per-run endpoint")
        self.link(context, "endpoint", endpoint)
        policy = self.policy()
        if self.rollback_to:  # a person's one-argument rollback: that version, through the same staged path
            target = self.backend.models.alias(self.model_name, str(self.rollback_to))
            if target is None:
                raise check.fail("rollback_to", f"no version of model {self.model_name} holds alias "
                                 f"{self.rollback_to!r}", "name an alias a promotion set (previous, production)")
            self.model_version = target.version
        elif isinstance(self.model_version, bool) or int(self.model_version or 0) < 1:
            raise check.fail("model_version", f"{self.model_version!r} is no version", "give a version >= 1, or "
                             "rollback_to=previous")
        if stable.serving(self.backend, endpoint) is None and (why := self.not_newest(context)):
            return self.announce(context, stable.skip_creation(self.backend, endpoint, self.settings().model, why))
        r = stable.begin(self.backend, endpoint, self.names(context).run_key, self.settings(), policy,
                         self.lease_s(policy))
        info = self.settle(lambda: self.backend.endpoints.get_deployment(endpoint, r.slot),
                           lambda i: i.provisioning_state.is_terminal())
        return self.provisioned(context, r, info.provisioning_state, info.error, info.operation)

    def policy(self) -> RolloutPolicy:
        capabilities = self.backend.capabilities
        return RolloutPolicy.parse(self.rollout, default_window_s=capabilities.rollout_window_s,
                                   metrics_lag_s=capabilities.metrics_lag_s)

    def lease_s(self, policy: RolloutPolicy) -> float:
        approval = self.approval_timeout_s if self.approval_required else 0.0
        windows = policy.mirror_window_s + len(policy.steps) * policy.window_s + (len(policy.steps) + 1) * \
            policy.extension_s  # each phase, the mirror's too, may be extended for want of requests
        return self.max_wait_s + approval + windows + LEASE_MARGIN_S

    @property
    def approval_required(self) -> bool:
        return self.require_approval in (True, "True", "true", "1") and not self.rollback_to

    def stable_resume(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Where a deferral comes back: ``event["carry"]`` holds the rollout and the phase it waited in."""
        r, phase = Rollout.from_dict(event["carry"]["rollout"]), event["carry"]["phase"]
        self.link(context, "endpoint", r.endpoint)
        held = protocol.rollout_of(self.backend).lease(r.endpoint, r.holder, self.lease_s(r.rollout_policy))
        if held is not None:
            raise EndpointError(f"endpoint {r.endpoint}: run {held} took the rollout lease while this run waited")
        if phase == "approval":
            return self.answered(context, r, event)
        if phase == "provisioned":
            outcome = Outcome(event["outcome"])
            if outcome is not Outcome.ENDED:
                raise EndpointError(f"deployment {r.endpoint}/{r.slot}: {event['error']}")
            return self.provisioned(context, r, ProvisioningState(event["status"]), event.get("error"),
                                    event.get("operation"))
        after = stable.after_window(self.backend, r)
        if after.decision == "rolled_back":
            self.conclude(context, r, "rolled_back", after.reason)
            assert r.champion is not None
            raise EndpointError(f"rolled_back: the challenger {r.model} went back to 0% and {r.champion['model']} "
                                f"serves 100% again, at the {r.windows[-1]['phase']} window: {after.reason}")
        if after.decision:
            return self.conclude(context, r, after.decision, after.reason)
        return self.wait_window(context, r, after.wait_s)

    def provisioned(self, context: Context, r: Rollout, state: ProvisioningState, error: str | None,
                    operation: str | None) -> dict[str, Any]:
        if not state.is_terminal():
            self.defer(trigger=DeploymentTrigger(self.backend_conn_id, r.endpoint, r.slot, self.poll_s,
                                                 time.time() + self.max_wait_s, operation=operation,
                                                 carry={"rollout": r.to_dict(), "phase": "provisioned"}),
                       method_name="stable_resume")
        if state is not ProvisioningState.SUCCEEDED:
            raise EndpointError(error or f"deployment {r.endpoint}/{r.slot} ended {state.value}")
        if r.champion is None:  # a new endpoint: the mission's blue at 100%, smoke-tested
            name, _, version = r.model.partition(":")
            promote_blue(self.backend, r.endpoint, name, int(version), self.data_dir, self.request())
            return self.conclude(context, r, "created", "the endpoint's first model")
        if self.rollback_to:
            r.gate = {"summary": f"rollback_to={self.rollback_to}: {r.model} goes back, by a person's decision, "
                                 "without the gate"}
        else:
            evaluation = stable.evaluation_set(self.backend, r.model, self.code_dir, self.data_dir, self.evaluation)
            if not stable.judge_challenger(self.backend, r, evaluation, float(self.min_improvement or 0)):
                return self.conclude(context, r, "held", f"not better: {r.gate['summary']}")
            if why := self.not_newest(context):
                return self.conclude(context, r, "skipped", f"better ({r.gate['summary']}), but {why}")
            if self.approval_required:
                return self.ask_approval(context, r)
        return self.wait_window(context, r, stable.next_phase(self.backend, r))

    def ask_approval(self, context: Context, r: Rollout) -> dict[str, Any]:
        """Stop before traffic moves: the evidence on the version and in the log, then wait for a person."""
        name, _, version = r.model.partition(":")
        self.backend.models.update_tags(name, int(version), {APPROVAL_TAG: "pending", APPROVAL_BY_TAG: None,
                                                             "mlrunway.evidence": stable.evidence(r)})
        context["ti"].xcom_push(key="approval", value={"model": r.model, "gate": r.gate})
        self.log.info("%s waits for approval before any traffic moves: %s. Answer with `python -m "
                      "mlrunway.airflow.approval approve|reject %s %s --conn %s` (or set its tag %s)", r.model,
                      r.gate["summary"], name, version, self.backend_conn_id, APPROVAL_TAG)
        carry = {"rollout": r.to_dict(), "phase": "approval"}
        deadline = time.time() + self.approval_timeout_s
        trigger = ApprovalTrigger(self.backend_conn_id, r.model, self.poll_s, deadline, carry)
        if self.deferrable:
            self.defer(trigger=trigger, method_name="stable_resume")
        while True:  # in the worker: the trigger's own poll
            answer, done, by = trigger.poll(self.backend)
            if done or time.time() > deadline:
                outcome = Outcome.ENDED if done else Outcome.TIMEOUT
                return self.answered(context, r, {"outcome": outcome.value, "status": answer, "error": by})
            time.sleep(self.poll_s)

    def answered(self, context: Context, r: Rollout, event: dict[str, Any]) -> dict[str, Any]:
        if event["outcome"] == Outcome.ENDED.value and event["status"] == "approved":
            self.log.info("%s approved by %s: the rollout begins", r.model, event.get("error"))
            return self.wait_window(context, r, stable.next_phase(self.backend, r))
        if event["outcome"] == Outcome.ENDED.value:
            why = f"{event['status']} by {event.get('error') or 'a person'}"
        else:  # the deadline passed (or the wait failed): nobody answered in time
            why = f"no answer within approval_timeout_s={self.approval_timeout_s:g} ({event.get('error')})"
            name, _, version = r.model.partition(":")
            self.backend.models.update_tags(name, int(version), {APPROVAL_TAG: "expired"})
        return self.conclude(context, r, "held", f"better ({r.gate['summary']}), but {why}")

    def wait_window(self, context: Context, r: Rollout, window_s: float) -> dict[str, Any]:
        carry = {"rollout": r.to_dict(), "phase": "window"}
        if not self.deferrable:
            time.sleep(window_s)
            return self.stable_resume(context, {"outcome": Outcome.ENDED.value, "carry": carry})
        self.defer(trigger=WindowTrigger(time.time() + window_s, carry), method_name="stable_resume")
        raise AssertionError("defer raises")  # pragma: no cover

    def not_newest(self, context: Context) -> str | None:
        """Why this run may not roll out (a backfill, a catch-up or cleared old run), or None. A scheduled run is
        not the newest when the DAG's next run after it is already due: the timetable says when (Airflow's core
        timetable, which the task SDK's does not expose)."""
        run = context.get("dag_run")
        run_type = str(getattr(getattr(run, "run_type", None), "value", getattr(run, "run_type", "manual")))
        next_due = None
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if run_type == "scheduled" and start is not None and end is not None:
            next_due = self.next_run_after(context["dag"].timetable, start, end)
        return stable.not_newest(run_type, next_due, datetime.now(UTC))

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

    def conclude(self, context: Context, r: Rollout, decision: str, reason: str) -> dict[str, Any]:
        result = self.announce(context, stable.conclude(self.backend, r, decision, reason))
        if decision in ("created", "promoted"):
            emit_production(context, r.endpoint, {"model": r.model, "decision": decision, "gate": r.gate})
        return result

    @staticmethod
    def announce(context: Context, result: dict[str, Any]) -> dict[str, Any]:
        """Push the decision and what serves as XComs at once: a rolled-back task fails after this."""
        for key in ("decision", "live"):
            context["ti"].xcom_push(key=key, value=result[key])
        return result
