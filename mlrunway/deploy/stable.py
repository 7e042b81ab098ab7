"""A stable endpoint's lifecycle across runs: which slot serves, the challenger in the other one, the gate, the
staged rollout, registry aliases, and the decision each run ends with.

The first run creates the endpoint and deploys ``blue`` at 100% (``created``). Each later run deploys its model to
the slot that is not serving (``green`` while ``blue`` serves, then back) at 0%, compares it with the champion on
the evaluation set, and ends ``held`` (not better), ``skipped`` (better or not, a run that is not the newest never
moves production), ``rolled_back`` (the staged rollout saw it fail) or ``promoted``. A lease per endpoint keeps two
runs' rollouts from interleaving. The run's cleanup deletes the slot left without traffic, never the endpoint.
"""

from __future__ import annotations

import enum
import json
import logging
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.protocol import Backend, Shadow, rollout_of
from mlrunway.backend.types import DeploymentMetrics, DeploymentSettings
from mlrunway.deploy import gate, rollout, shadow
from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.errors import EndpointError, NotFound

log = logging.getLogger(__name__)

SLOTS = ("blue", "green")
# A person's answer on a challenger waiting for approval, and who gave it (python -m mlrunway.airflow.approval).
APPROVAL_TAG, APPROVAL_BY_TAG = "mlrunway.approval", "mlrunway.approval_by"
METRICS_TRIES, METRICS_RETRY_S = 3, 2.0  # a metrics read that fails is tried again after 2 s, then 4 s


class Decision(enum.StrEnum):
    """How a run on a stable endpoint ends."""

    CREATED = "created"
    PROMOTED = "promoted"
    HELD = "held"
    SKIPPED = "skipped"
    ROLLED_BACK = "rolled_back"


@dataclass(frozen=True)
class Serving:
    """What serves an endpoint's traffic: the deployment and its model (``name:version``)."""

    deployment: str
    model: str


@dataclass(kw_only=True)
class Progress:
    """A run's progress on a stable endpoint, kept as JSON between the deploy task's deferrals."""

    endpoint: str
    holder: str
    model: str
    slot: str
    champion: Serving | None
    policy: dict[str, Any]
    gate: dict[str, Any] = field(default_factory=dict)
    step: int = -1
    started: float = 0.0
    baseline: dict[str, Any] | None = None
    windows: list[dict[str, Any]] = field(default_factory=list)
    extended_s: float = 0.0  # how long the current window was extended for want of requests

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Progress:
        champion = data.get("champion")
        return cls(**{**data, "champion": Serving(**champion) if champion else None})

    @property
    def rollout_policy(self) -> RolloutPolicy:
        return RolloutPolicy.parse(self.policy)


def serving(backend: Backend, endpoint: str) -> dict[str, str] | None:
    """The slot with the most traffic and its model (``{"deployment", "model"}``), or None: no endpoint yet, or
    nothing serves."""
    try:
        traffic = backend.endpoints.get(endpoint).traffic
    except NotFound:
        return None
    live = sorted((weight, name) for name, weight in traffic.items() if weight)
    if not live:
        return None
    slot = live[-1][1]
    return {"deployment": slot, "model": backend.endpoints.get_deployment(endpoint, slot).model}


def not_newest(run_type: str, next_run_due: datetime | None, now: datetime) -> str | None:
    """Why a run may not move production, or None. A backfill never may; a scheduled run whose successor was
    already due is a catch-up or a cleared old run, and a newer one exists or is due; manual runs may."""
    if run_type == "backfill":
        return "a backfill run never moves production"
    if run_type == "scheduled" and next_run_due is not None and next_run_due <= now:
        return (f"the DAG's next run was due at {next_run_due.isoformat()}: this run is a catch-up or a cleared "
                "old run, and only the newest scheduled run may roll out")
    return None


def begin(backend: Backend, endpoint: str, holder: str, settings: DeploymentSettings, policy: RolloutPolicy,
          lease_s: float) -> Progress:
    """Take the endpoint's lease, create or recover the endpoint, and start the challenger's deployment in the slot
    that is not serving (``blue`` on a new endpoint) at 0%."""
    held = rollout_of(backend).lease(endpoint, holder, lease_s)
    if held is not None:
        raise EndpointError(f"endpoint {endpoint}: run {held} is rolling out to it; rollouts on one endpoint never "
                            "interleave: this run fails now, and its retry (or the next run) goes ahead once that "
                            "rollout has ended")
    backend.endpoints.create_or_update(endpoint)  # a local endpoint whose server died is restarted here
    rollout_of(backend).lease(endpoint, holder, lease_s)  # recorded on the endpoint now that it exists (Azure)
    # A try killed mid-rollout (its worker lost between two steps) left traffic split with no decision: its retry,
    # holding the same lease, puts production back first and rolls out again from the start.
    restore_production(backend, endpoint)
    champion = serving(backend, endpoint)
    slot = SLOTS[0] if champion is None or champion["deployment"] == SLOTS[1] else SLOTS[1]
    backend.endpoints.begin_create_or_update_deployment(endpoint, slot, settings)
    log.info("endpoint %s: %s serves %s; the challenger %s goes to %s at 0%%", endpoint,
             champion["deployment"] if champion else "nothing", champion["model"] if champion else "-", settings.model,
             slot)
    return Progress(endpoint=endpoint, holder=holder, model=settings.model, slot=slot,
                   champion=Serving(**champion) if champion else None,
                   policy=policy.to_dict())


def evaluation_set(backend: Backend, model: str, code_dir: str | Path, data_dir: str | Path | None,
                   spec: dict[str, Any] | None) -> gate.EvaluationSet:
    """The team's set when it names one; else, for an image classifier, the ``test/`` split of ``data_dir``."""
    if gate.names_set(spec):
        return gate.team_set(code_dir, dict(spec or {}))
    name, _, version = model.partition(":")
    with tempfile.TemporaryDirectory() as scratch:
        signature = json.loads((backend.models.download(name, version, Path(scratch)) / "signature.json").read_text())
    if not signature.get("classes") or data_dir is None:
        raise check.fail("evaluation", f"model {model} is not an image classifier with data_dir, so there is no "
                              "default evaluation set", "name one: {\"file\": \"eval.jsonl\", \"metric\": "
                              "\"metrics.py:rmse\", \"goal\": \"minimize\"} in the code folder")
    return gate.classifier_set(data_dir, signature)


def judge_challenger(backend: Backend, r: Progress, evaluation: gate.EvaluationSet,
                     settings: gate.GateSettings) -> bool:
    """Both deployments answer the set through the endpoint; the paired comparison of their answers decides
    (:func:`gate.decide`). Records the figures and the interval in ``r.gate``; True to promote."""
    assert r.champion is not None
    champion = gate.answers(backend, r.endpoint, r.champion.deployment, evaluation)
    challenger = gate.answers(backend, r.endpoint, r.slot, evaluation)
    comparison = gate.compare(evaluation, champion, challenger, settings)
    promote, verdict, summary = gate.decide(comparison, settings)
    r.gate = {**comparison.to_dict(), "min_improvement": settings.min_improvement,
              "min_samples": settings.min_samples, "champion_model": r.champion.model, "challenger_model": r.model,
              "verdict": verdict, "summary": summary}
    log.info("gate: champion %s, challenger %s: %s (%s)", r.champion.model, r.model, verdict, summary)
    return promote


def next_phase(backend: Backend, r: Progress) -> float:
    """Move to the rollout's next phase (the mirror window, or the next traffic step) and return its window in
    seconds. Traffic and models are read back after the change."""
    assert r.champion is not None
    policy = r.rollout_policy
    now = time.time()
    if r.baseline is None:  # the champion alone, over the window before the rollout: the reference at 100%
        r.baseline = read_metrics(backend, r.endpoint, r.champion.deployment, now - policy.window_s, now).to_dict()
    mirror = policy.mirror_percent and policy.mirror_window_s and r.step == -1 and not r.windows
    if mirror:
        traffic, mirrored, window = {r.champion.deployment: 100, r.slot: 0}, {r.slot: int(policy.mirror_percent)}, \
            policy.mirror_window_s
    else:
        r.step += 1
        traffic = rollout.traffic_at(r.champion.deployment, r.slot, policy.steps[r.step])
        mirrored, window = {}, policy.window_s
    rollout.apply(backend, r.endpoint, traffic, mirrored, _models(r))
    r.started = time.time()  # the window opens once the change is live (on Azure an update takes a while)
    r.extended_s = 0.0
    log.info("endpoint %s: traffic %s, mirror %s, for %gs", r.endpoint, traffic, mirrored or "none", window)
    return float(window)


WATCH_POLL_S = 0.25  # how often a window's watch reads the deployments' metrics, at most


def watch_period(backend: Backend) -> float:
    """Seconds between two looks of a window's watch: no sooner than the backend's metrics change
    (``Capabilities.metrics_period_s``: a minute on Azure Monitor)."""
    return max(WATCH_POLL_S, backend.capabilities.metrics_period_s)


def watch_once(backend: Backend, r: Progress) -> str | None:
    """One look of the window's watch (:func:`rollout.watch`): the challenger's last ``watch_s`` seconds against
    the champion's window so far (or its window before the rollout, when it serves nothing now); why it must go
    back, or None. Nothing to watch where the backend's metrics come later than ``watch_s`` (Azure: the window's
    end judges), and a read that fails is no verdict (the window's end counts it as failed)."""
    policy = r.rollout_policy
    if r.champion is None or not policy.watch_s or backend.capabilities.metrics_lag_s > policy.watch_s:
        return None
    now = time.time()
    try:
        challenger = rollout_of(backend).deployment_metrics(r.endpoint, r.slot, max(r.started, now - policy.watch_s),
                                                            now + 1)
        if challenger.errors < 2:  # rollout.watch's own first condition: spares the champion's read
            return None
        champion = rollout_of(backend).deployment_metrics(r.endpoint, r.champion.deployment, r.started, now + 1)
    except Exception as exc:  # noqa: BLE001 - whatever the backend raised, this look has no evidence
        log.debug("endpoint %s: the watch could not read metrics (%s)", r.endpoint, exc)
        return None
    if not champion.requests and r.baseline:
        champion = DeploymentMetrics(**{k: v for k, v in r.baseline.items() if k != "error_rate"})
    return rollout.watch(challenger, champion, policy)


def watch_window(backend: Backend, r: Progress, until: float) -> str | None:
    """Watch the window until ``until`` (epoch seconds), in this process: a challenger the watch condemns goes back
    to 0% at once (:func:`roll_back`), and the reason is returned; None when the window ran its course."""
    while (left := until - time.time()) > 0:
        if reason := watch_once(backend, r):
            roll_back(backend, r)
            log.warning("endpoint %s: %s; traffic back on %s at 100%%", r.endpoint, reason,
                        r.champion.deployment if r.champion else "-")
            return reason
        time.sleep(min(watch_period(backend), left))
    return None


def check_window(backend: Backend, r: Progress) -> rollout.Verdict:
    """Judge the window that has just ended. Too few challenger requests: the window is extended (the verdict's
    ``extend_s``) while ``max_extension_s`` allows, then the rollout ends held. A failure, a held end or metrics
    that cannot be read send traffic back to the champion at 100%."""
    assert r.champion is not None
    policy = r.rollout_policy
    end = time.time() - backend.capabilities.metrics_lag_s
    try:
        challenger = read_metrics(backend, r.endpoint, r.slot, r.started, end)
        champion = read_metrics(backend, r.endpoint, r.champion.deployment, r.started, end)
    except EndpointError as exc:  # fail closed: a window nobody can read is a failed window
        verdict = rollout.Verdict(False, str(exc), {}, {})
    else:
        if not champion.requests:  # at 100% the champion serves nothing: compare with its last window that served
            earlier = [w["champion"] for w in r.windows if w["champion"].get("requests")] or [r.baseline]
            if earlier[-1]:
                champion = DeploymentMetrics(**{k: v for k, v in earlier[-1].items() if k != "error_rate"})
        verdict = rollout.judge(challenger, champion, policy)
        if r.step == -1 and isinstance(backend.endpoints, Shadow):  # the mirror window: compare the answers
            verdict = compare_shadow(backend.endpoints, r, end, verdict)
        if verdict.short and (left := policy.extension_s - r.extended_s) > 1e-6:
            extend = min(policy.window_s, left) if policy.window_s > 0 else left
            r.extended_s += extend
            log.info("endpoint %s: %s; the window is extended by %gs (%gs of rollout.max_extension_s=%gs)",
                     r.endpoint, verdict.reason, extend, r.extended_s, policy.extension_s)
            return replace(verdict, extend_s=extend)
    phase = phase_of(r)
    r.windows.append({"phase": phase, "ok": verdict.ok, "reason": verdict.reason, "challenger": verdict.challenger,
                      "champion": verdict.champion, "extended_s": r.extended_s, "short": verdict.short,
                      "held": verdict.held})
    log.info("endpoint %s, %s window: %s (%s)", r.endpoint, phase,
             "within bounds" if verdict.ok else "too little evidence" if verdict.short else
             "held" if verdict.held else "OUT OF BOUNDS",
             verdict.reason)
    if not verdict.ok:
        roll_back(backend, r)
    return verdict


def compare_shadow(endpoints: Shadow, r: Progress, end: float, verdict: rollout.Verdict) -> rollout.Verdict:
    """The mirror window's answers compared (:mod:`shadow`), in the challenger's figures; judged against
    ``max_disagreement`` when the window is otherwise within bounds. Answers that cannot be read hold the rollout
    when a bound is set (no evidence is never a pass), and are noted otherwise."""
    policy = r.rollout_policy
    try:
        report = shadow.compare(endpoints.mirrored_answers(r.endpoint, r.slot, r.started, end), policy.shadow_rule)
    except Exception as exc:  # noqa: BLE001 - whatever the backend raised, there is no comparison
        reason = f"the mirrored answers could not be read ({type(exc).__name__}: {exc})"
        verdict = replace(verdict, challenger={**verdict.challenger, "shadow": {"error": reason}})
        if policy.max_disagreement is None or not verdict.ok:
            return verdict
        return replace(verdict, ok=False, held=True, reason=f"{reason}: the challenger's agreement is unknown")
    verdict = replace(verdict, challenger={**verdict.challenger, "shadow": report.to_dict()})
    return rollout.judge_shadow(report, policy, verdict) if verdict.ok else verdict


def roll_back(backend: Backend, r: Progress) -> None:
    """The champion at 100%, the challenger at 0% (the backend retries a busy endpoint within its bound); if even
    that fails, an error that says so loudly, with the traffic left live."""
    assert r.champion is not None
    try:
        rollout.apply(backend, r.endpoint, {r.champion.deployment: 100, r.slot: 0}, {}, _models(r))
    except Exception as exc:
        try:
            left = f"traffic is still {backend.endpoints.get(r.endpoint).traffic}"
        except Exception as read:  # noqa: BLE001 - the error below must be raised whatever this read does
            left = f"its traffic could not be read either ({read})"
        raise EndpointError(f"ROLLBACK FAILED on endpoint {r.endpoint}: {left}, and the challenger {r.slot} "
                            f"({r.model}) may be serving; set {r.champion.deployment} to 100% by hand "
                            f"(cause: {exc})") from exc


@dataclass(frozen=True)
class Next:
    """What a rollout does after a window: wait ``wait_s`` more (the next phase's window, or an extension), or
    end with ``decision`` (promoted, held, rolled_back) for ``reason``."""

    wait_s: float = 0.0
    decision: Decision | None = None
    reason: str = ""


def after_window(backend: Backend, r: Progress, watched: str | None = None) -> Next:
    """Judge the window that has just ended (:func:`check_window`) and say what comes next; a next phase has
    already begun when this returns a wait. ``watched``: the watch rolled the challenger back within the window,
    for that reason (traffic is already on the champion)."""
    if watched:
        roll_back(backend, r)  # already done by the watch; again, in case the process died in between
        r.windows.append({"phase": phase_of(r), "ok": False, "reason": watched, "challenger": {}, "champion": {},
                          "extended_s": r.extended_s, "short": False, "watched": True})
        return Next(decision=Decision.ROLLED_BACK, reason=watched)
    verdict = check_window(backend, r)
    gate_summary = r.gate.get("summary", "the gate passed")
    if verdict.extend_s:
        return Next(wait_s=verdict.extend_s)
    if verdict.short or verdict.held:  # too little evidence even after the extension, or a shadow that disagrees
        return Next(decision=Decision.HELD, reason=f"{gate_summary}; but at the {r.windows[-1]['phase']} window "
                                            f"{verdict.reason}; the champion serves 100%")
    if not verdict.ok:
        return Next(decision=Decision.ROLLED_BACK, reason=verdict.reason)
    if done(r):
        unseen = [w["phase"] for w in r.windows if not w["challenger"].get("requests")]
        evidence = (f"promoted without live evidence (rollout.min_requests=0; no request in the "
                    f"{', '.join(unseen)} window)" if unseen else "every rollout window within bounds")
        return Next(decision=Decision.PROMOTED, reason=f"{gate_summary}; {evidence}")
    return Next(wait_s=next_phase(backend, r))


def read_metrics(backend: Backend, endpoint: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
    """A deployment's metrics, read up to METRICS_TRIES times; an EndpointError naming the cause when they cannot
    be read (never figures made up: a rollout counts that window as failed)."""
    for attempt in range(1, METRICS_TRIES + 1):
        try:
            return rollout_of(backend).deployment_metrics(endpoint, deployment, start, end)
        except Exception as exc:  # noqa: BLE001 - whatever the backend raised, the window has no evidence
            if attempt == METRICS_TRIES:
                raise EndpointError(f"the metrics of {endpoint}/{deployment} could not be read ({attempt} tries, "
                                    f"the last: {type(exc).__name__}: {exc}): a window without evidence counts as "
                                    "failed") from exc
            log.warning("endpoint %s: reading %s's metrics failed (%s); again in %gs", endpoint, deployment, exc,
                        METRICS_RETRY_S * attempt)
            time.sleep(METRICS_RETRY_S * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def phase_of(r: Progress) -> str:
    """The phase a window belongs to: its traffic step (``10%``), or ``mirror``."""
    return f"{r.rollout_policy.steps[r.step]}%" if r.step >= 0 else "mirror"


def done(r: Progress) -> bool:
    return r.step == len(r.rollout_policy.steps) - 1


def _models(r: Progress) -> dict[str, str]:
    return {r.slot: r.model, **({r.champion.deployment: r.champion.model} if r.champion else {})}


def conclude(backend: Backend, r: Progress, decision: Decision | str, reason: str) -> dict[str, Any]:
    """Record the decision and its evidence on the challenger's version (tags), move the aliases when it went
    live (``production`` to it, ``previous`` to the old champion), and return the task's result."""
    decision = Decision(decision)
    name, _, version = r.model.partition(":")
    backend.models.update_tags(name, int(version), {"mlrunway.decision": decision.value, "mlrunway.endpoint": r.endpoint,
                                                    "mlrunway.evidence": evidence(r), "mlrunway.reason": reason[:500]})
    if decision in (Decision.CREATED, Decision.PROMOTED):
        backend.models.set_alias(name, int(version), "production")
        if r.champion and r.champion.model:
            previous, _, previous_version = r.champion.model.partition(":")
            backend.models.set_alias(previous, int(previous_version), "previous")
    live = serving(backend, r.endpoint)
    info = backend.endpoints.get(r.endpoint)
    log.info("endpoint %s: %s (%s); %s serves %s", r.endpoint, decision.value, reason,
             live["deployment"] if live else "nothing", live["model"] if live else "-")
    return {"decision": decision.value, "reason": reason, "live": live, "endpoint": r.endpoint,
            "scoring_uri": info.scoring_uri, "deployment": r.slot, "gate": r.gate, "windows": r.windows,
            "model": r.model}


def evidence(r: Progress) -> str:
    """The gate's figures and each window's verdict, as a version's tag holds them (at most 4,000 characters)."""
    windows = [{k: w[k] for k in ("phase", "ok", "reason")} for w in r.windows]
    return json.dumps({"gate": r.gate, "windows": windows})[:4000]


def skip_creation(backend: Backend, endpoint: str, model: str, why: str) -> dict[str, Any]:
    """A run that is not the newest finds no production model: it creates nothing (the newest run will)."""
    reason = f"{why}; endpoint {endpoint} has no production model yet, and only the newest run creates it"
    name, _, version = model.partition(":")
    backend.models.update_tags(name, int(version), {"mlrunway.decision": "skipped", "mlrunway.endpoint": endpoint,
                                                    "mlrunway.reason": reason[:500]})
    log.info("endpoint %s: skipped (%s)", endpoint, reason)
    return {"decision": "skipped", "reason": reason, "live": None, "endpoint": endpoint, "scoring_uri": None,
            "deployment": None, "gate": {}, "windows": [], "model": model}


def restore_production(backend: Backend, endpoint: str) -> str | None:
    """Traffic follows the record: when the model serving is not the one ``production`` names, or it serves beside
    another slot's share or mirror (a rollout cut short between its steps or after its last, before its decision
    was recorded: the disk full, the task killed), the version ``production`` names goes back to 100% if a slot
    still holds it, the others to 0% and the mirror off (cleanup then deletes them). No decision, no promotion.
    Returns the model restored, or None."""
    live = serving(backend, endpoint)
    if live is None:
        return None
    name = live["model"].partition(":")[0]
    holder = backend.models.alias(name, "production")
    recorded = f"{holder.name}:{holder.version}" if holder else None
    info = backend.endpoints.get(endpoint)
    split = sum(1 for share in info.traffic.values() if share) > 1 or any(info.mirror_traffic.values())
    if recorded is None or (live["model"] == recorded and not split):
        return None
    slots = {d.name: d.model for d in backend.endpoints.list_deployments(endpoint) if d.name in SLOTS}
    slot = next((s for s, model in slots.items() if model == recorded), None)
    if slot is None:
        log.warning("endpoint %s: %s serves but production names %s, which no slot holds: left as it is", endpoint,
                    live["model"], recorded)
        return None
    log.warning("endpoint %s: traffic %s, mirror %s, but no decision recorded it (a rollout cut short); %s, the "
                "production model, goes back to 100%%", endpoint, info.traffic, info.mirror_traffic, recorded)
    rollout.apply(backend, endpoint, {s: 100 if s == slot else 0 for s in slots}, {}, slots)
    return recorded


def clean_up(backend: Backend, endpoint: str, holder: str) -> list[str]:
    """Put the production model back where a rollout was cut short (:func:`restore_production`), delete the slots
    left with no traffic (the loser, or the old champion after a promotion), never the endpoint; give the lease
    back. A rollout another run holds is left alone."""
    if rollout_of(backend).lease(endpoint, holder, 60.0) is not None:
        log.info("endpoint %s: another run's rollout holds it; its cleanup deletes nothing", endpoint)
        return []
    deleted = []
    try:
        restore_production(backend, endpoint)
        info = backend.endpoints.get(endpoint)
        for deployment in backend.endpoints.list_deployments(endpoint):
            name = deployment.name
            if name in SLOTS and not info.traffic.get(name) and not info.mirror_traffic.get(name):
                if backend.endpoints.delete_deployment(endpoint, name):
                    deleted.append(name)
    except NotFound:
        pass
    finally:
        rollout_of(backend).release(endpoint, holder)
    return deleted
