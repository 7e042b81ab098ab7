"""Drift of what an endpoint sees (its captured rows) from a reference, per feature, in Azure ML's terms.

A **signal** compares one collection's rows (``model_inputs``: data drift; ``model_outputs``: prediction drift)
with reference rows of the same columns. Each feature is numerical (every value a number) or categorical, and is
measured by one metric of azure-ai-ml's ``DataDriftMetricThreshold``, computed as Azure's own monitoring components
compute it (Azure/azureml-assets, ``model_monitoring/components/src/data_drift_compute_metrics``), with scipy:

- numerical: ``normalized_wasserstein_distance`` (scipy's Wasserstein distance over the reference's standard
  deviation, at least 0.001; Azure's default, 0.1), ``jensen_shannon_distance`` (base 2, on a histogram whose bins
  span both samples), ``population_stability_index`` (the same bins, each count plus one),
  ``two_sample_kolmogorov_smirnov_test`` (its p-value);
- categorical: ``jensen_shannon_distance`` (base 2, over every category either side has; Azure's default, 0.1),
  ``population_stability_index`` (counts plus one), ``pearsons_chi_squared_test`` (its p-value, the reference's
  shares as the expected counts).

Why scipy rather than a drift library such as evidently: these are the computations Azure ML runs for the same
metric names, so a threshold means the same on both backends; evidently's defaults and tests differ, and it brings a
large dependency tree into the Airflow worker for what is a few scipy calls.

A distance past its threshold is not yet drift: between two samples of the same distribution it is rarely zero
(the Wasserstein distance of 200 rows to 1,000 of the same normal exceeds 0.1 in about a third of draws). So a
distance **drifts** only when it passes its threshold *and* a permutation test says it is not sampling noise: the
share of ``permutations`` random re-splits of the pooled rows whose distance reaches the observed one is below
``alpha`` divided by the number of features measured (Bonferroni: ``alpha`` bounds the chance that any feature of
a signal raises a false alarm); at least ``2 / (alpha / features)`` re-splits are drawn, and the drawing stops as
soon as the share can no longer fall below that. A test metric (a p-value) drifts when it is below both its threshold and that
corrected ``alpha``. The threshold says how large a change is worth acting on; the test, that it is there.

Fewer than ``min_rows`` rows on either side is **no evidence**, never "no drift".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

import numpy as np
from pydantic import ConfigDict, Strict, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.settings import SettingsError, parse, setting

__all__ = ["DEFAULTS", "Drift", "DriftSettings", "FeatureDrift", "Signal", "measure", "signal"]

NUMERICAL = ("normalized_wasserstein_distance", "jensen_shannon_distance", "population_stability_index",
             "two_sample_kolmogorov_smirnov_test")
CATEGORICAL = ("jensen_shannon_distance", "population_stability_index", "pearsons_chi_squared_test")
TESTS = ("two_sample_kolmogorov_smirnov_test", "pearsons_chi_squared_test")  # p-values: drift below the threshold
DEFAULTS = {"numerical": ("normalized_wasserstein_distance", 0.1), "categorical": ("jensen_shannon_distance", 0.1)}


def _one_metric(kind: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The form's schema of ``metric_thresholds.<kind>``: one of ``allowed`` and its threshold."""
    return {"type": ["null", "object"], "maxProperties": 1, "propertyNames": {"enum": list(allowed)},
            "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
            "description": f"One {kind} metric and its threshold."}


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class Drift:
    """The ``drift`` field as a user writes it, in azure-ai-ml's words, declared once (:mod:`mlrunway.settings`):
    its validation, the monitor DAG's ``drift`` Param and the monitor's check all come from here."""

    metric_thresholds: dict[str, Any] | None = setting(
        None, description="Per kind of feature (numerical, categorical), one metric and its threshold; empty: "
                          "Azure's defaults.",
        problem="has {value!r}",
        fix='give {"numerical": {<metric>: <threshold>}, "categorical": {<metric>: <threshold>}}',
        schema={"properties": {"numerical": _one_metric("numerical", NUMERICAL),
                               "categorical": _one_metric("categorical", CATEGORICAL)},
                "additionalProperties": False})
    ignore: tuple[Annotated[str, Strict()], ...] = setting(
        ("correlationid",), description="The columns that are not features.",
        problem="{value!r} is not a list of column names", fix='pass e.g. ["correlationid"]')
    min_rows: Annotated[int, Strict()] = setting(
        100, ge=10, description="The rows either side needs: fewer is no evidence, never no drift.",
        problem="{value!r} is not a whole number >= 10", fix="pass e.g. 100")
    alpha: Annotated[float, Strict()] = setting(
        0.01, gt=0, lt=0.5, description="The permutation test's error rate over a signal's features.",
        problem="{value!r} is not an error rate in (0, 0.5)", fix="pass e.g. 0.01")
    permutations: Annotated[int, Strict()] = setting(
        500, ge=100, le=100_000, description="The permutation test's re-splits at most.",
        problem="{value!r} is not a whole number from 100 to 100,000", fix="pass e.g. 500")

    @model_validator(mode="after")
    def _known_kinds(self) -> Drift:
        extra = sorted(set(self.metric_thresholds or {}) - {"numerical", "categorical"})
        if extra:
            raise SettingsError("metric_thresholds", f"has {self.metric_thresholds!r}",
                                'give {"numerical": {<metric>: <threshold>}, "categorical": {<metric>: '
                                f'<threshold>}}}}, not {extra[0]}')
        return self


@dataclass(frozen=True)
class DriftSettings:
    """A signal's metric and threshold per kind of feature (``metric_thresholds`` in azure-ai-ml's words), the
    columns that are not features (``ignore``), the evidence it needs and the test's error rate."""

    numerical: tuple[str, float] = DEFAULTS["numerical"]
    categorical: tuple[str, float] = DEFAULTS["categorical"]
    ignore: tuple[str, ...] = ("correlationid",)
    min_rows: int = 100
    alpha: float = 0.01
    permutations: int = 500

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None, field_name: str = "drift") -> DriftSettings:
        """``{"metric_thresholds": {"numerical": {"normalized_wasserstein_distance": 0.1}, "categorical":
        {"jensen_shannon_distance": 0.1}}, "ignore": ["correlationid"], "min_rows": 100, "alpha": 0.01}``, as
        :class:`Drift` declares it."""
        drift = parse(Drift, value, field_name, noun="drift")
        thresholds = drift.metric_thresholds or {}
        chosen = {kind: _metric(f"{field_name}.metric_thresholds.{kind}", thresholds.get(kind), allowed)
                  for kind, allowed in (("numerical", NUMERICAL), ("categorical", CATEGORICAL))}
        return cls(chosen["numerical"], chosen["categorical"], drift.ignore, drift.min_rows, drift.alpha,
                   drift.permutations)

    def to_dict(self) -> dict[str, Any]:
        return {"metric_thresholds": {"numerical": dict([self.numerical]), "categorical": dict([self.categorical])},
                "ignore": list(self.ignore), "min_rows": self.min_rows, "alpha": self.alpha,
                "permutations": self.permutations}


def _metric(field_name: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, float]:
    default = DEFAULTS["numerical" if allowed is NUMERICAL else "categorical"]
    if value is None:
        return default
    if not isinstance(value, Mapping) or len(value) != 1:
        raise check.fail(field_name, f"{value!r} is not one metric and its threshold",
                         f'pass e.g. {{"{default[0]}": {default[1]}}}')
    ((name, threshold),) = value.items()
    check.one_of(field_name, name, allowed)
    number = check.number(f"{field_name}.{name}", threshold)
    if number <= 0 or (name in TESTS and number >= 1):
        raise check.fail(f"{field_name}.{name}", f"{threshold!r} is not a usable threshold",
                         "pass a p-value in (0, 1)" if name in TESTS else "pass a distance > 0")
    return name, number


@dataclass(frozen=True)
class FeatureDrift:
    """One feature's comparison. ``p_value``: the permutation test's (a test metric's own p-value for KS and
    chi-squared); ``reference``/``production``: a summary of each side (mean and quartiles, or category shares)."""

    feature: str
    kind: str
    metric: str
    value: float
    threshold: float
    p_value: float
    drifted: bool
    reference_rows: int
    production_rows: int
    reference: dict[str, float] = field(default_factory=dict)
    production: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Signal:
    """A collection's drift: ``evidence`` False when either side had fewer than ``min_rows`` rows (or no feature
    in common), with ``reason``; ``drifted`` only with evidence."""

    name: str
    collection: str
    features: tuple[FeatureDrift, ...]
    reference_rows: int
    production_rows: int
    evidence: bool
    reason: str = ""

    @property
    def drifted(self) -> bool:
        return self.evidence and any(f.drifted for f in self.features)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "collection": self.collection, "evidence": self.evidence, "reason": self.reason,
                "drifted": self.drifted, "reference_rows": self.reference_rows,
                "production_rows": self.production_rows, "features": [asdict(f) for f in self.features]}


def measure(metric: str, reference: Sequence[Any] | np.ndarray, production: Sequence[Any] | np.ndarray,
            kind: str) -> float:
    """The metric of ``production`` against ``reference`` (numbers for a numerical feature, anything hashable for a
    categorical one), as Azure's monitoring computes it."""
    from scipy.stats import ks_2samp, wasserstein_distance

    if kind == "numerical":
        ref, prod = np.asarray(reference, dtype=float), np.asarray(production, dtype=float)
        if metric == "normalized_wasserstein_distance":
            spread = float(np.std(ref, ddof=1)) if len(ref) > 1 else 0.0
            return float(wasserstein_distance(ref, prod)) / max(spread, 0.001)
        if metric == "two_sample_kolmogorov_smirnov_test":
            return float(ks_2samp(ref, prod).pvalue)
        edges = np.histogram_bin_edges(np.concatenate([ref, prod]), bins="sturges")
        ref_counts = np.histogram(ref, edges)[0].astype(float)
        prod_counts = np.histogram(prod, edges)[0].astype(float)
    else:
        categories = sorted(set(map(str, reference)) | set(map(str, production)))
        ref_seen, prod_seen = Counter(map(str, reference)), Counter(map(str, production))
        ref_counts = np.array([ref_seen[c] for c in categories], dtype=float)
        prod_counts = np.array([prod_seen[c] for c in categories], dtype=float)
    return _from_counts(metric, ref_counts, prod_counts, kind)


def _from_counts(metric: str, ref_counts: np.ndarray, prod_counts: np.ndarray, kind: str) -> float:
    """A count-based metric of two histograms (or category counts) on the same bins."""
    from scipy.spatial import distance
    from scipy.stats import chisquare

    if metric == "jensen_shannon_distance":
        value = float(distance.jensenshannon(ref_counts / ref_counts.sum(), prod_counts / prod_counts.sum(), base=2))
        return 0.0 if math.isnan(value) else value
    if metric == "population_stability_index":
        ref_share = (ref_counts + 1) / ref_counts.sum()
        prod_share = (prod_counts + 1) / prod_counts.sum()
        return float(np.sum((prod_share - ref_share) * np.log(prod_share / ref_share)))
    if metric == "pearsons_chi_squared_test" and kind == "categorical":
        if (ref_counts == 0).any():  # a category the reference never had: no expected count; surely different
            return 0.0
        return float(chisquare(prod_counts, ref_counts / ref_counts.sum() * prod_counts.sum()).pvalue)
    raise check.fail("drift.metric", f"{metric!r} is not a {kind} metric",
                     f"use one of {', '.join(NUMERICAL if kind == 'numerical' else CATEGORICAL)}")


def _permutation_p(metric: str, reference: list[Any], production: list[Any], kind: str, observed: float,
                   permutations: int, significant: float, rng: np.random.Generator) -> float:
    """The share of random re-splits of the pooled rows (sizes kept) whose distance reaches ``observed``, the
    observed split counted (never 0). Stops once the share can no longer fall below ``significant``."""
    size, reached = len(reference), 1
    if kind == "categorical":  # re-split category codes: counts by bincount, not a Counter of strings each time
        _, codes = np.unique(np.asarray([str(v) for v in (*reference, *production)]), return_inverse=True)
        total = np.bincount(codes).astype(float)

        def resplit() -> float:
            ref_counts = np.bincount(codes[rng.permutation(len(codes))[:size]], minlength=len(total)).astype(float)
            return _from_counts(metric, ref_counts, total - ref_counts, kind)
    else:
        pooled = np.asarray([*reference, *production], dtype=float)

        def resplit() -> float:
            order = rng.permutation(len(pooled))
            return measure(metric, pooled[order[:size]], pooled[order[size:]], kind)
    for done in range(1, permutations + 1):
        if resplit() >= observed:
            reached += 1
            if reached > significant * (permutations + 1):  # not significant, however the rest fall
                return reached / (done + 1)
    return reached / (permutations + 1)


def _summary(values: list[Any], kind: str) -> dict[str, float]:
    if kind == "numerical":
        q1, median, q3 = np.quantile(np.asarray(values, dtype=float), [0.25, 0.5, 0.75])
        return {"mean": round(float(np.mean(values)), 6), "q1": round(float(q1), 6),
                "median": round(float(median), 6), "q3": round(float(q3), 6)}
    counts = Counter(map(str, values))
    return {k: round(v / len(values), 6) for k, v in counts.most_common()}


def _columns(rows: Sequence[Mapping[str, Any]], ignore: tuple[str, ...]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {}
    for row in rows:
        for name, value in row.items():
            if name not in ignore and value is not None and not (isinstance(value, float) and math.isnan(value)):
                columns.setdefault(name, []).append(value)
    return columns


def _kind(values: list[Any]) -> str:
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return "numerical" if numeric else "categorical"


def signal(name: str, collection: str, reference: Sequence[Mapping[str, Any]], production: Sequence[Mapping[str, Any]],
           settings: DriftSettings, seed: int = 0) -> Signal:
    """Compare ``production`` rows with ``reference`` rows, feature by feature (the columns both have, less
    ``settings.ignore``; a feature's kind is the reference's)."""
    ref_columns, prod_columns = _columns(reference, settings.ignore), _columns(production, settings.ignore)
    common = [c for c in ref_columns if c in prod_columns]
    short = min(len(reference), len(production))
    if short < settings.min_rows or not common:
        reason = (f"{len(production)} production and {len(reference)} reference rows; {settings.min_rows} "
                  "needed on each side" if short < settings.min_rows else
                  f"no column in common (reference {sorted(ref_columns)}, production {sorted(prod_columns)})")
        return Signal(name, collection, (), len(reference), len(production), False, reason)
    rng = np.random.default_rng(seed)
    corrected = settings.alpha / len(common)
    features = []
    for column in common:
        kind = _kind(ref_columns[column])
        values = prod_columns[column]
        if kind == "numerical" and _kind(values) != "numerical":  # the script now logs text where it logged numbers
            kind = "categorical"
        metric, threshold = settings.numerical if kind == "numerical" else settings.categorical
        value = measure(metric, ref_columns[column], values, kind)
        if metric in TESTS:
            p_value = value
            drifted = value < threshold and value < corrected
        else:
            # Enough re-splits that a p-value under the corrected alpha can be seen at all.
            permutations = max(settings.permutations, math.ceil(2 / corrected))
            p_value = (_permutation_p(metric, ref_columns[column], values, kind, value, permutations, corrected, rng)
                       if value > threshold else 1.0)
            drifted = value > threshold and p_value < corrected
        features.append(FeatureDrift(column, kind, metric, round(value, 6), threshold, round(p_value, 6), drifted,
                                     len(ref_columns[column]), len(values), _summary(ref_columns[column], kind),
                                     _summary(values, kind)))
    return Signal(name, collection, tuple(features), len(reference), len(production), True)
