"""A rollout window is judged on the requests of its first ``window_s - metrics_lag_s`` seconds: a policy whose
window is no longer than the backend's metrics lag is refused before anything deploys (the soak found rollouts
promoted on empty windows: 2 s windows on the local backend, whose counts arrive 2 s late). What is judged is
the window less the lag, in whole metric periods: a window must be at least twice the lag."""

from __future__ import annotations

import pytest

from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.errors import SpecError


@pytest.mark.parametrize("field, rollout", [
    ("rollout.window_s", {"window_s": 3.9}),
    ("rollout.window_s", {"window_s": 0.5}),
    ("rollout.mirror_window_s", {"window_s": 5, "mirror_percent": 10, "mirror_window_s": 1}),
])
def test_a_window_no_longer_than_the_metrics_lag_is_refused_naming_the_field(field, rollout):
    with pytest.raises(SpecError) as refused:
        RolloutPolicy.parse(rollout, metrics_lag_s=2.0)
    assert field in str(refused.value) and "twice the backend's metrics lag" in str(refused.value) and "at least 4 s" in str(refused.value)


def test_windows_longer_than_the_lag_and_backends_without_lag_are_accepted():
    assert RolloutPolicy.parse({"window_s": 4}, metrics_lag_s=2.0).window_s == 4
    assert RolloutPolicy.parse({"window_s": 5, "mirror_window_s": 0}, metrics_lag_s=2.0).mirror_window_s == 0
    assert RolloutPolicy.parse({"window_s": 0}, metrics_lag_s=0.0).window_s == 0


def test_the_evidence_settings_default_to_20_requests_and_one_more_window_and_refuse_bad_values():
    policy = RolloutPolicy.parse({"window_s": 30})
    assert policy.min_requests == 20 and policy.max_extension_s is None and policy.extension_s == 30
    assert RolloutPolicy.parse({"window_s": 30, "max_extension_s": 90}).extension_s == 90
    assert RolloutPolicy.parse({"max_extension_s": None}).extension_s == RolloutPolicy().window_s
    for bad, field in (({"min_requests": 2.5}, "rollout.min_requests"), ({"min_requests": -1}, "rollout.min_requests"),
                       ({"max_extension_s": "long"}, "rollout.max_extension_s")):
        with pytest.raises(SpecError, match=field.replace(".", r"\.")):
            RolloutPolicy.parse(bad)


def test_the_judge_needs_min_requests_and_min_requests_0_passes_an_empty_window_saying_so():
    from mlrunway.backend.types import DeploymentMetrics
    from mlrunway.deploy.rollout import judge

    def served(requests: int) -> DeploymentMetrics:
        return DeploymentMetrics(deployment="green", start=0, end=30, requests=requests, errors=0, p99_ms=5.0)

    champion = served(100)
    assert judge(served(19), champion, RolloutPolicy()).short
    assert not judge(served(19), champion, RolloutPolicy()).ok
    assert judge(served(20), champion, RolloutPolicy()).ok
    empty = judge(served(0), champion, RolloutPolicy(min_requests=0))
    assert empty.ok and not empty.short and "promoted without live evidence" in empty.reason


def figures(deployment: str, requests: int, errors: int):
    from mlrunway.backend.types import DeploymentMetrics

    return DeploymentMetrics(deployment=deployment, start=0, end=10, requests=requests, errors=errors, p99_ms=5.0)


def test_the_watch_rolls_back_on_errors_too_unlikely_at_the_allowed_rate_and_never_on_one():
    from mlrunway.deploy.rollout import watch

    policy = RolloutPolicy()
    # P(X >= 2 | 6, 1%) = 1 - 0.99^6 - 6 (0.01) 0.99^5 = 0.00146 < 0.01
    assert "2 errors in 6 requests" in watch(figures("green", 6, 2), figures("blue", 54, 0), policy)
    assert watch(figures("green", 6, 1), figures("blue", 54, 0), policy) is None  # one error never suffices
    assert watch(figures("green", 60, 2), figures("blue", 540, 0), policy) is None  # P = 0.12 at 1%
    # A champion that fails 5% of requests allows the challenger 6%: 4 of 60 is within chance.
    assert watch(figures("green", 60, 4), figures("blue", 540, 27), policy) is None
    assert watch(figures("green", 60, 12), figures("blue", 540, 27), policy) is not None
    assert watch(figures("green", 6, 2), figures("blue", 54, 0), RolloutPolicy(watch_alpha=0.001)) is None


@pytest.mark.parametrize("value", [0, 0.5, -1])
def test_a_bad_watch_alpha_names_the_field(value):
    with pytest.raises(SpecError, match=r"rollout\.watch_alpha"):
        RolloutPolicy.parse({"watch_alpha": value})
