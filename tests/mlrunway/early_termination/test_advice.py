"""Other early-termination settings replayed on one sweep's curves: scored where the recorded values decide them,
unknown past a stop where they do not, and the setting it ran reproducing its live decisions."""

from __future__ import annotations

from mlrunway.early_termination import evaluate_in_order
from mlrunway.early_termination.advice import advise, candidates, replay
from mlrunway.early_termination.bandit import BanditPolicy
from mlrunway.early_termination.median import MedianStoppingPolicy

CURVES = {  # in start order
    "t0": [0.5, 0.7, 0.8, 0.9, 0.92, 0.93],
    "t1": [0.45, 0.65, 0.75, 0.85, 0.88, 0.9],
    "t2": [0.1, 0.2, 0.3, 0.35, 0.4, 0.45],
    "t3": [0.5, 0.65, 0.66, 0.66, 0.66, 0.66],
}
RAN = BanditPolicy(slack_factor=0.2, delay_evaluation=2)


def test_a_calibration_sweep_scores_every_setting_with_its_savings_and_best_kept():
    advice = advise(None, CURVES, {}, list(CURVES), "maximize", costs={t: 6.0 for t in CURVES})
    assert advice.calibration and advice.reproduced is None and advice.epochs_ran == 24 and advice.best_ran == 0.93
    assert all(row.unknown_after is None and row.epochs is not None for row in advice.rows)
    strict = next(r for r in advice.rows if r.policy == {"type": "bandit", "slack_factor": 0.05,
                                                         "evaluation_interval": 1, "delay_evaluation": 0})
    stops = evaluate_in_order(BanditPolicy(slack_factor=0.05), CURVES, "maximize")
    assert strict.stops == {t: s.interval for t, s in stops.items()} and strict.stops  # the controller's own rule
    assert strict.saved_epochs == sum(6 - s.interval for s in stops.values()) and strict.best == 0.93
    assert strict.saved_cost == sum(6.0 * (6 - s.interval) / 6 for s in stops.values())
    assert strict.change == ('early_termination={"type": "bandit", "slack_factor": 0.05, "evaluation_interval": 1, '
                             '"delay_evaluation": 0}')
    assert advice.rows == sorted(advice.rows, key=lambda r: (-r.best, -r.saved_epochs))  # best kept, then savings


def test_a_sweep_with_a_policy_scores_the_stricter_settings_and_says_where_the_others_are_unknown():
    live = {t: s.interval for t, s in evaluate_in_order(RAN, CURVES, "maximize").items()}
    assert live == {"t2": 2, "t3": 3}
    recorded = {t: (h[: live[t] + 1] if t in live else h) for t, h in CURVES.items()}  # one value past each stop
    advice = advise(RAN, recorded, live, ["t0", "t1"], "maximize", limit=100)
    ran = advice.rows[0]
    assert ran.ran and ran.stops == live and advice.reproduced is True and not advice.calibration
    assert ran.saved_epochs == 2  # the values logged past each stop, before the cancel landed
    lax = next(r for r in advice.rows if r.policy["type"] == "bandit" and r.policy["slack_factor"] == 0.3
               and r.policy["delay_evaluation"] == 5)
    assert lax.epochs is None and lax.unknown_after == 3  # it lets t2 run past its last recorded value
    assert any(r.saved_epochs and r.saved_epochs > ran.saved_epochs for r in advice.rows if not r.ran)
    assert {r.unknown_after for r in advice.rows} - {None}


def test_a_live_decision_the_replay_does_not_make_is_said():
    advice = advise(RAN, CURVES, {"t2": 2}, list(CURVES), "maximize")
    assert advice.reproduced is False


def test_unknown_is_the_first_stop_a_setting_cannot_reach():
    stops, unknown = replay(MedianStoppingPolicy(delay_evaluation=5), {"a": [1, 2, 3], "b": [1, 1]}, "maximize",
                            {"b": 2})
    assert unknown == 2 and stops == {}


def test_the_candidates_start_with_the_setting_it_ran_and_hold_each_once():
    listed = candidates(RAN)
    assert listed[0] == RAN and len(listed) == len(set(listed))
    assert {p.type for p in listed} == {"bandit", "median_stopping", "truncation_selection"}
