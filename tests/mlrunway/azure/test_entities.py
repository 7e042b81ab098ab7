"""Every entity the Azure backend builds, through azure-ai-ml's own REST serializer, checked field by field."""

from __future__ import annotations

import dataclasses

import pytest

from mlrunway.azure.entities import DEFAULT_ENVIRONMENT, command_job, sweep_job
from mlrunway.specs import (
    BanditPolicy,
    Choice,
    CommandJobSpec,
    Input,
    LogNormal,
    MedianStoppingPolicy,
    MpiDistribution,
    Normal,
    Output,
    PyTorchDistribution,
    QLogNormal,
    QLogUniform,
    QNormal,
    QUniform,
    Randint,
    SweepLimits,
    SweepSpec,
    TensorFlowDistribution,
    TruncationSelectionPolicy,
    Uniform,
)
from training.tutorial import train_job, tutorial_sweep


def rest(entity) -> dict:
    """The body jobs.create_or_update sends: the builder's job, serialized by the SDK."""
    return entity._to_job()._to_rest_object().as_dict()


def spec(**changes) -> CommandJobSpec:
    base = CommandJobSpec(
        code="training", command="python train.py --data ${{inputs.data}} --epochs ${{inputs.epochs}} --out ${{outputs.model}}",
        inputs={"data": Input(path="azureml://datastores/workspaceblobstore/paths/digits/"), "epochs": 20},
        outputs={"model": Output()}, environment_variables={"OMP_NUM_THREADS": "4"}, experiment_name="digits",
        display_name="train digits", timeout=3600,
    )
    return dataclasses.replace(base, **changes)


def test_command_job_fields():
    body = rest(command_job(spec(), name="digits-1-train", compute="cpu-cluster"))
    props = body["properties"]
    assert body["name"] == "digits-1-train"
    assert props["jobType"] == "Command"
    assert props["command"] == spec().command
    assert props["codeId"] == "training"
    assert props["environmentId"] == DEFAULT_ENVIRONMENT
    assert props["computeId"] == "cpu-cluster"
    assert props["experimentName"] == "digits" and props["displayName"] == "train digits"
    assert props["environmentVariables"] == {"OMP_NUM_THREADS": "4"}
    assert props["inputs"]["data"] == {"uri": "azureml://datastores/workspaceblobstore/paths/digits/", "jobInputType": "uri_folder"}
    assert props["inputs"]["epochs"] == {"value": "20", "jobInputType": "literal"}
    assert props["outputs"]["model"]["jobOutputType"] == "uri_folder"
    assert props["limits"] == {"timeout": "PT1H", "jobLimitsType": "Command"}
    assert "distribution" not in props or props["distribution"] is None


@pytest.mark.parametrize(
    ("dist", "instances", "expected"),
    [
        pytest.param(PyTorchDistribution(process_count_per_instance=4), 2,
                     {"distributionType": "PyTorch", "processCountPerInstance": 4}, id="pytorch"),
        pytest.param(MpiDistribution(process_count_per_instance=2), 3,
                     {"distributionType": "Mpi", "processCountPerInstance": 2}, id="mpi"),
        pytest.param(TensorFlowDistribution(worker_count=3, parameter_server_count=1), 4,
                     {"distributionType": "TensorFlow", "workerCount": 3, "parameterServerCount": 1}, id="tensorflow"),
        pytest.param(TensorFlowDistribution(), 3,  # the spec's default: one worker per instance (it was sent as 1)
                     {"distributionType": "TensorFlow", "workerCount": 3, "parameterServerCount": 0},
                     id="tensorflow-default-workers"),
    ],
)
def test_each_distribution_type(dist, instances, expected):
    props = rest(command_job(spec(distribution=dist, instance_count=instances)))["properties"]
    assert props["distribution"] == expected
    assert props["resources"]["instanceCount"] == instances


def sweep(**changes) -> SweepSpec:
    return dataclasses.replace(tutorial_sweep(train_job("training", "azureml:digits@latest"), seed=7), **changes)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param(BanditPolicy(slack_factor=0.15, evaluation_interval=1, delay_evaluation=10),
                     {"policyType": "Bandit", "slackFactor": 0.15, "evaluationInterval": 1, "delayEvaluation": 10}, id="bandit-factor"),
        pytest.param(BanditPolicy(slack_amount=0.05, evaluation_interval=2, delay_evaluation=4),
                     {"policyType": "Bandit", "slackAmount": 0.05, "evaluationInterval": 2, "delayEvaluation": 4}, id="bandit-amount"),
        pytest.param(MedianStoppingPolicy(evaluation_interval=1, delay_evaluation=5),
                     {"policyType": "MedianStopping", "evaluationInterval": 1, "delayEvaluation": 5}, id="median"),
        pytest.param(TruncationSelectionPolicy(truncation_percentage=20, evaluation_interval=3, delay_evaluation=6),
                     {"policyType": "TruncationSelection", "truncationPercentage": 20, "evaluationInterval": 3,
                      "delayEvaluation": 6}, id="truncation"),
    ],
)
def test_each_early_termination_policy(policy, expected):
    assert rest(sweep_job(sweep(early_termination=policy)))["properties"]["earlyTermination"] == expected


def test_sweep_fields_the_tutorial_got_wrong_are_right():
    body = rest(sweep_job(sweep(limits=SweepLimits(max_total_trials=12, max_concurrent_trials=3, timeout=7200, trial_timeout=600)),
                          name="digits-1-sweep", compute="gpu-cluster"))
    props = body["properties"]
    assert props["jobType"] == "Sweep" and body["name"] == "digits-1-sweep"
    assert props["experimentName"] == "mlrunway"  # job(...) drops it; we set it again
    # the searched hyperparameters reach the command line (the tutorial's sweep tuned nothing)
    assert "--learning-rate ${{search_space.learning_rate}}" in props["trial"]["command"]
    assert "--momentum ${{search_space.momentum}}" in props["trial"]["command"]
    assert props["objective"] == {"goal": "maximize", "primaryMetric": "best_val_acc"}
    assert props["samplingAlgorithm"] == {"samplingAlgorithmType": "Random", "seed": 7, "rule": "random"}
    assert props["limits"] == {"jobLimitsType": "Sweep", "maxTotalTrials": 12, "maxConcurrentTrials": 3,
                               "timeout": "PT2H", "trialTimeout": "PT10M"}
    assert props["computeId"] == "gpu-cluster"
    assert props["trial"]["environmentId"] == DEFAULT_ENVIRONMENT


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param(Choice(values=[16, 32, 64]), ["choice", [[16, 32, 64]]], id="choice"),
        pytest.param(Uniform(min_value=0.5, max_value=0.9), ["uniform", [0.5, 0.9]], id="uniform"),
        pytest.param(QUniform(min_value=0, max_value=100, q=5), ["quniform", [0, 100, 5]], id="quniform"),
        pytest.param(QLogUniform(min_value=0, max_value=4, q=2), ["qloguniform", [0, 4, 2]], id="qloguniform"),
        pytest.param(Normal(mu=0, sigma=1), ["normal", [0, 1]], id="normal"),
        pytest.param(LogNormal(mu=-2, sigma=0.5), ["lognormal", [-2, 0.5]], id="lognormal"),
        pytest.param(Randint(upper=8), ["randint", [8]], id="randint"),
        pytest.param(QNormal(mu=10, sigma=3, q=2), ["qnormal", [10, 3, 2]], id="qnormal"),
        pytest.param(QLogNormal(mu=1, sigma=0.5, q=1), ["qlognormal", [1, 0.5, 1]], id="qlognormal"),
    ],
)
def test_each_search_expression(expr, expected):
    body = rest(sweep_job(sweep(search_space={"learning_rate": Uniform(min_value=0.001, max_value=0.1), "momentum": expr})))
    assert body["properties"]["searchSpace"]["momentum"] == expected


@pytest.mark.parametrize(("sampling", "expected"), [("grid", "Grid"), ("bayesian", "Bayesian")])
def test_grid_and_bayesian_sampling(sampling, expected):
    space = {"learning_rate": Choice(values=[0.01, 0.1]), "momentum": Choice(values=[0.5, 0.9])}
    body = rest(sweep_job(sweep(sampling_algorithm=sampling, search_space=space, seed=None, early_termination=None)))
    assert body["properties"]["samplingAlgorithm"]["samplingAlgorithmType"] == expected
    assert "earlyTermination" not in body["properties"] or body["properties"]["earlyTermination"] is None


@pytest.mark.parametrize(
    ("sampling", "expected"),
    [
        pytest.param({"type": "random", "rule": "sobol", "seed": 999, "logbase": "e"},
                     {"samplingAlgorithmType": "Random", "rule": "sobol", "seed": 999, "logbase": "e"}, id="sobol-e"),
        pytest.param({"type": "random", "logbase": 10}, {"samplingAlgorithmType": "Random", "rule": "random",
                                                          "logbase": "10"}, id="logbase-10"),  # a string, as the spec types it
        pytest.param({"type": "random", "logbase": "2.5"}, {"samplingAlgorithmType": "Random", "rule": "random",
                                                            "logbase": "2.5"}, id="logbase-text"),
        pytest.param("random", {"samplingAlgorithmType": "Random", "rule": "random"}, id="random-unseeded"),
    ],
)
def test_the_sampling_algorithms_object_form_reaches_azure_as_given(sampling, expected):
    """What the SDK's own RandomSamplingAlgorithm(rule=, seed=, logbase=) serializes to, from our spec."""
    from azure.ai.ml.sweep import RandomSamplingAlgorithm

    body = rest(sweep_job(sweep(sampling_algorithm=sampling, seed=None)))
    assert body["properties"]["samplingAlgorithm"] == expected
    if isinstance(sampling, dict):  # the SDK's own object, given as is, says the same
        sdk = RandomSamplingAlgorithm(**{k: v for k, v in sampling.items() if k != "type"})
        assert rest(sweep_job(sweep(sampling_algorithm=sdk, seed=None)))["properties"]["samplingAlgorithm"] == expected


def test_sweep_round_trips_through_the_sdks_deserializer():
    from azure.ai.ml.entities import Job

    rest_object = sweep_job(sweep(), name="digits-1-sweep")._to_job()._to_rest_object()
    back = Job._from_rest_object(rest_object)
    assert back.name == "digits-1-sweep" and back.objective.primary_metric == "best_val_acc"
    assert back.early_termination.slack_factor == 0.15 and back.early_termination.delay_evaluation == 10
    assert back.limits.max_total_trials == 8
