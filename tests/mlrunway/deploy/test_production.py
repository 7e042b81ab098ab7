"""The champion/challenger strategy's settings group: the deploy task's ``production`` object, read by the strategy
(the task passes it through), its errors in the words of the groups it holds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlrunway.backend.fake import FakeBackend
from mlrunway.deploy import APPROVAL_TIMEOUT_S, ProductionSettings, RolloutPolicy, strategy, window_watch
from mlrunway.errors import SpecError


def test_empty_settings_are_the_defaults_and_the_approval_waits_a_week():
    settings = ProductionSettings.read(None)
    assert settings.endpoint_name is None and settings.rollout == RolloutPolicy() and settings.evaluation is None
    assert settings.approval_timeout_s == APPROVAL_TIMEOUT_S == 7 * 24 * 3600.0 and settings.rollback_to is None
    assert ProductionSettings.read({"approval_timeout_s": 0, "rollback_to": ""}) == settings  # as 0.2.x read them


def test_the_strategy_reads_its_settings_the_rollout_window_defaulting_to_the_backends(tmp_path):
    backend = FakeBackend(tmp_path)
    backend.capabilities = replace(backend.capabilities, rollout_window_s=120.0)
    read = strategy("champion_challenger").settings(backend, {"endpoint_name": "digits-prod",
                                                              "rollout": {"steps": [100]}})
    assert read.endpoint_name == "digits-prod" and read.rollout.steps == (100,) and read.rollout.window_s == 120.0
    assert strategy("blue").settings(backend, {"rollout": {"steps": [100]}}) is None  # the per-run endpoint has none


@pytest.mark.parametrize(("given", "message"), [
    pytest.param({"rollout": {"steps": [50, 10]}}, r"^rollout\.steps: \[50, 10\] is not an ascending list",
                 id="rollout-words"),
    pytest.param({"min_improvement": -1}, r"^min_improvement: -1 is not a number >= 0", id="promotion-words"),
    pytest.param({"approval_timeout_s": "soon"}, r"^approval_timeout_s: 'soon' is not a number of seconds > 0",
                 id="approval-timeout"),
    pytest.param({"endpoint": "x"}, r"^deploy\.production\.endpoint: is not a production endpoint setting; use "
                                    r"endpoint_name, require_approval, min_improvement, evaluation, rollout, "
                                    r"rollback_to, approval_timeout_s$", id="unknown-key"),
])
def test_a_bad_setting_is_named_in_its_groups_words(given, message):
    with pytest.raises(SpecError, match=message):
        ProductionSettings.read(given)


def test_a_window_carries_the_strategys_state_opaquely_and_only_a_rollouts_is_watched():
    assert window_watch({"at": "watched"}) is None
    assert window_watch({"phase": "window", "rollout": {
        "endpoint": "e", "holder": "run", "model": "m:2", "slot": "green", "champion": None,
        "policy": {}}}).progress.slot == "green"
