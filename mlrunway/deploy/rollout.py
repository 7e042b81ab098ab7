"""A staged rollout with automatic rollback: optionally mirror live traffic to the challenger for a window, then
move traffic in steps (10 -> 50 -> 100 by default), each held for a window while the challenger's error rate and
p99 latency are compared with the champion's over the same window. Past a bound, traffic goes back to the
champion at 100%. After every change, traffic and each deployment's model are read back.

The evidence rule fails closed: a window in which the challenger served fewer than ``min_requests`` requests
judges nothing. It is extended (up to ``max_extension_s``), then the rollout ends held, traffic on the champion.
A window whose metrics cannot be read counts as failed. Only ``min_requests: 0`` lets a window without requests
pass, and the decision then says it was promoted without live evidence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, Strict, ValidationInfo, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import DeploymentMetrics
from mlrunway.deploy.shadow import ShadowReport, ShadowRule, ms
from mlrunway.errors import EndpointError
from mlrunway.settings import SettingsError, parse, setting

_NUMBER = "{value!r} is not a number >= 0"
_STEP = Annotated[int, Strict(), Field(ge=1, le=100)]
_SECONDS = Annotated[float, Strict(), Field(ge=0)]


def _ascending_to_100(steps: tuple[int, ...]) -> tuple[int, ...]:
    if list(steps) != sorted(set(steps)) or steps[-1] != 100:
        raise ValueError("not ascending, or not ending at 100")
    return steps


def _seconds(default: float | None, description: str) -> Any:
    return setting(default, description=description, problem=_NUMBER, fix="write a number of seconds")


def _bound(default: float, description: str) -> Any:
    return setting(default, description=description, problem=_NUMBER, fix="write a number")


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class RolloutPolicy:
    """A staged rollout's settings, declared once (:mod:`mlrunway.settings`): each field's type, bounds, default,
    description and error words are its validation, the trigger form's Param (``dags/train_sweep_deploy.py``) and
    preflight's check. :meth:`parse` reads the DAG's dict; what depends on the backend (a window against its
    metrics lag) comes through pydantic's validation context."""

    steps: Annotated[tuple[_STEP, ...], AfterValidator(_ascending_to_100)] = setting(
        (10, 50, 100), min_length=1, description="The challenger's traffic at each step, ascending, ending at 100.",
        problem="{value!r} is not an ascending list of percentages ending at 100",
        fix="write e.g. [10, 50, 100], or [100] to switch at once")
    window_s: _SECONDS = _seconds(30.0, "How long each step is held before it is judged (seconds locally; minutes on "
                                        "Azure, whose metrics arrive per minute); empty: the backend's.")
    mirror_percent: Annotated[int, Strict()] = setting(
        0, ge=0, le=50, description="Live traffic copied to the challenger before the first step (0: no mirror phase; "
                                    "at most 50, Azure's limit).",
        problem="{value!r} is not a whole percentage from 0 to 50 (Azure's limit)", fix="mirror 0 to 50 percent")
    mirror_window_s: _SECONDS = _seconds(0.0, "How long the mirror phase lasts.")
    max_error_rate_increase: _SECONDS = _bound(
        0.01, "How far the challenger's error rate may exceed the champion's (0.01: one point).")
    max_p99_ratio: _SECONDS = _bound(2.0, "How many times the champion's p99 latency the challenger's may reach...")
    p99_slack_ms: _SECONDS = _bound(50.0, "...or this many ms above it, whichever is larger (a 2 ms p99 is noise at "
                                          "4 ms).")
    min_requests: Annotated[int, Strict()] = setting(
        20, ge=0, description="The challenger's requests a window needs to be judged at all (0: judge empty windows, "
                              "which then pass: promoted without live evidence).",
        problem="{value!r} is not a whole number >= 0",
        fix="write a count of requests, e.g. 20 (0 promotes without live evidence)")
    max_extension_s: _SECONDS | None = _seconds(
        None, "How long a window short of min_requests may be extended (null: one more window_s) before the rollout "
              "ends held.")
    watch_s: _SECONDS = _seconds(10.0, "The challenger's errors over the last watch_s seconds are watched through "
                                       "each window, and a clearly failing one is rolled back at once (0: judged at "
                                       "the window's end only).")
    watch_alpha: Annotated[float, Strict()] = setting(
        0.01, gt=0, le=0.1, description="How sure the watch must be: it rolls back when the challenger's errors would "
                                        "be that unlikely (the exact binomial tail) at the allowed error rate.",
        problem="{value!r} is not a probability in (0, 0.1]",
        fix="write e.g. 0.01 (or watch_s: 0 to judge at the window's end only)")
    shadow_keys: tuple[Annotated[str, Strict(), Field(min_length=1)], ...] = setting(
        (), description='In the mirror window, the answers\' keys compared (any depth; ["label"] for a classifier); '
                        "empty: the whole answer. Locally only: Azure ML discards mirrored answers.",
        problem="{value!r} is not a list of key names", fix='write e.g. ["label"], or [] to compare whole answers')
    shadow_tolerance: _SECONDS = _bound(0.0, "Numbers agree within it (absolute up to 1, relative beyond); 0: equal.")
    max_disagreement: Annotated[float, Strict()] | None = setting(
        None, ge=0, le=1, description="The share of mirrored requests on which the challenger may disagree with the "
                                      "champion; past it the rollout ends held before any live traffic moves (null: "
                                      "agreement is recorded, never judged).",
        problem="{value!r} is not a share in [0, 1]",
        fix="write e.g. 0.05 (at most 5% of mirrored requests answered differently), or null")

    @model_validator(mode="after")
    def _across_fields(self, info: ValidationInfo) -> RolloutPolicy:
        """The rules across fields, and the windows against the backend's metrics lag (``metrics_lag_s`` in the
        validation context): a window is judged on the requests of its first ``window_s - metrics_lag_s``
        seconds, in whole metric periods, so one shorter than twice the lag could judge none."""
        if self.max_disagreement is not None and not (self.mirror_percent and self.mirror_window_s):
            raise SettingsError("max_disagreement", "judges the mirror window, and there is none",
                                "set mirror_percent and mirror_window_s too, or leave max_disagreement null")
        lag = float((info.context or {}).get("metrics_lag_s") or 0.0)
        for name in ("window_s", "mirror_window_s"):
            window = getattr(self, name)
            if lag and (name == "window_s" or self.mirror_percent) and window < 2 * lag:
                raise SettingsError(name, f"{window:g} s is shorter than twice the backend's metrics lag ({lag:g} s): "
                                          "the window could judge no request", f"give at least {2 * lag:g} s")
        return self

    @classmethod
    def parse(cls, value: dict[str, Any] | None, field: str = "rollout", *,
              default_window_s: float | None = None, metrics_lag_s: float = 0.0) -> RolloutPolicy:
        """A policy from the DAG's dict (``window_s`` defaults to the backend's); every bad field is a SpecError
        naming it and the fix."""
        raw = dict(value or {}) if isinstance(value, dict) or value is None else value
        if default_window_s is not None and isinstance(raw, dict):
            raw.setdefault("window_s", default_window_s)
        return parse(cls, raw, field, noun="rollout", context={"metrics_lag_s": metrics_lag_s})

    @property
    def extension_s(self) -> float:
        return self.window_s if self.max_extension_s is None else self.max_extension_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "steps": list(self.steps), "shadow_keys": list(self.shadow_keys)}

    @property
    def shadow_rule(self) -> ShadowRule:
        return ShadowRule(self.shadow_keys, self.shadow_tolerance)


@dataclass(frozen=True)
class Verdict:
    """A window's judgement. ``short``: too few requests to judge (not ``ok``, and not a failure of the
    challenger); ``extend_s``: how much longer the window is held to gather them (0: the rollout ends held)."""

    ok: bool
    reason: str
    challenger: dict[str, Any]
    champion: dict[str, Any]
    short: bool = False
    extend_s: float = 0.0
    held: bool = False


def judge(challenger: DeploymentMetrics, champion: DeploymentMetrics, policy: RolloutPolicy) -> Verdict:
    """Whether the challenger stays within the policy's bounds over a window, against the champion's figures (of
    the same window, or of the window before the rollout when the champion has no traffic left)."""
    figures = challenger.to_dict(), champion.to_dict()
    if challenger.requests < policy.min_requests:  # fail closed: a quiet endpoint, a frozen worker
        return Verdict(False, f"{challenger.requests} request{'' if challenger.requests == 1 else 's'} reached the "
                              f"challenger in the window, fewer than rollout.min_requests={policy.min_requests}: "
                              "too little evidence to judge, and no evidence is never a pass", *figures, short=True)
    if not challenger.requests:
        return Verdict(True, "promoted without live evidence: no request reached the challenger, and "
                             "rollout.min_requests is 0", *figures)
    allowed = champion.error_rate + policy.max_error_rate_increase
    if challenger.error_rate > allowed:
        return Verdict(False, f"error rate {challenger.error_rate:.1%} ({challenger.errors} of {challenger.requests}) "
                              f"against the champion's {champion.error_rate:.1%} ({champion.errors} of "
                              f"{champion.requests}); the bound is {allowed:.1%}", *figures)
    if challenger.p99_ms is not None and champion.p99_ms is not None:
        bound = max(champion.p99_ms * policy.max_p99_ratio, champion.p99_ms + policy.p99_slack_ms)
        if challenger.p99_ms > bound:
            return Verdict(False, f"p99 latency {challenger.p99_ms:.1f} ms against the champion's "
                                  f"{champion.p99_ms:.1f} ms; the bound is {bound:.1f} ms", *figures)
    return Verdict(True, f"error rate {challenger.error_rate:.1%} of {challenger.requests} requests, p99 "
                         f"{ms(challenger.p99_ms)} (champion: {champion.error_rate:.1%} of {champion.requests}, "
                         f"p99 {ms(champion.p99_ms)})", *figures)


def judge_shadow(report: ShadowReport, policy: RolloutPolicy, verdict: Verdict) -> Verdict:
    """A mirror window within its other bounds (``verdict``), judged on its compared answers against
    ``max_disagreement``: too few compared requests judge nothing (``short``: no evidence is never a pass); more
    disagreement than allowed holds the rollout (``held``)."""
    if policy.max_disagreement is None:
        return replace(verdict, reason=f"{verdict.reason}; {report.summary()}")
    needed = max(1, policy.min_requests)
    if report.compared < needed:
        return replace(verdict, ok=False, short=True, reason=(
            f"{report.compared} mirrored request{'' if report.compared == 1 else 's'} compared, fewer than "
            f"rollout.min_requests={needed}: too little evidence to judge the challenger's agreement"))
    assert report.disagreement is not None
    if report.disagreement > policy.max_disagreement:
        return replace(verdict, ok=False, held=True, reason=(
            f"shadow: the challenger disagreed with the champion on {report.compared - report.agreed} of "
            f"{report.compared} mirrored requests ({report.disagreement:.1%}; {report.rule}), over "
            f"rollout.max_disagreement={policy.max_disagreement:g}"))
    return replace(verdict, reason=f"{verdict.reason}; {report.summary()}")


def watch(challenger: DeploymentMetrics, champion: DeploymentMetrics, policy: RolloutPolicy) -> str | None:
    """Within a window: why the challenger must go back now, or None. Its errors over the last ``watch_s``
    seconds are tested against the rate it may have (the champion's, plus ``max_error_rate_increase``): when
    ``P(X >= errors)`` for ``X ~ Binomial(requests, rate)`` is below ``watch_alpha``. One error never suffices,
    whatever the rate (with ``max_error_rate_increase`` 0 and a champion without errors, it would be impossible)."""
    from scipy import stats

    rate = min(1.0, champion.error_rate + policy.max_error_rate_increase)
    if challenger.errors < 2 or rate >= 1.0:
        return None
    tail = float(stats.binom.sf(challenger.errors - 1, challenger.requests, rate))
    if tail >= policy.watch_alpha:
        return None
    return (f"watched: {challenger.errors} errors in {challenger.requests} requests over the last "
            f"{policy.watch_s:g} s, an error rate of {challenger.error_rate:.1%} against the allowed {rate:.1%} (the "
            f"champion's {champion.error_rate:.1%} + {policy.max_error_rate_increase:.1%}): P = {tail:.2g} < "
            f"watch_alpha={policy.watch_alpha:g}")


def traffic_at(champion: str, challenger: str, percent: int) -> dict[str, int]:
    return {champion: 100 - percent, challenger: percent}


def apply(backend: Backend, endpoint: str, traffic: dict[str, int], mirror: dict[str, int],
          models: dict[str, str]) -> None:
    """Set traffic and mirror, then read both back with each deployment's model: what is live is what was asked,
    or EndpointError says what differs."""
    backend.endpoints.set_traffic(endpoint, traffic, mirror_traffic=mirror)
    read_back(backend, endpoint, traffic, mirror, models)


def read_back(backend: Backend, endpoint: str, traffic: dict[str, int], mirror: dict[str, int],
              models: dict[str, str]) -> None:
    info = backend.endpoints.get(endpoint)
    live = {k: v for k, v in info.traffic.items() if v}
    asked = {k: v for k, v in traffic.items() if v}
    problems = []
    if live != asked:
        problems.append(f"traffic is {live}, not {asked}")
    if {k: v for k, v in info.mirror_traffic.items() if v} != {k: v for k, v in mirror.items() if v}:
        problems.append(f"mirror traffic is {info.mirror_traffic}, not {mirror}")
    for slot, model in models.items():
        serving = backend.endpoints.get_deployment(endpoint, slot).model
        if serving and serving != model:
            problems.append(f"deployment {slot} serves {serving}, not {model}")
    if problems:
        raise EndpointError(f"endpoint {endpoint}: what is live is not what was asked: {'; '.join(problems)}")
