"""A rollout window is judged on the requests of its first ``window_s - metrics_lag_s`` seconds: a policy whose
window is no longer than the backend's metrics lag is refused before anything deploys (the soak found rollouts
promoted on empty windows: 2 s windows on the local backend, whose counts arrive 2 s late). What is judged is
the window less the lag, in whole metric periods: a window must be at least twice the lag."""

from __future__ import annotations

import pytest

from mlrunway.errors import SpecError
from mlrunway.production.rollout import RolloutPolicy


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
    from mlrunway.production.rollout import judge

    def served(requests: int) -> DeploymentMetrics:
        return DeploymentMetrics(deployment="green", start=0, end=30, requests=requests, errors=0, p99_ms=5.0)

    champion = served(100)
    assert judge(served(19), champion, RolloutPolicy()).short
    assert not judge(served(19), champion, RolloutPolicy()).ok
    assert judge(served(20), champion, RolloutPolicy()).ok
    empty = judge(served(0), champion, RolloutPolicy(min_requests=0))
    assert empty.ok and not empty.short and "promoted without live evidence" in empty.reason
