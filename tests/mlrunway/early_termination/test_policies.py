from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlrunway.early_termination import evaluate, evaluation_points
from mlrunway.specs import BanditPolicy, MedianStoppingPolicy, TruncationSelectionPolicy


def bandit(**kwargs) -> BanditPolicy:
    return BanditPolicy(**{"evaluation_interval": 1, "delay_evaluation": 0, **kwargs})


# Azure ML's worked example: slack_factor 0.2, the best trial at 0.8: a trial must reach 0.8 / 1.2 = 0.6667.
@pytest.mark.parametrize(("value", "stopped"), [(0.66, True), (0.6667, False), (0.7, False), (0.8, False)])
def test_bandit_replays_documented_example(value, stopped):
    decisions = evaluate(bandit(slack_factor=0.2), {"best": [0.8], "other": [value]}, "maximize")
    assert ("other" in decisions) is stopped
    assert "best" not in decisions


def test_bandit_reports_interval_value_and_threshold():
    stop = evaluate(bandit(slack_factor=0.2), {"best": [0.8], "other": [0.5]}, "maximize")["other"]
    assert (stop.interval, stop.value) == (1, 0.5)
    assert stop.threshold == pytest.approx(0.8 / 1.2)
    assert "slack_factor 0.2" in stop.reason


@pytest.mark.parametrize(("value", "stopped"), [(0.69, True), (0.71, False)])
def test_bandit_slack_amount_maximize(value, stopped):
    assert ("other" in evaluate(bandit(slack_amount=0.1), {"best": [0.8], "other": [value]}, "maximize")) is stopped


@pytest.mark.parametrize(("value", "stopped"), [(0.31, True), (0.29, False)])
def test_bandit_slack_amount_minimize_mirrors(value, stopped):
    assert ("other" in evaluate(bandit(slack_amount=0.1), {"best": [0.2], "other": [value]}, "minimize")) is stopped


@pytest.mark.parametrize(("value", "stopped"), [(0.25, True), (0.23, False)])
def test_bandit_slack_factor_minimize_mirrors(value, stopped):
    # minimize: stop if Y > best * (1 + slack_factor) = 0.2 * 1.2 = 0.24
    assert ("other" in evaluate(bandit(slack_factor=0.2), {"best": [0.2], "other": [value]}, "minimize")) is stopped


def test_bandit_uses_each_trials_best_so_far_not_its_last_value():
    # "other" dips to 0.1 at interval 2 but its best so far (0.75) is within slack of 0.8.
    assert evaluate(bandit(slack_factor=0.2), {"best": [0.8, 0.8], "other": [0.75, 0.1]}, "maximize") == {}


def test_delay_evaluation_holds_the_policy_back():
    histories = {"best": [0.9] * 5, "bad": [0.1] * 5}
    stop = evaluate(bandit(slack_factor=0.1, delay_evaluation=3), histories, "maximize")["bad"]
    assert stop.interval == 3
    assert evaluate(bandit(slack_factor=0.1, delay_evaluation=6), histories, "maximize") == {}


def test_policy_applies_only_at_multiples_of_interval_at_or_after_delay():
    policy = bandit(slack_factor=0.1, evaluation_interval=3, delay_evaluation=4)
    assert list(evaluation_points(policy, 13)) == [6, 9, 12]
    stop = evaluate(policy, {"best": [0.9] * 7, "bad": [0.1] * 7}, "maximize")["bad"]
    assert stop.interval == 6


def test_trial_that_has_not_reached_an_interval_is_not_compared_there():
    # "late" has one value; at interval 2 only "early" and "best" are compared.
    decisions = evaluate(bandit(slack_factor=0.1, delay_evaluation=2), {"best": [0.9, 0.9], "late": [0.1]}, "maximize")
    assert decisions == {}


def test_stopped_trial_takes_no_part_in_later_intervals():
    # "mid" is stopped at 1 against "best"; at 2 "best" dips, yet "mid" is not compared (or re-stopped) again.
    decisions = evaluate(bandit(slack_amount=0.05), {"best": [0.9, 0.9], "mid": [0.5, 0.95]}, "maximize")
    assert decisions["mid"].interval == 1


def test_median_stopping_stops_below_median_of_running_averages():
    histories = {"a": [0.9, 0.9], "b": [0.8, 0.8], "c": [0.2, 0.3]}
    decisions = evaluate(MedianStoppingPolicy(evaluation_interval=1, delay_evaluation=1), histories, "maximize")
    assert list(decisions) == ["c"]
    assert decisions["c"].threshold == pytest.approx(0.8)


def test_median_stopping_minimize():
    histories = {"a": [0.1], "b": [0.2], "c": [0.9]}
    assert list(evaluate(MedianStoppingPolicy(), histories, "minimize")) == ["c"]


def test_truncation_cancels_lowest_percentage_at_each_evaluation():
    histories = {f"t{i}": [i / 10] for i in range(10)}
    decisions = evaluate(TruncationSelectionPolicy(truncation_percentage=20), histories, "maximize")
    assert sorted(decisions) == ["t0", "t1"]


def test_truncation_minimize_cancels_highest():
    histories = {f"t{i}": [i / 10] for i in range(5)}
    assert list(evaluate(TruncationSelectionPolicy(truncation_percentage=20), histories, "minimize")) == ["t4"]


def test_truncation_leaves_a_single_trial_alone():
    assert evaluate(TruncationSelectionPolicy(truncation_percentage=50), {"only": [0.1]}, "maximize") == {}


curves = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3),
    st.lists(st.floats(0.01, 1.0, allow_nan=False), min_size=1, max_size=8),
    min_size=1, max_size=6,
)
policies = st.one_of(
    st.builds(lambda f, i, d: bandit(slack_factor=f, evaluation_interval=i, delay_evaluation=d),
              st.floats(0.01, 1.0), st.integers(1, 3), st.integers(0, 4)),
    st.builds(lambda a, i, d: bandit(slack_amount=a, evaluation_interval=i, delay_evaluation=d),
              st.floats(0.01, 0.5), st.integers(1, 3), st.integers(0, 4)),
)


@given(curves, policies)
def test_bandit_never_stops_the_leader_at_the_interval_it_is_judged(histories, policy):
    for name, stop in evaluate(policy, histories, "maximize").items():
        assert stop.value < stop.threshold
        assert stop.interval in set(evaluation_points(policy, len(histories[name])))


@given(curves, st.floats(0.01, 0.5), st.integers(0, 4))
def test_bandit_slack_amount_minimize_is_the_mirror_of_maximize(histories, amount, delay):
    policy = bandit(slack_amount=amount, delay_evaluation=delay)
    flipped = {name: [-v for v in values] for name, values in histories.items()}
    up = {n: s.interval for n, s in evaluate(policy, histories, "maximize").items()}
    down = {n: s.interval for n, s in evaluate(policy, flipped, "minimize").items()}
    assert up == down


@given(curves, policies, st.sampled_from(["maximize", "minimize"]))
def test_bandit_stops_only_trials_strictly_worse_than_an_active_rival(histories, policy, goal):
    decisions = evaluate(policy, histories, goal)
    pick = max if goal == "maximize" else min
    for stop in decisions.values():
        k = stop.interval
        rivals = [pick(h[:k]) for t, h in histories.items()
                  if len(h) >= k and (t not in decisions or decisions[t].interval >= k)]
        best = pick(rivals)
        assert stop.value != best and pick(stop.value, best) == best


def test_median_counts_trials_stopped_earlier_in_the_median():
    # at interval 2 the median of running averages over a, b and c (c stopped at 1) is 0.8; b is not below it.
    histories = {"a": [0.9, 0.9], "b": [0.8, 0.8], "c": [0.2]}
    decisions = evaluate(MedianStoppingPolicy(), histories, "maximize")
    assert list(decisions) == ["c"]
