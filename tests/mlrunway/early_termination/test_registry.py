"""A new policy is one module and one registry line. This file is the module (a floor: stop a trial whose best
value is worse than a fixed level) and its fixture the line; what takes a policy (a sweep's dict, the operators'
vocabulary, the decisions, the local controller) then takes it, and Azure ML, which has no such policy, refuses
it before any job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pytest

from mlrunway import check
from mlrunway.early_termination import POLICIES, Goal, Policy, Termination, decide, evaluate, evaluate_in_order
from mlrunway.early_termination._common import best_so_far, check_intervals, worse
from mlrunway.errors import SpecError
from mlrunway.specs import SweepSpec, vocabulary
from tests.mlrunway.sweep.test_controller import CURVES, run, sweep


@dataclass(frozen=True, kw_only=True)
class FloorPolicy:
    """Stop a trial whose best value is worse than ``floor``."""

    type: Literal["floor"] = "floor"
    floor: float
    evaluation_interval: int = 1
    delay_evaluation: int = 0

    def __post_init__(self) -> None:
        check_intervals("floor", self.evaluation_interval, self.delay_evaluation)
        check.number("floor.floor", self.floor)


def decide_at(policy: FloorPolicy, values: Mapping[str, Sequence[float]], goal: Goal, interval: int,
              everyone: Mapping[str, Sequence[float]]) -> dict[str, Termination]:
    ys = {trial: best_so_far(v, goal) for trial, v in values.items()}
    return {trial: Termination(trial, interval, y, policy.floor, f"floor: best {y:.4g} worse than {policy.floor}")
            for trial, y in ys.items() if worse(y, policy.floor, goal)}


@pytest.fixture
def floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(POLICIES, "floor", Policy(FloorPolicy, decide_at))


POLICY = FloorPolicy(floor=0.4, delay_evaluation=2)
HISTORIES = {"good": [0.1, 0.5, 0.9], "poor": [0.2, 0.3, 0.35], "short": [0.1]}


@pytest.mark.usefixtures("floor")
def test_a_sweeps_dict_names_it_by_type_both_ways():
    record = sweep(["good"], policy=POLICY).to_dict()
    assert record["early_termination"] == {"type": "floor", "floor": 0.4, "evaluation_interval": 1,
                                           "delay_evaluation": 2}
    assert SweepSpec.from_dict(record).early_termination == POLICY


@pytest.mark.usefixtures("floor")
def test_the_operators_vocabulary_casts_its_arguments_from_its_fields_and_names_bad_ones():
    assert vocabulary.early_termination({"type": "floor", "floor": "0.4", "delay_evaluation": "2"}) == POLICY
    with pytest.raises(SpecError, match=r"^early_termination.ceiling: is not an argument of floor; use \['delay_"):
        vocabulary.early_termination({"type": "floor", "floor": 0.4, "ceiling": 1})
    with pytest.raises(SpecError, match=r"^early_termination.floor: nan is not a finite number"):
        vocabulary.early_termination({"type": "floor", "floor": "nan"})


@pytest.mark.usefixtures("floor")
def test_the_decisions_apply_it_from_its_first_evaluation_point():
    stops = {"poor": Termination("poor", 2, 0.3, 0.4, "floor: best 0.3 worse than 0.4")}
    assert evaluate(POLICY, HISTORIES, "maximize") == stops
    assert evaluate_in_order(POLICY, HISTORIES, "maximize") == stops
    assert decide(POLICY, HISTORIES, "maximize", 2, "poor") == stops["poor"]
    assert decide(POLICY, HISTORIES, "maximize", 2, "good") is None


@pytest.mark.usefixtures("floor")
def test_the_local_controller_stops_what_the_reference_computation_stops():
    names = ["good", "fine", "slow", "fade"]
    policy = FloorPolicy(floor=0.3, delay_evaluation=2)
    outcome, runner = run(sweep(names, policy=policy))
    stopped = {runner.started[n][1]: t.early_termination for n, t in outcome.trials.items() if t.early_termination}
    reference = evaluate_in_order(policy, {n: CURVES[n] for n in names}, "maximize")
    assert {n: stop["interval"] for n, stop in stopped.items()} == {n: s.interval for n, s in reference.items()} \
        == {"slow": 2}
    assert stopped["slow"]["reason"] == "floor: best 0.2 worse than 0.3"


def test_an_unregistered_type_is_refused_naming_the_field_and_the_types_there_are():
    record = sweep(["good"], policy=None).to_dict()
    with pytest.raises(SpecError, match="^early_termination.type: 'floor' is not supported; use one of bandit, "
                                        "median_stopping, truncation_selection$"):
        SweepSpec.from_dict({**record, "early_termination": {"type": "floor", "floor": 0.4}})
