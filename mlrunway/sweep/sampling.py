"""Draw trial hyperparameters from a search space, reproducibly from a seed, with Azure ML's semantics.

A trial's point is a vector ``u`` in the unit cube, one coordinate per hyperparameter in sorted name order,
each mapped through its expression's inverse distribution (:func:`value`). ``u`` comes from one generator
seeded by ``(seed, trial index)`` (rule ``random``: the trial's hyperparameters are independent of each other
and of other trials, and a trial's values do not depend on how many trials ran before it), or is point
``index`` of a scrambled, seeded Sobol sequence (rule ``sobol``).

``SAMPLER_VERSION`` names these draws; a sweep records the version it started with and keeps it when resumed,
so an upgrade never changes the points of a sweep under way. Version 1 (before 2026-11) seeded a fresh
generator per hyperparameter with the same ``(seed, index)``: every hyperparameter of a trial took the same
first draw, and the sweep searched one line of the space. It is kept only for sweeps that started with it.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

from mlrunway.specs.search_space import (
    Choice,
    LogNormal,
    LogUniform,
    Normal,
    QLogNormal,
    QLogUniform,
    QNormal,
    QUniform,
    Randint,
    SearchExpression,
    Uniform,
    grid_values,
)
from mlrunway.specs.sweep import SweepSpec

__all__ = ["SAMPLER_VERSION", "new_seed", "sample", "trial_params", "value"]

SAMPLER_VERSION = 2
_NORMAL = NormalDist()
_TINY = 2.0**-53  # keeps the normal's inverse finite at u = 0


def value(expr: SearchExpression, u: float, base: float = math.e) -> Any:
    """The value of ``expr`` at quantile ``u`` in [0, 1), with Azure ML's semantics: Randint in [0, upper),
    log expressions' bounds in log space (``loguniform`` is base**uniform(min, max)), ``q`` expressions
    rounded to multiples of q (``qnormal`` is round(normal(mu, sigma) / q) * q)."""
    if isinstance(expr, Choice):
        return expr.values[min(int(u * len(expr.values)), len(expr.values) - 1)]
    if isinstance(expr, Randint):
        return min(int(u * expr.upper), expr.upper - 1)
    if isinstance(expr, (Uniform, LogUniform, QUniform, QLogUniform)):
        x = expr.min_value + u * (expr.max_value - expr.min_value)
    else:
        x = expr.mu + expr.sigma * _NORMAL.inv_cdf(min(max(u, _TINY), 1 - _TINY))
    if isinstance(expr, (LogUniform, QLogUniform, LogNormal, QLogNormal)):
        x = base**x
    if isinstance(expr, (QUniform, QLogUniform, QNormal, QLogNormal)):
        x = round(x / expr.q) * expr.q
    return x


def new_seed() -> int:
    """A seed for a sweep given none; the sweep records it, so a resumed sweep draws what it would have."""
    return random.SystemRandom().randrange(2**31)


def sample(space: Mapping[str, SearchExpression], *, seed: int, count: int, rule: str = "random",
           base: float = math.e, version: int = SAMPLER_VERSION) -> list[dict[str, Any]]:
    """The first ``count`` points of the space for ``seed``, in trial order."""
    names = sorted(space)
    if version == 1:
        # Version 1: each hyperparameter from a fresh generator with the same seed (one line of the space).
        return [{name: _v1_draw(expr, random.Random(f"{seed}:{index}")) for name, expr in space.items()}
                for index in range(count)]
    if rule == "sobol":
        from scipy.stats import qmc

        cube = qmc.Sobol(d=len(names), scramble=True, seed=seed).random_base2(max(0, math.ceil(math.log2(count))))
        units: Sequence[Sequence[float]] = cube[:count].tolist()
    else:
        units = []
        for index in range(count):
            rng = random.Random(f"v{SAMPLER_VERSION}:{seed}:{index}")  # no draw shared with version 1's
            units.append([rng.random() for _ in names])
    return [{name: value(space[name], u, base) for name, u in zip(names, point, strict=True)} for point in units]


def trial_params(sweep: SweepSpec, *, seed: int | None = None, version: int = SAMPLER_VERSION) -> list[dict[str, Any]]:
    """The hyperparameters of every trial the sweep may start, in order; ``seed`` (the one the sweep recorded)
    stands in for a sweep given none."""
    space: Mapping[str, SearchExpression] = sweep.search_space
    total = sweep.limits.max_total_trials
    sampling = sweep.sampling
    if sampling.type == "grid":
        names = list(space)
        grid = itertools.product(*(grid_values(f"sweep.search_space.{n}", space[n]) for n in names))
        return [dict(zip(names, values, strict=True)) for values in itertools.islice(grid, total)]
    if sampling.type != "random":
        raise ValueError(f"trial_params draws random and grid sweeps, not {sampling.type}")
    seed = sweep.seed if sweep.seed is not None else seed
    if seed is None:
        raise ValueError("a random sweep without a seed needs the one it recorded (new_seed())")
    return sample(space, seed=seed, count=total, rule=sampling.rule, base=sampling.base, version=version)


def _v1_draw(expr: SearchExpression, rng: random.Random) -> Any:
    if isinstance(expr, Choice):
        return expr.values[rng.randrange(len(expr.values))]
    if isinstance(expr, Uniform):
        return rng.uniform(expr.min_value, expr.max_value)
    if isinstance(expr, LogUniform):
        return math.exp(rng.uniform(expr.min_value, expr.max_value))
    if isinstance(expr, QUniform):
        return round(rng.uniform(expr.min_value, expr.max_value) / expr.q) * expr.q
    if isinstance(expr, QLogUniform):
        return round(math.exp(rng.uniform(expr.min_value, expr.max_value)) / expr.q) * expr.q
    if isinstance(expr, Normal):
        return rng.gauss(expr.mu, expr.sigma)
    if isinstance(expr, LogNormal):
        return rng.lognormvariate(expr.mu, expr.sigma)
    if isinstance(expr, Randint):
        return rng.randrange(expr.upper)
    raise TypeError(f"version 1 of the sampler has no {expr.type}")
