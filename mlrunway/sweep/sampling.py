"""Draw trial hyperparameters from a search space; random sampling is reproducible from a seed.

Trial ``i`` draws from its own generator seeded with ``(seed, i)``, so a trial's values do not depend on how
many trials ran before it or in which order.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping
from typing import Any

from mlrunway.specs.search_space import (
    Choice,
    LogNormal,
    LogUniform,
    Normal,
    QLogUniform,
    QUniform,
    Randint,
    SearchExpression,
    Uniform,
    grid_values,
)
from mlrunway.specs.sweep import SweepSpec


def draw(expr: SearchExpression, rng: random.Random) -> Any:
    """One value of ``expr``, with Azure ML's semantics (log bounds in log space, Randint in [0, upper))."""
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
    raise TypeError(f"unknown search expression {expr!r}")


def trial_params(sweep: SweepSpec) -> list[dict[str, Any]]:
    """The hyperparameters of every trial the sweep may start, in order."""
    space: Mapping[str, SearchExpression] = sweep.search_space
    total = sweep.limits.max_total_trials
    if sweep.sampling_algorithm == "grid":
        names = list(space)
        grid = itertools.product(*(grid_values(f"sweep.search_space.{n}", space[n]) for n in names))
        return [dict(zip(names, values, strict=True)) for values in itertools.islice(grid, total)]
    seed = sweep.seed if sweep.seed is not None else random.SystemRandom().randrange(2**31)
    return [
        {name: draw(expr, random.Random(f"{seed}:{index}")) for name, expr in space.items()}
        for index in range(total)
    ]
