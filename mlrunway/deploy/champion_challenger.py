"""A stable endpoint that outlives runs (:mod:`mlrunway.deploy.stable`): the first run creates it with `blue` at
100% (``created``); a later one deploys its model to the slot not serving, at 0%, compares both on the evaluation
set through the endpoint (the gate), and ends ``held``, ``skipped`` (a run that is not the newest never moves
production), ``promoted`` after a staged rollout, or ``rolled_back`` (the task fails with the figures). With
``require_approval`` a person answers between the gate and the first traffic change; ``rollback_to`` deploys the
version an alias names through the same rollout, without the gate.

Its state between waits is the :class:`~mlrunway.deploy.stable.Progress` and the phase it waits in.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from mlrunway import check
from mlrunway.backend.protocol import Backend, Rollout, Shadow, rollout_of
from mlrunway.backend.waiting import Outcome
from mlrunway.deploy import gate, smoke, stable
from mlrunway.deploy.base import Approval, DeployRequest, Done, Provisioning, Resumed, Step, Window
from mlrunway.deploy.blue import begin_reference, promote_blue
from mlrunway.deploy.production import ProductionSettings
from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.deploy.stable import APPROVAL_BY_TAG, APPROVAL_TAG, Decision, Progress
from mlrunway.errors import EndpointError, NotSupportedOnBackend

log = logging.getLogger(__name__)

LEASE_MARGIN_S = 900.0
WATCHED = "rolled_back"  # a window's event status when its watch rolled the challenger back (its error: why)


class Phase(enum.StrEnum):
    """What a rollout waits for between two steps of the task."""

    PROVISIONED = "provisioned"
    APPROVAL = "approval"
    WINDOW = "window"


class ChampionChallenger:
    name: ClassVar[str] = "champion_challenger"

    def validate(self, backend: Backend | None, deployment: Mapping[str, Any]) -> None:
        """The smoke test's settings, then the stable endpoint's: its name and promotion
        (:class:`~mlrunway.deploy.gate.Promotion`), the rollout policy, the evaluation set (the team's file and
        metric function, or a classifier's test/ split) and that the backend can roll out."""
        smoke.check_before_any_job(deployment)
        promotion = gate.Promotion.of(deployment)
        if not promotion.endpoint_name:
            raise check.fail("endpoint_name", "is empty", "name the stable endpoint, or use the blue strategy")
        RolloutPolicy.parse(dict(deployment.get("rollout") or {}))
        evaluation = dict(deployment.get("evaluation") or {})
        gate.Evaluation.parse(evaluation)
        data_dir = deployment.get("data_dir")
        if gate.names_set(evaluation):
            gate.team_set(deployment["code_dir"], evaluation)
        elif data_dir is None or not (Path(data_dir) / "test").is_dir():
            raise check.fail("evaluation", f"there is no {Path(data_dir or '.') / 'test'} to compare the challenger "
                             "with the champion on", "add a test/ split no sweep sees, or name a file of labelled "
                             "requests and a metric in evaluation")
        if backend is not None and not isinstance(backend.endpoints, Rollout):
            raise check.fail("endpoint_name", f"the {backend.kind} backend has no staged rollout yet",
                             "leave endpoint_name empty: each run deploys to its own endpoint")

    def settings(self, backend: Backend, given: Mapping[str, Any]) -> ProductionSettings:
        """The stable endpoint's settings (:class:`~mlrunway.deploy.production.ProductionSettings`), the rollout's
        window defaulting to the backend's and checked against its metrics lag."""
        return ProductionSettings.read(given, backend)

    def clean_up(self, backend: Backend, endpoint: str, run_key: str) -> dict[str, Any]:
        """Production back where a rollout was cut short, the slots left with no traffic deleted, never the
        endpoint; the lease given back (:func:`mlrunway.deploy.stable.clean_up`)."""
        return {"stable_endpoint": endpoint, "deleted_deployments": stable.clean_up(backend, endpoint, run_key)}

    def start(self, backend: Backend, request: DeployRequest) -> Step:
        endpoint, production = request.endpoint, settings_of(request)
        if not isinstance(backend.endpoints, Rollout):
            raise NotSupportedOnBackend(f"endpoint_name={endpoint!r}: the {backend.kind} backend has no staged "
                                        "rollout yet; leave endpoint_name empty for the per-run endpoint")
        if production.rollout.max_disagreement is not None and not isinstance(backend.endpoints, Shadow):
            raise check.fail("rollout.max_disagreement", f"the {backend.kind} backend keeps no mirrored answers to "
                             "compare (Azure ML mirrors traffic without using the answers)", "leave it null here: "
                             "the mirror window still judges the challenger's errors and latency")
        settings = request.settings
        if production.rollback_to:  # a person's one-argument rollback: that version, through the same staged path
            name = settings.model_name
            target = backend.models.alias(name, production.rollback_to)
            if target is None:
                raise check.fail("rollback_to", f"no version of model {name} holds alias {production.rollback_to!r}",
                                 "name an alias a promotion set (previous, production)")
            settings = replace(settings, model=f"{name}:{target.version}")
        else:
            request.check_version()
        if stable.serving(backend, endpoint) is None:
            if request.not_newest:
                return Done(result=stable.skip_creation(backend, endpoint, settings.model, request.not_newest))
            begin_reference(backend, replace(request, settings=settings))  # the first model is smoke-tested
        r = stable.begin(backend, endpoint, request.run_key, settings, production.rollout, lease_s(request))
        info = backend.endpoints.get_deployment(endpoint, r.slot)
        return Provisioning(state=state(r, Phase.PROVISIONED), endpoint=endpoint, deployment=r.slot,
                            operation=info.operation)

    def resume(self, backend: Backend, request: DeployRequest, carried: dict[str, Any], event: Resumed) -> Step:
        r, phase = Progress.from_dict(carried["rollout"]), Phase(carried["phase"])
        held = rollout_of(backend).lease(r.endpoint, r.holder, lease_s(request))
        if held is not None:
            raise EndpointError(f"endpoint {r.endpoint}: run {held} took the rollout lease while this run waited")
        if phase is Phase.PROVISIONED:
            if event.outcome is not Outcome.ENDED:
                raise EndpointError(f"deployment {r.endpoint}/{r.slot}: {event.error}")
            event.provisioned(f"deployment {r.endpoint}/{r.slot}", request.max_wait_s)
            return self._provisioned(backend, request, r)
        if phase is Phase.APPROVAL:
            return self._answered(backend, request, r, event)
        after = stable.after_window(backend, r, watched=event.error if event.status == WATCHED else None)
        if after.decision == Decision.ROLLED_BACK:
            assert r.champion is not None
            return self._conclude(backend, r, Decision.ROLLED_BACK, after.reason, failure=(
                f"rolled_back: the challenger {r.model} went back to 0% and {r.champion.model} serves 100% "
                f"again, at the {r.windows[-1]['phase']} window: {after.reason}"))
        if after.decision:
            return self._conclude(backend, r, after.decision, after.reason)
        return Window(state=state(r, Phase.WINDOW), seconds=after.wait_s)

    def abandon(self, backend: Backend, request: DeployRequest) -> None:
        """Nothing: a challenger left at 0% is deleted by the run's cleanup, which also gives production back."""

    def _provisioned(self, backend: Backend, request: DeployRequest, r: Progress) -> Step:
        if r.champion is None:  # a new endpoint: the mission's blue at 100%, smoke-tested
            name, _, version = r.model.partition(":")
            promote_blue(backend, r.endpoint, name, int(version), request.data_dir, request.sample_request,
                         settings=request.settings, expected_response=request.expected_response,
                         ignore_keys=request.ignore_keys, reference_job=request.reference_job)
            return self._conclude(backend, r, Decision.CREATED, "the endpoint's first model")
        production = settings_of(request)
        if production.rollback_to:
            r.gate = {"summary": f"rollback_to={production.rollback_to}: {r.model} goes back, by a person's "
                                 "decision, without the gate"}
        else:
            evaluation = stable.evaluation_set(backend, r.model, request.settings.code_dir, request.data_dir,
                                               production.evaluation)
            settings = gate.GateSettings.parse(production.evaluation, production.min_improvement)
            if not stable.judge_challenger(backend, r, evaluation, settings):
                return self._conclude(backend, r, Decision.HELD, f"{r.gate['verdict']}: {r.gate['summary']}")
            if request.not_newest:
                return self._conclude(backend, r, Decision.SKIPPED,
                                      f"better ({r.gate['summary']}), but {request.not_newest}")
            if production.require_approval:
                return self._ask(backend, request, r)
        return self._next_window(backend, r)

    @staticmethod
    def _next_window(backend: Backend, r: Progress) -> Window:
        """The rollout's next phase begins (traffic moves), then its state is kept: it records the change."""
        seconds = stable.next_phase(backend, r)
        return Window(state=state(r, Phase.WINDOW), seconds=seconds)

    def _ask(self, backend: Backend, request: DeployRequest, r: Progress) -> Step:
        """Stop before traffic moves: the evidence on the version, then wait for a person."""
        name, _, version = r.model.partition(":")
        backend.models.update_tags(name, int(version), {APPROVAL_TAG: "pending", APPROVAL_BY_TAG: None,
                                                        "mlrunway.evidence": stable.evidence(r)})
        return Approval(state=state(r, Phase.APPROVAL), model=r.model, evidence={"model": r.model, "gate": r.gate},
                        deadline=time.time() + settings_of(request).approval_timeout_s)

    def _answered(self, backend: Backend, request: DeployRequest, r: Progress, event: Resumed) -> Step:
        if event.outcome is Outcome.ENDED and event.status == "approved":
            log.info("%s approved by %s: the rollout begins", r.model, event.by)
            return self._next_window(backend, r)
        if event.outcome is Outcome.ENDED:
            why = f"{event.status} by {event.by or 'a person'}"
        elif event.outcome is Outcome.LOST:  # no evidence is never a pass: held, the tag left as it is
            why = f"its approval could not be read ({event.error})"
        else:  # the deadline passed (or the wait failed): nobody answered in time
            why = f"no answer within approval_timeout_s={settings_of(request).approval_timeout_s:g} ({event.error})"
            name, _, version = r.model.partition(":")
            backend.models.update_tags(name, int(version), {APPROVAL_TAG: "expired"})
        return self._conclude(backend, r, Decision.HELD, f"better ({r.gate['summary']}), but {why}")

    def _conclude(self, backend: Backend, r: Progress, decision: Decision, reason: str,
                  failure: str | None = None) -> Done:
        result = stable.conclude(backend, r, decision.value, reason)
        live = decision in (Decision.CREATED, Decision.PROMOTED)
        return Done(result=result, failure=failure,
                    production={"model": r.model, "decision": decision.value, "gate": r.gate} if live else None)


def state(r: Progress, phase: Phase) -> dict[str, Any]:
    return {"rollout": r.to_dict(), "phase": phase.value}


def settings_of(request: DeployRequest) -> ProductionSettings:
    """The request's stable-endpoint settings (none given: the defaults)."""
    given = request.strategy_settings
    return given if isinstance(given, ProductionSettings) else ProductionSettings.read(None)


def lease_s(request: DeployRequest) -> float:
    """How long a run holds the endpoint's rollout lease: its longest path, each phase's extension included."""
    production = settings_of(request)
    policy = production.rollout
    approval = production.approval_timeout_s if production.require_approval and not production.rollback_to else 0.0
    windows = policy.mirror_window_s + len(policy.steps) * policy.window_s + (len(policy.steps) + 1) * \
        policy.extension_s  # each phase, the mirror's too, may be extended for want of requests
    return request.max_wait_s + approval + windows + LEASE_MARGIN_S


@dataclass(frozen=True)
class WindowWatch:
    """A staged rollout's window watched by its host (the trigger, or the task waiting in the worker), which holds
    the window's state as the opaque value the strategy gave it: the strategy reads its progress back from it."""

    progress: Progress

    @classmethod
    def of(cls, carry: Mapping[str, Any]) -> WindowWatch | None:
        """The watch of the window ``carry`` (a :class:`~mlrunway.deploy.base.Window`'s state) belongs to; None:
        nothing to watch (the window is only waited out)."""
        rollout = carry.get("rollout")
        return cls(Progress.from_dict(rollout)) if rollout else None

    def once(self, backend: Backend) -> str | None:
        """One look (:func:`mlrunway.deploy.stable.watch_once`): why the challenger must go back, or None."""
        return stable.watch_once(backend, self.progress)

    def roll_back(self, backend: Backend) -> None:
        """The challenger back to 0%, the champion at 100%."""
        stable.roll_back(backend, self.progress)

    def period(self, backend: Backend) -> float:
        """Seconds between two looks."""
        return stable.watch_period(backend)

    def until(self, backend: Backend, until: float) -> str | None:
        """Watch until ``until`` (epoch s) in this process (:func:`mlrunway.deploy.stable.watch_window`): the reason
        a condemned challenger went back, or None."""
        return stable.watch_window(backend, self.progress, until)
