from __future__ import annotations

import math

from mlrunway.specs import (
    Choice,
    CommandJobSpec,
    LogNormal,
    LogUniform,
    Normal,
    Objective,
    QLogUniform,
    QUniform,
    Randint,
    SweepLimits,
    SweepSpec,
    Uniform,
)
from mlrunway.sweep.sampling import trial_params

SPACE = {
    "a": Choice(values=[1, 2, 3]), "b": Uniform(min_value=-1, max_value=1), "c": LogUniform(min_value=-5, max_value=-1),
    "d": QUniform(min_value=0, max_value=100, q=5), "e": QLogUniform(min_value=0, max_value=4, q=2),
    "f": Normal(mu=0, sigma=1), "g": LogNormal(mu=0, sigma=1), "h": Randint(upper=4),
}


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


def test_grid_enumerates_choices_in_order_up_to_max_total_trials():
    space = {"x": Choice(values=[1, 2]), "y": Choice(values=["a", "b", "c"])}
    assert trial_params(spec("grid", space=space, total=4)) == [
        {"x": 1, "y": "a"}, {"x": 1, "y": "b"}, {"x": 1, "y": "c"}, {"x": 2, "y": "a"}]
    assert len(trial_params(spec("grid", space=space, total=100))) == 6
