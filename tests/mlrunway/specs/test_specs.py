from __future__ import annotations

import math

import pytest

from mlrunway.errors import SpecError
from mlrunway.specs import (
    BanditPolicy,
    Choice,
    CommandJobSpec,
    Input,
    LogUniform,
    MedianStoppingPolicy,
    Objective,
    PyTorchDistribution,
    QUniform,
    Randint,
    SweepLimits,
    SweepSpec,
    TensorFlowDistribution,
    TruncationSelectionPolicy,
    Uniform,
)
from tests.conftest import REPO

COMMAND = "python train.py --learning-rate ${{inputs.learning_rate}} --momentum ${{inputs.momentum}}"


def trial(**overrides) -> CommandJobSpec:
    return CommandJobSpec(**{"code": "training", "command": COMMAND,
                             "inputs": {"learning_rate": 0.01, "momentum": 0.9}, **overrides})


def sweep(**overrides) -> SweepSpec:
    fields = {
        "trial": trial(),
        "search_space": {"learning_rate": Uniform(min_value=0.001, max_value=0.1),
                         "momentum": Uniform(min_value=0.5, max_value=0.9)},
        "objective": Objective(primary_metric="best_val_acc"),
        "early_termination": BanditPolicy(slack_factor=0.15, evaluation_interval=1, delay_evaluation=10),
        **overrides,
    }
    return SweepSpec(**fields)


def test_specs_round_trip_through_dict():
    spec = sweep(trial=trial(distribution=PyTorchDistribution(process_count_per_instance=2),
                             inputs={"learning_rate": 0.01, "momentum": 0.9, "data": Input(path="/data")}),
                 limits=SweepLimits(max_total_trials=8, max_concurrent_trials=2, timeout=600, trial_timeout=60))
    assert SweepSpec.from_dict(spec.to_dict()) == spec


def test_specs_are_written_with_azure_ai_mls_type_and_a_users_kind_reads_with_a_warning_naming_type():
    spec = sweep(trial=trial(distribution=PyTorchDistribution(process_count_per_instance=2)))
    record = spec.to_dict()
    assert record["early_termination"] == {"type": "bandit", "slack_factor": 0.15, "slack_amount": None,
                                           "evaluation_interval": 1, "delay_evaluation": 10}
    assert record["search_space"]["momentum"] == {"type": "uniform", "min_value": 0.5, "max_value": 0.9}
    assert record["trial"]["distribution"] == {"type": "pytorch", "process_count_per_instance": 2}

    def older(data):  # what this version wrote before it took azure-ai-ml's word
        return {"kind" if key == "type" else key: value for key, value in data.items()}

    with pytest.warns(FutureWarning) as warned:
        assert SweepSpec.from_dict({
            **record, "early_termination": older(record["early_termination"]),
            "search_space": {name: older(expr) for name, expr in record["search_space"].items()},
            "trial": {**record["trial"], "distribution": older(record["trial"]["distribution"])},
        }) == spec
    assert {str(w.message).split(" is read")[0] for w in warned} == {
        "early_termination.kind", "sweep.search_space.learning_rate.kind", "sweep.search_space.momentum.kind",
        "distribution.kind"}
    assert "write type, azure-ai-ml's word" in str(warned[0].message)
    with pytest.raises(SpecError, match="early_termination.kind: is given beside type 'bandit'; drop kind"):
        SweepSpec.from_dict({**record, "early_termination": {**record["early_termination"], "kind": "bandit"}})
    with pytest.raises(SpecError, match="early_termination.type: 'hyperband' is not supported; use one of bandit, "):
        SweepSpec.from_dict({**record, "early_termination": {"type": "hyperband"}})


def test_specs_are_immutable_and_changes_return_copies():
    job = trial()
    with pytest.raises(AttributeError):
        job.command = "x"  # type: ignore[misc]
    changed = job.with_inputs(learning_rate=0.5)
    assert changed.inputs["learning_rate"] == 0.5 and job.inputs["learning_rate"] == 0.01


def test_process_count_multiplies_processes_and_instances():
    assert trial(distribution=TensorFlowDistribution(worker_count=2, parameter_server_count=1)).process_count == 3
    assert trial(distribution=PyTorchDistribution(process_count_per_instance=4), instance_count=2).process_count == 8


BAD_JOBS = [
    pytest.param({"command": ""}, "command_job.command: is empty", id="empty-command"),
    pytest.param({"code": ""}, "command_job.code: is empty", id="empty-code"),
    pytest.param({"command": "python t.py --x ${{inputs.x}}"}, r"inputs.x\}\} has no matching input", id="undeclared-input"),
    pytest.param({"command": "python t.py ${{outputs.model}}", "inputs": {}}, "has no matching output", id="undeclared-output"),
    pytest.param({"instance_count": 0}, "command_job.instance_count: 0 is not an integer >= 1", id="zero-instances"),
    pytest.param({"experiment_name": "bad name!"}, "command_job.experiment_name", id="bad-experiment"),
    pytest.param({"timeout": -5}, "command_job.timeout", id="negative-timeout"),
    pytest.param({"environment_variables": {"A": 1}}, "environment_variables.A: is not a string", id="non-string-env"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_JOBS)
def test_bad_command_job_names_field_and_fix(overrides, message):
    with pytest.raises(SpecError, match=message):
        trial(**overrides)


@pytest.mark.parametrize("kwargs", [{"process_count_per_instance": 0}, {"process_count_per_instance": 1.5}])
def test_distribution_rejects_bad_process_counts(kwargs):
    with pytest.raises(SpecError, match="distribution.process_count_per_instance"):
        PyTorchDistribution(**kwargs)


BAD_SWEEPS = [
    pytest.param({"search_space": {}}, "sweep.search_space: is empty", id="empty-space"),
    pytest.param({"search_space": {"learning_rate": {"type": "choice", "values": []}}}, "Choice has no values", id="empty-choice"),
    pytest.param({"search_space": {"learning_rate": {"type": "uniform", "min_value": 0.1, "max_value": 0.001}}},
                 "learning_rate.uniform: min_value 0.1 is not less than max_value 0.001", id="min-over-max"),
    pytest.param({"search_space": {"learning_rate": {"type": "gaussian", "mu": 0}}}, "type: 'gaussian' is not supported", id="unknown-distribution"),
    pytest.param({"search_space": {"learning_rate": {"type": "quniform", "min_value": 0, "max_value": 1, "q": 0}}}, r"\.q: 0", id="zero-q"),
    pytest.param({"search_space": {"batch": Choice(values=[16, 32])}}, "sweep.search_space.batch: never reaches the trial's command line", id="unused-parameter"),
    pytest.param({"sampling_algorithm": "hyperband"}, "sampling_algorithm: 'hyperband' is not supported", id="bad-sampling"),
    pytest.param({"sampling_algorithm": "grid"}, "grid sampling needs Choice, got uniform", id="grid-needs-choice"),
    pytest.param({"limits": SweepLimits(max_total_trials=4, max_concurrent_trials=8)}, "max_concurrent_trials: 8 is more than", id="concurrency-over-total"),
    # Issue 28: azure-ai-ml's object form, and Azure's rules for bayesian sampling, on both backends
    pytest.param({"sampling_algorithm": {"type": "random", "rule": "halton"}}, "sampling_algorithm.rule: 'halton' is not supported; use one of random, sobol", id="bad-rule"),
    pytest.param({"sampling_algorithm": {"type": "grid", "rule": "sobol"}}, "sampling_algorithm.rule: applies to random sampling only, not grid", id="rule-on-grid"),
    pytest.param({"sampling_algorithm": {"type": "random", "logbase": 1}}, "sampling_algorithm.logbase: 1 is not a base of logarithms; pass a positive number other than 1", id="logbase-1"),
    pytest.param({"sampling_algorithm": {"type": "random", "logbase": "ten"}}, "sampling_algorithm.logbase: 'ten' is not a base", id="logbase-word"),
    pytest.param({"sampling_algorithm": {"type": "random", "sead": 3}}, "sampling_algorithm.sead: is not a sampling algorithm setting; use type, rule, logbase, seed", id="unknown-argument"),
    pytest.param({"sampling_algorithm": {"type": "random", "seed": "x"}}, "sampling_algorithm.seed: 'x' is not an integer", id="bad-seed"),
    pytest.param({"sampling_algorithm": {"type": "random", "seed": 3}, "seed": 4}, "sweep.seed: 4 differs from sampling_algorithm.seed 3; pass one seed", id="two-seeds"),
    pytest.param({"sampling_algorithm": "bayesian", "early_termination": None, "search_space": {"learning_rate": {"type": "loguniform", "min_value": -7, "max_value": -2}}},
                 "sweep.search_space.learning_rate: bayesian sampling takes choice, uniform and quniform only, not loguniform", id="bayesian-loguniform"),
    pytest.param({"sampling_algorithm": "bayesian"}, "sweep.early_termination: bayesian sampling takes no early-termination policy", id="bayesian-with-policy"),
]


def test_the_sampling_algorithms_object_form_lands_in_the_spec():
    spec = sweep(sampling_algorithm={"type": "Random", "rule": "Sobol", "seed": "999", "logbase": "10"})
    assert (spec.sampling.type, spec.sampling.rule, spec.sampling.logbase, spec.seed) == ("random", "sobol", 10.0, 999)
    assert SweepSpec.from_dict(spec.to_dict()) == spec
    assert sweep(sampling_algorithm={"type": "random", "logbase": "e"}).sampling.base == math.e


@pytest.mark.parametrize(("overrides", "message"), BAD_SWEEPS)
def test_bad_sweep_names_field_and_fix(overrides, message):
    with pytest.raises(SpecError, match=message):
        sweep(**overrides)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(lambda: Objective(primary_metric="acc", goal="maximise"), "goal: 'maximise' is not supported", id="bad-goal"),
        pytest.param(lambda: Objective(primary_metric=" "), "primary_metric: is empty", id="empty-metric"),
        pytest.param(lambda: SweepLimits(max_total_trials=0), "max_total_trials: 0", id="zero-trials"),
        pytest.param(lambda: SweepLimits(max_total_trials=1001), "over the limit of 1000", id="too-many-trials"),
        pytest.param(lambda: SweepLimits(trial_timeout=0), "trial_timeout", id="zero-trial-timeout"),
        pytest.param(lambda: BanditPolicy(slack_factor=-0.1), "bandit.slack_factor: -0.1 is not positive", id="negative-slack"),
        pytest.param(lambda: BanditPolicy(slack_factor=0.1, slack_amount=0.1), "exactly one of slack_factor and slack_amount", id="both-slacks"),
        pytest.param(lambda: BanditPolicy(), "exactly one of", id="no-slack"),
        pytest.param(lambda: BanditPolicy(slack_factor=0.1, evaluation_interval=0), "evaluation_interval: 0", id="zero-interval"),
        pytest.param(lambda: MedianStoppingPolicy(delay_evaluation=-1), "delay_evaluation: -1", id="negative-delay"),
        pytest.param(lambda: TruncationSelectionPolicy(truncation_percentage=100), "truncation_percentage: 100 is over", id="truncation-100"),
        pytest.param(lambda: LogUniform.from_range(0, 0.1), "log of non-positive 0", id="log-of-zero"),
        pytest.param(lambda: Randint(upper=0), "upper", id="randint-zero"),
        pytest.param(lambda: QUniform(min_value=1, max_value=1, q=1), "min_value 1.0 is not less than max_value 1.0", id="empty-range"),
    ],
)
def test_bad_limits_policies_and_expressions(build, message):
    with pytest.raises(SpecError, match=message):
        build()


def test_limits_default_concurrency_to_total():
    assert SweepLimits(max_total_trials=7).max_concurrent_trials == 7


def test_loguniform_from_range_takes_values_not_logs():
    expr = LogUniform.from_range(1e-4, 1e-1)
    assert expr.min_value == pytest.approx(-9.2103, abs=1e-4) and expr.max_value == pytest.approx(-2.3026, abs=1e-4)


def test_a_distributed_jobs_supervisor_imports_the_job_spec_without_the_sweeps_declarations():
    """The supervisor starts before every job's script and imports mlrunway.specs.job for a distributed one: the
    package's names are imported when used, so pydantic (the sweep's declared settings) stays out of its start."""
    import subprocess
    import sys

    code = "import sys, mlrunway.specs.job; print(sorted(m for m in ('pydantic', 'mlrunway.specs.sweep') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_a_non_distributed_jobs_supervisor_imports_no_settings_pydantic_or_budget():
    """A validated SweepBudget (the connection's rules, :mod:`mlrunway.settings`) is not the supervisor's: planning
    a non-distributed job's process imports neither the settings, pydantic nor the sweep's specs."""
    import subprocess
    import sys

    code = ("import sys, mlrunway.local.supervisor as s; s._plan({'distribution': None}, ['true'], {}); "
            "print(sorted(m for m in ('pydantic', 'mlrunway.settings', 'mlrunway.specs', 'mlrunway.specs.sweep', "
            "'mlrunway.backend.rates', 'mlrunway.ledger.cost') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("given", "error"), [
    ({"limit": float("nan")}, "sweep.budget.limit: nan is not an amount above 0; give what the sweep may spend"),
    ({"limit": float("inf")}, "sweep.budget.limit: inf is not an amount above 0"),
    ({"limit": -1}, "sweep.budget.limit: -1 is not an amount above 0"),
    ({"limit": 0}, "sweep.budget.limit: 0 is not an amount above 0"),
    ({"limit": True}, "sweep.budget.limit: True is not an amount above 0"),
    ({"limit": "five"}, "sweep.budget.limit: 'five' is not an amount above 0"),
    ({"measure": "bogus"}, "sweep.budget.measure: 'bogus' is not what a budget counts; use cost or hours"),
    ({"local_rate": float("nan")}, "sweep.budget.local_rate: nan is not a price of at least 0 and at most 1000000"),
    ({"local_rate": 1e308}, "sweep.budget.local_rate: 1e+308 is not a price of at least 0 and at most 1000000"),
    ({"local_rate": -0.5}, "sweep.budget.local_rate: -0.5 is not a price of at least 0"),
    ({"rates": {"Standard_NC6s_v3": float("inf")}},
     "sweep.budget.rates.Standard_NC6s_v3: inf is not a price of at least 0 and at most 1000000"),
    ({"rates": {"Standard_NC6s_v3": -3}}, "sweep.budget.rates.Standard_NC6s_v3: -3 is not a price of at least 0"),
    ({"rates": [3.06]}, "sweep.budget.rates: [3.06] is not a card of prices"),
    ({"currency": "usd"}, "sweep.budget.currency: 'usd' is not a currency code"),
    ({"pennies": 5}, "sweep.budget.pennies: is not a sweep budget setting; use limit, measure, currency"),
])
def test_a_hand_built_sweep_budget_is_refused_with_the_connections_words(given, error):
    """SweepSpec(budget=SweepBudget(...)) is public: its budget is validated when it is built, not by the controller
    that first prices a trial with it (where nan or inf crashed, -1 stopped before any trial, bogus read as hours)."""
    from mlrunway.specs.sweep import SweepBudget

    with pytest.raises(SpecError) as refused:
        SweepBudget(**{"limit": 5, "measure": "cost", **given})
    assert str(refused.value).startswith(error)


def test_a_sweep_budget_keeps_what_it_was_admitted_with_through_its_record():
    from mlrunway.specs.sweep import SweepBudget

    budget = SweepBudget(limit="5", measure="cost", currency="EUR", local_rate=0.04,
                         rates={"Standard_NC6s_v3": 3.06, "Standard_NC6s_v3:spot": 0.61}, basis="b")
    assert budget.limit == 5.0  # a number a template rendered as text
    assert SweepBudget(**budget.to_dict()) == budget
    spec = sweep(budget=budget)
    assert SweepSpec.from_dict(spec.to_dict()).budget == budget


def test_a_settings_error_echoes_a_long_value_shortened_with_its_field_and_fix():
    from mlrunway.specs.sweep import SweepBudget

    with pytest.raises(SpecError) as refused:
        SweepBudget(limit=5, measure="x" * 5000)
    message = str(refused.value)
    assert message.startswith("sweep.budget.measure: 'xxx") and message.endswith("use cost or hours")
    assert len(message) < 300
