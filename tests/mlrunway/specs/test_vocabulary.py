"""azure-ai-ml's vocabulary as dicts (a DAG file, a trigger form) into specs, and from there through the SDK's
own serializer into the REST body Azure receives: every expression, policy, distribution and serverless."""

from __future__ import annotations

import pytest

from mlrunway.azure.entities import command_job as az_command
from mlrunway.azure.entities import sweep_job as az_sweep
from mlrunway.errors import SpecError
from mlrunway.specs import SweepSpec, vocabulary

JOB = {"command": "python fit.py --rows ${{inputs.rows}} --bs ${{inputs.batch_size}} --out ${{outputs.model}}",
       "code": "training", "inputs": {"rows": 64, "batch_size": 32}, "outputs": {"model": {"type": "uri_folder"}},
       "environment_variables": {"OMP_NUM_THREADS": 2}, "experiment_name": "regressor", "display_name": "fit",
       "tags": {"team": "forecasting"}, "distribution": {"type": "pytorch", "process_count_per_instance": "2"}}


def rest_job(job_args: dict, **kwargs) -> dict:
    return az_command(vocabulary.command_job(job_args), **kwargs)._to_job()._to_rest_object().as_dict()["properties"]


def test_a_job_in_the_sdks_words_reaches_the_rest_body():
    props = rest_job(JOB, name="fit-1", compute="cpu-cluster")
    assert props["command"] == JOB["command"] and props["codeId"] == "training"
    assert props["inputs"]["rows"] == {"value": "64", "jobInputType": "literal"}
    assert props["outputs"]["model"]["jobOutputType"] == "uri_folder"
    assert props["environmentVariables"] == {"OMP_NUM_THREADS": "2"}
    assert props["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 2}
    assert props["tags"] == {"team": "forecasting"}
    assert (props["experimentName"], props["displayName"]) == ("regressor", "fit")


@pytest.mark.parametrize(("dist", "rest"), [
    pytest.param({"type": "pytorch", "process_count_per_instance": 4},
                 {"distributionType": "PyTorch", "processCountPerInstance": 4}, id="pytorch"),
    pytest.param({"type": "mpi", "process_count_per_instance": 2},
                 {"distributionType": "Mpi", "processCountPerInstance": 2}, id="mpi"),
    pytest.param({"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1},
                 {"distributionType": "TensorFlow", "workerCount": 2, "parameterServerCount": 1}, id="tensorflow"),
])
def test_each_distribution_type_round_trips_through_the_sdk(dist, rest):
    assert rest_job({**JOB, "distribution": dist}, name="d-1")["distribution"] == rest


def test_no_compute_is_serverless_with_an_instance_type():
    props = rest_job({**JOB, "compute": None}, name="s-1", instance_type="Standard_NC6s_v3")
    assert props.get("computeId") is None and props["resources"]["instanceType"] == "Standard_NC6s_v3"


SPACE = {
    "lr": {"type": "loguniform", "min_value": -7, "max_value": -2},
    "momentum": {"type": "uniform", "min_value": 0.5, "max_value": 0.95},
    "batch_size": {"type": "choice", "values": [32, 64, 128]},
    "depth": {"type": "randint", "upper": "5"},
    "width": {"type": "quniform", "min_value": 16, "max_value": 128, "q": 16},
    "decay": {"type": "qloguniform", "min_value": -9, "max_value": -3, "q": 1},
    "noise": {"type": "normal", "mu": 0, "sigma": 1},
    "scale": {"type": "lognormal", "mu": 0, "sigma": 0.5},
}
REST_SPACE = {
    "lr": ["loguniform", [-7.0, -2.0]], "momentum": ["uniform", [0.5, 0.95]], "batch_size": ["choice", [[32, 64, 128]]],
    "depth": ["randint", [5]], "width": ["quniform", [16.0, 128.0, 16.0]], "decay": ["qloguniform", [-9.0, -3.0, 1.0]],
    "noise": ["normal", [0.0, 1.0]], "scale": ["lognormal", [0.0, 0.5]],
}


@pytest.mark.parametrize("policy", [
    pytest.param({"type": "bandit", "slack_factor": "0.15", "evaluation_interval": 1, "delay_evaluation": 10}, id="bandit"),
    pytest.param({"type": "median_stopping", "evaluation_interval": 1, "delay_evaluation": 5}, id="median"),
    pytest.param({"type": "truncation_selection", "truncation_percentage": 20, "evaluation_interval": 2,
                  "delay_evaluation": 4}, id="truncation"),
    pytest.param(None, id="none"),
])
def test_every_search_expression_and_policy_round_trips_through_the_sdk(policy):
    trial = vocabulary.command_job({**JOB, "command": "python fit.py " + " ".join(f"--{k} ${{{{inputs.{k}}}}}" for k in SPACE),
                                    "inputs": {k: 1 for k in SPACE}})
    spec = SweepSpec(trial=trial, search_space=vocabulary.search_space(SPACE),
                     objective=vocabulary.objective({"primary_metric": "val_loss", "goal": "minimize"}),
                     limits=vocabulary.limits({"max_total_trials": "6", "max_concurrent_trials": 2,
                                               "timeout": 3600, "trial_timeout": 600}),
                     early_termination=vocabulary.early_termination(policy))
    body = az_sweep(spec, name="sw-1")._to_job()._to_rest_object().as_dict()["properties"]
    assert {k: v for k, v in body["searchSpace"].items()} == REST_SPACE
    assert body["objective"] == {"goal": "minimize", "primaryMetric": "val_loss"}
    assert body["limits"]["maxTotalTrials"] == 6 and body["limits"]["trialTimeout"] == "PT10M"
    if policy is None:
        assert body.get("earlyTermination") is None
    else:
        assert body["earlyTermination"]["evaluationInterval"] == policy["evaluation_interval"]
        assert body["earlyTermination"]["delayEvaluation"] == policy["delay_evaluation"]


@pytest.mark.parametrize(("build", "message"), [
    pytest.param(lambda: vocabulary.search_space({"batch_size": {"type": "choice", "values": []}}),
                 r"search_space.batch_size.values: empty; list at least one value", id="empty-choice"),
    pytest.param(lambda: vocabulary.search_space({"lr": {"type": "uniform", "min_value": 0.1, "max_value": 0.01}}),
                 r"search_space.lr: min_value 0.1 is not less than max_value 0.01", id="bounds-reversed"),
    pytest.param(lambda: vocabulary.search_space({"lr": {"type": "gaussian", "mu": 0}}),
                 r"search_space.lr.type: 'gaussian' is not one of", id="unknown-expression"),
    pytest.param(lambda: vocabulary.search_space({"lr": {"type": "uniform", "min": 0, "max": 1}}),
                 r"search_space.lr.max: is not an argument of uniform", id="misspelt-argument"),
    pytest.param(lambda: vocabulary.search_space({"depth": {"type": "randint", "upper": "five"}}),
                 r"search_space.depth.upper: 'five' is not a int", id="not-a-number"),
    pytest.param(lambda: vocabulary.search_space({}), r"search_space: is empty", id="empty-space"),
    pytest.param(lambda: vocabulary.early_termination({"type": "bandit", "slack": 0.1}),
                 r"early_termination.slack: is not an argument of bandit", id="policy-argument"),
    pytest.param(lambda: vocabulary.early_termination({"type": "hyperband"}),
                 r"early_termination.type: 'hyperband' is not one of", id="unknown-policy"),
    pytest.param(lambda: vocabulary.distribution({"type": "pytorch", "process_count_per_instance": 0}),
                 r"distribution.process_count_per_instance: 0 is not an integer >= 1", id="zero-processes"),
    pytest.param(lambda: vocabulary.distribution({"type": "horovod"}), r"distribution.type: 'horovod'",
                 id="unknown-distribution"),
    pytest.param(lambda: vocabulary.limits({"max_trials": 4}), r"limits.max_trials: is not a sweep limit",
                 id="unknown-limit"),
    pytest.param(lambda: vocabulary.objective({"goal": "maximise", "primary_metric": "acc"}),
                 r"objective.goal: .*maximise", id="goal-spelling"),
    pytest.param(lambda: vocabulary.command_job({**JOB, "comand": "x"}),
                 r"job.comand: is not an argument of azure.ai.ml.command", id="unknown-job-argument"),
    pytest.param(lambda: vocabulary.command_job({**JOB, "command": "python fit.py --x ${{inputs.x}}"}),
                 r"job.command: \$\{\{inputs.x\}\} has no matching input", id="undefined-input"),
    pytest.param(lambda: vocabulary.command_job({"command": "python fit.py"}), r"job.code: is missing",
                 id="no-code"),
])
def test_a_bad_value_names_its_argument_path_and_the_fix(build, message):
    with pytest.raises(SpecError, match=message):
        build()


def test_the_second_examples_jobs_go_through_the_sdks_serializer():
    """dags/demand_forecast.py's job and sweep, rendered as Airflow would, become the REST bodies Azure takes."""
    import sys

    from mlrunway.operators.sweep import sweep_spec
    from tests.conftest import REPO

    sys.path.insert(0, str(REPO / "dags"))
    from demand_forecast import dag

    rendered = {"epochs": 6, "processes": 2, "max_trials": 4}

    def render(value):
        if isinstance(value, str) and value.startswith("{{ params."):
            return rendered[value.removeprefix("{{ params.").removesuffix(" }}")]
        if isinstance(value, dict):
            return {k: render(v) for k, v in value.items()}
        return value

    train, sweep = dag.get_task("train"), dag.get_task("sweep")
    props = rest_job(render(train.job), name="demand-1-train", compute="cpu-cluster")
    assert props["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 2}
    assert props["outputs"]["model"]["jobOutputType"] == "uri_folder" and "${{outputs.model}}" in props["command"]
    spec = sweep_spec(trial=render(sweep.trial), search_space=sweep.search_space, objective=sweep.objective,
                      sampling_algorithm=sweep.sampling_algorithm, seed=sweep.seed, limits=render(sweep.limits),
                      early_termination=sweep.early_termination)
    body = az_sweep(spec, name="demand-1-sweep")._to_job()._to_rest_object().as_dict()["properties"]
    assert body["searchSpace"]["hidden_units"] == ["choice", [[16, 32, 64]]]
    assert body["objective"] == {"goal": "minimize", "primaryMetric": "val_rmse"}
    assert body["earlyTermination"]["policyType"] == "MedianStopping"
