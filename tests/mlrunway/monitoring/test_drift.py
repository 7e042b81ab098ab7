"""Drift per feature: Azure ML's metrics against their definitions, the settings per field, and what the signal
decides on samples of the same distribution (false alarms) and of a shifted one (detections)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from mlrunway.errors import SpecError
from mlrunway.monitoring.drift import DriftSettings, measure, signal


def rows(rng: np.random.Generator, n: int, shift: float = 0.0, shares: list[float] | None = None) -> list[dict]:
    """Three numerical features and a 10-class label, as the example's score.py collects them."""
    labels = rng.choice(10, n, p=shares or [0.1] * 10)
    return [{"correlationid": f"r{i}", "mean": float(a), "std": float(b), "p90": float(c), "label": str(label)}
            for i, (a, b, c, label) in enumerate(zip(rng.normal(shift, 1, n), rng.normal(0, 1, n),
                                                     rng.gamma(2, 1, n), labels, strict=True))]


def test_the_metrics_are_azures_definitions():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 20_000), rng.normal(0.5, 1, 20_000)
    # Wasserstein-1 of two normals one sigma apart by 0.5 is 0.5; over the reference's sd
    assert measure("normalized_wasserstein_distance", a, b, "numerical") == pytest.approx(0.5, abs=0.03)
    assert measure("normalized_wasserstein_distance", [1.0] * 50, [1.0] * 50, "numerical") == 0.0  # sd 0: /0.001
    assert measure("jensen_shannon_distance", list("aabb"), list("abab"), "categorical") == 0.0
    assert measure("jensen_shannon_distance", list("aaaa"), list("bbbb"), "categorical") == pytest.approx(1.0)
    # PSI as azureml-assets computes it: (count + 1) / total on each side, summed (p - r) ln(p / r)
    ref, prod = ["x"] * 6 + ["y"] * 4, ["x"] * 2 + ["y"] * 8
    r, p = np.array([7, 5]) / 10, np.array([3, 9]) / 10
    assert measure("population_stability_index", ref, prod, "categorical") == pytest.approx(float(np.sum((p - r) * np.log(p / r))))
    assert measure("pearsons_chi_squared_test", ["x"] * 50 + ["y"] * 50, ["x"] * 90 + ["y"] * 10, "categorical") < 1e-9
    assert measure("pearsons_chi_squared_test", list("xy") * 40, list("xyz") * 10, "categorical") == 0.0  # new class
    assert measure("two_sample_kolmogorov_smirnov_test", a, b, "numerical") < 1e-9
    same = measure("two_sample_kolmogorov_smirnov_test", a[:500], a[500:1000], "numerical")
    assert 0 < same <= 1 and not math.isnan(measure("jensen_shannon_distance", a, b, "numerical"))


@pytest.mark.parametrize(("value", "field"), [
    ({"thresholds": {}}, "drift.thresholds"),
    ({"metric_thresholds": {"numeric": {}}}, "drift.metric_thresholds"),
    ({"metric_thresholds": {"numerical": {"chi_squared": 0.1}}}, "drift.metric_thresholds.numerical"),
    ({"metric_thresholds": {"categorical": {"jensen_shannon_distance": 0.1, "population_stability_index": 0.2}}},
     "drift.metric_thresholds.categorical"),
    ({"metric_thresholds": {"numerical": {"two_sample_kolmogorov_smirnov_test": 1.5}}},
     "drift.metric_thresholds.numerical.two_sample_kolmogorov_smirnov_test"),
    ({"metric_thresholds": {"numerical": {"normalized_wasserstein_distance": -1}}},
     "drift.metric_thresholds.numerical.normalized_wasserstein_distance"),
    ({"min_rows": 3}, "drift.min_rows"),
    ({"alpha": 0.7}, "drift.alpha"),
    ({"ignore": "correlationid"}, "drift.ignore"),
])
def test_bad_settings_name_their_field(value, field):
    with pytest.raises(SpecError, match=f"^{field}"):
        DriftSettings.parse(value)


def test_settings_default_to_azures_thresholds_and_round_trip():
    settings = DriftSettings.parse(None)
    assert (settings.numerical, settings.categorical) == (("normalized_wasserstein_distance", 0.1),
                                                          ("jensen_shannon_distance", 0.1))
    custom = DriftSettings.parse({"metric_thresholds": {"categorical": {"pearsons_chi_squared_test": 0.01}},
                                  "min_rows": 50})
    assert DriftSettings.parse(custom.to_dict()) == custom


def test_too_few_rows_is_no_evidence_never_no_drift():
    rng = np.random.default_rng(1)
    found = signal("data_drift", "model_inputs", rows(rng, 500), rows(rng, 40), DriftSettings())
    assert not found.evidence and not found.drifted and "40 production and 500 reference rows" in found.reason
    unrelated = signal("data_drift", "model_inputs", rows(rng, 500), [{"other": 1.0}] * 200, DriftSettings())
    assert not unrelated.evidence and "no column in common" in unrelated.reason


def test_same_distribution_rarely_alarms_where_the_threshold_alone_would_often():
    """100 checks of 200 production rows against 1,077 reference rows of the same distribution (the example's
    sizes: its training split and a few minutes of traffic). Azure's thresholds alone would alarm in a large share
    of them; with the permutation test, at most alpha (0.01) of them may, and 5 or more of 100 would say it does
    not hold (binomial test, p < 0.001)."""
    rng = np.random.default_rng(2)
    reference = rows(rng, 1077)
    settings = DriftSettings()
    alarms = threshold_only = 0
    for seed in range(100):
        found = signal("data_drift", "model_inputs", reference, rows(rng, 200), settings, seed=seed)
        alarms += found.drifted
        threshold_only += any(f.value > f.threshold for f in found.features)
    assert alarms <= 4, binomtest(alarms, 100, 0.01, alternative="greater")
    assert threshold_only >= 30  # why the test is there: the distance alone is often past 0.1 at these sizes


def test_a_shift_is_found_and_named():
    """Half a standard deviation on one feature, and a label mix moved to two classes: found in every one of 10
    checks, on the features that moved."""
    rng = np.random.default_rng(3)
    reference = rows(rng, 1077)
    skewed = [0.3, 0.3] + [0.05] * 8
    for seed in range(10):
        found = signal("data_drift", "model_inputs", reference, rows(rng, 200, shift=0.5, shares=skewed),
                       DriftSettings(), seed=seed)
        moved = {f.feature for f in found.features if f.drifted}
        assert {"mean", "label"} <= moved and not {"std", "p90"} & moved
    mean = next(f for f in found.features if f.feature == "mean")
    assert mean.production["mean"] - mean.reference["mean"] == pytest.approx(0.5, abs=0.25)
    assert found.to_dict()["drifted"] is True
