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
