"""The gate's paired comparison: McNemar's exact test for accuracy and a paired bootstrap for any other metric,
checked against scipy's own binomial test and Clopper-Pearson interval, and against what chance does (seeded
simulations: equal models are rarely promoted, a clearly better one usually is)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mlrunway.deploy import gate
from mlrunway.deploy.gate import Comparison, EvaluationSet, GateSettings
from mlrunway.errors import SpecError


def pairs(b: int, c: int, both_right: int = 150, both_wrong: int = 10) -> tuple[list[bool], list[bool]]:
    """Champion and challenger hits with ``b`` items only the challenger got right and ``c`` only the champion."""
    champion = [False] * b + [True] * c + [True] * both_right + [False] * both_wrong
    challenger = [True] * b + [False] * c + [True] * both_right + [False] * both_wrong
    return champion, challenger


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 0), (3, 0), (5, 1), (9, 2), (12, 8), (20, 5), (2, 9), (40, 25)])
def test_mcnemar_matches_scipys_exact_binomial_test_and_clopper_pearson_bound(b, c):
    champion, challenger = pairs(b, c)
    result = gate.mcnemar(champion, challenger, confidence=0.95)
    n, m = len(champion), b + c
    assert result.discordant == (b, c) and result.samples == n
    assert result.improvement == pytest.approx((b - c) / n)
    if m:
        reference = stats.binomtest(b, m, 0.5, alternative="greater")
        assert result.p_value == pytest.approx(reference.pvalue)
        # A one-sided 95% bound is the lower end of the two-sided 90% exact (Clopper-Pearson) interval.
        p_low = stats.binomtest(b, m, 0.5).proportion_ci(confidence_level=0.90, method="exact").low
        assert result.lower_bound == pytest.approx(m / n * (2 * p_low - 1), abs=1e-9)
        # The bound clears 0 exactly when the exact test rejects "no better" at 5%.
        assert (result.lower_bound > 0) == (reference.pvalue < 0.05)
    else:
        assert result.lower_bound == 0 and result.p_value == 1.0


def test_one_image_better_out_of_180_was_promoted_by_the_strict_rule_and_is_held_now():
    champion, challenger = pairs(2, 1, both_right=160, both_wrong=17)  # 180 images, +1 image
    comparison = gate.mcnemar(champion, challenger, 0.95)
    promote, verdict, figures = gate.decide(comparison, GateSettings())
    assert comparison.improvement > 0 and not promote and verdict == "not better beyond chance"
    assert "95% lower bound -" in figures and "2 items only the challenger got right, 1 only the champion" in figures
    promote, verdict, _ = gate.decide(gate.mcnemar(*pairs(14, 1, 160, 5), 0.95), GateSettings())
    assert promote and verdict == "better"
    promote, verdict, _ = gate.decide(gate.mcnemar(*pairs(14, 1, 160, 5), 0.95), GateSettings(min_improvement=0.05))
    assert not promote  # +7 points observed, but the bound does not clear 5 points


def test_identical_or_worse_answers_are_not_better_and_a_small_set_is_no_evidence():
    same = gate.mcnemar(*pairs(0, 0), 0.95)
    assert gate.decide(same, GateSettings())[:2] == (False, "not better")
    worse = gate.mcnemar(*pairs(1, 12), 0.95)
    assert gate.decide(worse, GateSettings())[:2] == (False, "not better")
    small = gate.mcnemar(*pairs(20, 0, both_right=30, both_wrong=0), 0.95)  # 50 items, every difference his
    promote, verdict, figures = gate.decide(small, GateSettings())
    assert (promote, verdict) == (False, "too little evidence") and "evaluation.min_samples=100" in figures
    assert gate.decide(small, GateSettings(min_samples=50))[:2] == (True, "better")


def simulate(n: int, d: float, effect: float, gates: int, seed: int) -> float:
    """The share of ``gates`` simulated gates that promote: ``n`` items, ``d`` of them discordant on average, the
    challenger ``effect`` better in accuracy (champion's accuracy 0.9)."""
    rng = np.random.default_rng(seed)
    p = [(d + effect) / 2, (d - effect) / 2, 0.9 - (d - effect) / 2]  # challenger only, champion only, both
    promoted = 0
    for _ in range(gates):
        kind = rng.choice(4, size=n, p=[*p, 1 - sum(p)])
        champion, challenger = list((kind == 1) | (kind == 2)), list((kind == 0) | (kind == 2))
        promoted += gate.decide(gate.mcnemar(champion, challenger, 0.95), GateSettings())[0]
    return promoted / gates


def test_seeded_simulated_gates_rarely_promote_an_equal_model_and_usually_a_clearly_better_one():
    """A quick version of bench/gate.py (which runs 2,000+ gates per case and records the bounds)."""
    assert simulate(360, 0.10, 0.0, 300, seed=1) <= 0.06
    assert simulate(360, 0.10, -0.02, 300, seed=2) <= 0.01
    assert simulate(360, 0.10, 0.05, 300, seed=3) >= 0.80


def regression_set(n: int = 200) -> EvaluationSet:
    expected = [float(x) for x in range(n)]

    def rmse(answers, wanted):
        return float(np.sqrt(np.mean([(a["y"] - e) ** 2 for a, e in zip(answers, wanted, strict=True)])))

    return EvaluationSet([{"x": x} for x in expected], expected, rmse, "rmse", "minimize", n)


def answers(n: int, noise: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"y": x + float(e)} for x, e in zip(range(n), rng.normal(0, noise, n), strict=True)]


def test_paired_bootstrap_promotes_a_clearly_better_regressor_and_not_an_equal_one_and_repeats_itself():
    evaluation, settings = regression_set(), GateSettings()
    champion = answers(200, 1.0, seed=1)
    better = gate.compare(evaluation, champion, answers(200, 0.5, seed=2), settings)
    assert better.method == "paired bootstrap" and better.goal == "minimize"
    assert better.improvement == pytest.approx(better.champion - better.challenger) and better.improvement > 0.3
    assert 0 < better.lower_bound < better.improvement and gate.decide(better, settings)[0]
    assert gate.compare(evaluation, champion, answers(200, 0.5, seed=2), settings) == better  # seeded: the same
    equal = gate.compare(evaluation, champion, answers(200, 1.0, seed=3), settings)
    assert equal.lower_bound < 0 and not gate.decide(equal, settings)[0]
    same = gate.compare(evaluation, champion, champion, settings)
    assert same.lower_bound == 0 and gate.decide(same, settings)[1] == "not better"


def test_paired_bootstraps_bound_agrees_with_the_normal_approximation_of_a_mean_difference():
    """For a metric that is a mean, the bootstrap's 5% quantile of the paired difference is close to the t bound."""
    rng = np.random.default_rng(7)
    n = 400
    expected = [0.0] * n
    champion = [{"v": float(v)} for v in rng.normal(1.0, 1.0, n)]
    challenger = [{"v": c["v"] + float(e)} for c, e in zip(champion, rng.normal(0.15, 0.5, n), strict=True)]
    evaluation = EvaluationSet([{}] * n, expected, lambda a, _e: float(np.mean([x["v"] for x in a])), "mean",
                               "maximize", n)
    result = gate.compare(evaluation, champion, challenger, GateSettings(resamples=4000))
    differences = np.array([h["v"] - c["v"] for c, h in zip(champion, challenger, strict=True)])
    t_bound = differences.mean() - stats.t.ppf(0.95, n - 1) * differences.std(ddof=1) / np.sqrt(n)
    assert result.lower_bound == pytest.approx(t_bound, abs=0.01)


@pytest.mark.parametrize(("spec", "field"), [
    ({"confidence": 1.0}, "evaluation.confidence"), ({"confidence": "high"}, "evaluation.confidence"),
    ({"min_samples": 0}, "evaluation.min_samples"), ({"resamples": 50}, "evaluation.resamples"),
    ({"confidance": 0.9}, "evaluation.confidance"),
])
def test_bad_gate_settings_name_the_field(spec, field):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        gate.names_set(spec)


def test_settings_alone_keep_the_classifiers_split_and_a_file_names_a_team_set():
    assert not gate.names_set({"confidence": 0.9, "min_samples": 300}) and not gate.names_set(None)
    assert gate.names_set({"file": "eval.jsonl", "metric": "metrics.py:rmse"})
    assert GateSettings.parse({"confidence": 0.9}, 0.01) == GateSettings(confidence=0.9, min_improvement=0.01)


def test_the_evidence_keeps_the_interval():
    comparison = gate.mcnemar(*pairs(14, 1), 0.95)
    data = comparison.to_dict()
    assert data["method"] == "mcnemar" and data["discordant"] == [14, 1] and data["lower_bound"] > 0
    assert isinstance(Comparison(**{**data, "discordant": (14, 1)}), Comparison)
