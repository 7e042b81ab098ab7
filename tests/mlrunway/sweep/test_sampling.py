"""What the sampler draws: each expression's distribution against Azure ML's documented semantics (a
Kolmogorov–Smirnov test for continuous ones, chi-square over the support for discrete ones, scipy's), every
pair of hyperparameters and consecutive trials independent, reproducible from the seed; and the version 1
sampler, kept for sweeps that started with it, caught drawing one line of the space."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from mlrunway.specs import (
    Choice,
    CommandJobSpec,
    LogNormal,
    LogUniform,
    Normal,
    Objective,
    QLogNormal,
    QLogUniform,
    QNormal,
    QUniform,
    Randint,
    SweepLimits,
    SweepSpec,
    Uniform,
)
from mlrunway.sweep.sampling import sample, trial_params

SPACE = {
    "a": Choice(values=[1, 2, 3]), "b": Uniform(min_value=-1, max_value=1), "c": LogUniform(min_value=-5, max_value=-1),
    "d": QUniform(min_value=0, max_value=100, q=5), "e": QLogUniform(min_value=0, max_value=4, q=2),
    "f": Normal(mu=0, sigma=1), "g": LogNormal(mu=0, sigma=1), "h": Randint(upper=4),
    "i": QNormal(mu=10, sigma=3, q=2), "j": QLogNormal(mu=1, sigma=0.5, q=1),
}
N = 4096  # draws per test; a power of 2 keeps Sobol's balance
ALPHA = 1e-4  # per test: about 150 tests here, so a correct sampler fails one of them with odds near 1.5%
CONTINUOUS = {  # name -> (transform applied to the values, the distribution the result must follow)
    "b": (lambda x: x, stats.uniform(-1, 2)),
    "c": (np.log, stats.uniform(-5, 4)),  # bounds in log space, as on Azure
    "f": (lambda x: x, stats.norm(0, 1)),
    "g": (np.log, stats.norm(0, 1)),
}
DISCRETE = {  # name -> (the support's step, the cdf of what is rounded; None: each value equally likely)
    "a": (None, None), "h": (None, None),
    "d": (5, stats.uniform(0, 100).cdf),  # round(uniform(0, 100) / 5) * 5
    "e": (2, lambda x: stats.uniform(0, 4).cdf(np.log(np.maximum(x, 1e-300)))),  # round(exp(uniform(0, 4)) / 2) * 2
    "i": (2, stats.norm(10, 3).cdf),  # round(normal(10, 3) / 2) * 2
    "j": (1, stats.lognorm(s=0.5, scale=math.e).cdf),  # round(exp(normal(1, 0.5)) / 1) * 1
}
SUPPORT = {"a": [1, 2, 3], "h": [0, 1, 2, 3]}


def columns(rule: str, seed: int = 11, version: int = 2, base: float = math.e) -> dict[str, np.ndarray]:
    points = sample(SPACE, seed=seed, count=N, rule=rule, version=version, base=base)
    return {name: np.array([p[name] for p in points], dtype=float) for name in SPACE}


def chi_square_p(values: np.ndarray, name: str) -> float:
    """Observed counts over the support against the expression's mass there; the tails pooled to 5 expected."""
    step, cdf = DISCRETE[name]
    if step is None:
        support = SUPPORT[name]
        assert set(np.unique(values)) <= set(support), f"{name}: values outside {support}"
        observed = [np.sum(values == v) for v in support]
        return float(stats.chisquare(observed, [len(values) / len(support)] * len(support)).pvalue)
    steps = values / step
    assert np.allclose(steps, np.round(steps)), f"{name}: values are not multiples of {step}"
    grid = np.arange(values.min(), values.max() + step / 2, step)
    edges = np.concatenate([[-np.inf], grid[:-1] + step / 2, [np.inf]])  # everything below/above goes to the ends
    mass = np.diff([cdf(e) if np.isfinite(e) else (0.0 if e < 0 else 1.0) for e in edges])
    observed = np.array([np.sum(np.isclose(values, v)) for v in grid], dtype=float)
    expected = mass * len(values)
    bins: list[list[float]] = []  # pool neighbours until each bin expects at least 5
    for o, e in zip(observed, expected, strict=True):
        if bins and bins[-1][1] < 5:
            bins[-1][0] += o
            bins[-1][1] += e
        else:
            bins.append([o, e])
    if len(bins) > 1 and bins[-1][1] < 5:
        last = bins.pop()
        bins[-1] = [bins[-1][0] + last[0], bins[-1][1] + last[1]]
    obs, exp = np.array(bins).T
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def rank_bins(values: np.ndarray, k: int = 4) -> np.ndarray:
    return np.minimum((stats.rankdata(values) - 1) * k // len(values), k - 1).astype(int)


def dependent_pairs(cols: dict[str, np.ndarray]) -> list[str]:
    """Every pair whose rank correlation or binned chi-square rejects independence at ALPHA."""
    found = []
    for x, y in itertools.combinations(sorted(cols), 2):
        rho = stats.spearmanr(cols[x], cols[y])
        table = np.zeros((4, 4))
        np.add.at(table, (rank_bins(cols[x]), rank_bins(cols[y])), 1)
        table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
        chi = stats.chi2_contingency(table).pvalue if min(table.shape) > 1 else 1.0
        if rho.pvalue < ALPHA or chi < ALPHA:
            found.append(f"{x}~{y} (rho {rho.statistic:+.3f}, chi-square p {chi:.1e})")
    return found


@pytest.fixture(scope="module", params=["random", "sobol"])
def drawn(request) -> tuple[str, dict[str, np.ndarray]]:
    return request.param, columns(request.param)


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_each_continuous_expression_follows_its_distribution(drawn, name):
    rule, cols = drawn
    transform, dist = CONTINUOUS[name]
    result = stats.kstest(transform(cols[name]), dist.cdf)
    assert result.pvalue > ALPHA, f"{rule} {SPACE[name]}: KS statistic {result.statistic:.4f}, p {result.pvalue:.1e}"


@pytest.mark.parametrize("name", sorted(DISCRETE))
def test_each_discrete_expression_puts_its_mass_where_azure_says(drawn, name):
    rule, cols = drawn
    p = chi_square_p(cols[name], name)
    assert p > ALPHA, f"{rule} {SPACE[name]}: chi-square p {p:.1e}"


def test_every_pair_of_hyperparameters_is_independent(drawn):
    rule, cols = drawn
    assert dependent_pairs(cols) == [], rule


def test_consecutive_trials_are_independent():
    cols = columns("random")
    for name, values in cols.items():
        rho = stats.spearmanr(values[:-1], values[1:])
        assert rho.pvalue > ALPHA, f"{name}: trial i and i+1 correlate at {rho.statistic:+.3f}"


def test_the_version_1_sampler_kept_for_resumed_sweeps_draws_one_line_and_the_checks_catch_it():
    """Before 2026-11 every hyperparameter of a trial took its generator's first draw: the tests above fail on it."""
    points = sample({k: SPACE[k] for k in CONTINUOUS}, seed=11, count=N, version=1)  # v1 had no q-normals
    old = {name: np.array([p[name] for p in points]) for name in CONTINUOUS}
    assert stats.spearmanr(old["b"], old["c"]).statistic > 0.999  # uniform and loguniform rise together
    assert len(dependent_pairs({k: old[k] for k in CONTINUOUS})) == 6  # all pairs of the four continuous ones


def test_sobol_covers_the_cube_more_evenly_than_random_draws():
    from scipy.stats import qmc

    def discrepancy(rule: str) -> float:
        cols = columns(rule)
        cube = np.column_stack([stats.uniform(-1, 2).cdf(cols["b"]), stats.uniform(-5, 4).cdf(np.log(cols["c"])),
                                stats.norm().cdf(cols["f"])])
        return float(qmc.discrepancy(cube[:256]))

    assert discrepancy("sobol") < discrepancy("random") / 3


def test_sobol_is_reproducible_from_the_seed_and_a_trials_point_does_not_depend_on_the_budget():
    space = {"x": Uniform(min_value=0, max_value=1), "y": Choice(values=list(range(10)))}
    assert sample(space, seed=3, count=7, rule="sobol") == sample(space, seed=3, count=100, rule="sobol")[:7]
    assert sample(space, seed=3, count=8, rule="sobol") != sample(space, seed=4, count=8, rule="sobol")


def test_logbase_draws_log_expressions_in_that_base():
    cols = columns("random", base=10)
    assert stats.kstest(np.log10(cols["c"]), stats.uniform(-5, 4).cdf).pvalue > ALPHA
    assert stats.kstest(np.log10(cols["g"]), stats.norm(0, 1).cdf).pvalue > ALPHA
    assert np.array_equal(cols["b"], columns("random")["b"])  # only log expressions change


def test_a_trials_values_do_not_depend_on_the_order_the_space_was_written_in():
    forward = sample(SPACE, seed=5, count=20)
    backward = sample(dict(reversed(list(SPACE.items()))), seed=5, count=20)
    assert forward == backward


def spec(sampling="random", seed=7, total=50, space=SPACE) -> SweepSpec:
    command = "python t.py " + " ".join(f"--{n} ${{{{inputs.{n}}}}}" for n in space)
    trial = CommandJobSpec(code=".", command=command, inputs={n: 0 for n in space})
    return SweepSpec(trial=trial, search_space=space, objective=Objective(primary_metric="m"),
                     sampling_algorithm=sampling, seed=seed, limits=SweepLimits(max_total_trials=total))


def test_random_sampling_is_reproducible_from_the_seed():
    assert trial_params(spec(seed=7)) == trial_params(spec(seed=7))
    assert trial_params(spec(seed=7)) != trial_params(spec(seed=8))


def test_a_trials_values_do_not_depend_on_the_number_of_trials():
    assert trial_params(spec(total=5)) == trial_params(spec(total=50))[:5]


def test_random_values_respect_each_expressions_semantics():
    for p in trial_params(spec(total=200)):
        assert p["a"] in (1, 2, 3)
        assert -1 <= p["b"] <= 1
        assert math.exp(-5) <= p["c"] <= math.exp(-1)  # bounds are in log space, as on Azure
        assert p["d"] % 5 == 0 and 0 <= p["d"] <= 100
        assert p["e"] % 2 == 0
        assert p["g"] > 0
        assert p["h"] in range(4)
        assert p["i"] % 2 == 0 and p["j"] >= 0


def test_grid_enumerates_choices_in_order_up_to_max_total_trials():
    space = {"x": Choice(values=[1, 2]), "y": Choice(values=["a", "b", "c"])}
    assert trial_params(spec("grid", space=space, total=4)) == [
        {"x": 1, "y": "a"}, {"x": 1, "y": "b"}, {"x": 1, "y": "c"}, {"x": 2, "y": "a"}]
    assert len(trial_params(spec("grid", space=space, total=100))) == 6
