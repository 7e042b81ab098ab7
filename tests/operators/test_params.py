"""The trigger form's Params reject bad values per field; the preflight rejects bad combinations."""

from __future__ import annotations

import copy
import shutil
import sys
from types import SimpleNamespace

import pytest

from mlrunway.errors import SpecError
from tests.conftest import REPO


@pytest.fixture(scope="module")
def dag():
    sys.path.insert(0, str(REPO / "dags"))
    from train_sweep_deploy import dag

    return dag


@pytest.mark.parametrize(
    ("param", "value"),
    [
        pytest.param("epochs", 0, id="zero-epochs"),
        pytest.param("epochs", "ten", id="epochs-not-integer"),
        pytest.param("lr_min", 0, id="zero-learning-rate"),
        pytest.param("momentum_max", 1.0, id="momentum-1"),
        pytest.param("sampling", "hyperband", id="sampling-not-offered"),
        pytest.param("max_trials", 1000, id="too-many-trials"),
        pytest.param("slack_factor", -0.1, id="negative-slack"),
        pytest.param("evaluation_interval", 0, id="zero-interval"),
        pytest.param("goal", "up", id="bad-goal"),
        pytest.param("endpoint_prefix", "1digits", id="prefix-starts-with-digit"),
        pytest.param("endpoint_prefix", "a" * 24, id="prefix-too-long"),
        pytest.param("keep_endpoint", "yes", id="keep-not-boolean"),
        pytest.param("distribution", {"type": "horovod"}, id="distribution-type"),
        pytest.param("distribution", {"type": "pytorch", "process_count_per_instance": 0}, id="zero-processes"),
        pytest.param("distribution", {"type": "pytorch", "processes": 2}, id="distribution-argument"),
        pytest.param("search_space", {"lr": {"min_value": 0.1}}, id="expression-without-type"),
        pytest.param("search_space", {"lr": {"type": "gaussian"}}, id="expression-type"),
        pytest.param("early_termination", {"type": "hyperband"}, id="policy-type"),
        pytest.param("inputs", ["not", "an", "object"], id="inputs-not-an-object"),
        pytest.param("command", 42, id="command-not-a-string"),
        pytest.param("endpoint_name", "1prod", id="endpoint-name-starts-with-digit"),
        pytest.param("endpoint_name", "p" * 33, id="endpoint-name-too-long"),
        pytest.param("min_improvement", -0.1, id="negative-improvement"),
        pytest.param("evaluation", {"file": "eval.jsonl"}, id="evaluation-without-metric"),
        pytest.param("evaluation", {"file": "eval.jsonl", "metric": "rmse"}, id="metric-not-file-function"),
        pytest.param("evaluation", {"file": "e.jsonl", "metric": "m.py:f", "goal": "up"}, id="evaluation-goal"),
        pytest.param("evaluation", {"confidence": 1.0}, id="evaluation-confidence-1"),
        pytest.param("evaluation", {"min_samples": 0}, id="evaluation-no-samples"),
        pytest.param("evaluation", {"metric": "m.py:f"}, id="evaluation-metric-without-file"),
        pytest.param("rollout", {"steps": [10, 150]}, id="step-over-100"),
        pytest.param("rollout", {"mirror_percent": 80}, id="mirror-over-50"),
        pytest.param("rollout", {"window": 30}, id="rollout-setting-unknown"),
        pytest.param("rollout", {"max_disagreement": 1.5}, id="disagreement-over-1"),
        pytest.param("rollout", {"shadow_keys": "label"}, id="shadow-keys-not-a-list"),
        pytest.param("data_collector", {"collections": {}}, id="collector-without-collections"),
        pytest.param("data_collector", {"collections": {"model_inputs": True}, "sampling_rate": 0},
                     id="collector-sampling-zero"),
        pytest.param("data_collector", {"collections": {"model_inputs": True}, "rolling_rate": "week"},
                     id="collector-rolling-week"),
    ],
)
def test_trigger_form_rejects_bad_values_naming_the_param(dag, param, value):
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dag.params)  # the Params with their schemas, as the trigger form validates them
    with pytest.raises(ParamValidationError, match=f"Invalid input for param {param}: "):
        params[param] = value


def test_defaults_are_valid(dag):
    assert dag.params.validate()["primary_metric"] == "best_val_acc"


def test_a_compared_mirror_window_is_a_valid_rollout(dag):
    params = copy.deepcopy(dag.params)
    params["rollout"] = {"mirror_percent": 20, "mirror_window_s": 30, "shadow_keys": ["label"], "max_disagreement": 0.05}
    assert params.validate()["rollout"]["shadow_keys"] == ["label"]


def test_the_gates_settings_alone_are_a_valid_evaluation(dag):
    params = copy.deepcopy(dag.params)
    params["evaluation"] = {"confidence": 0.9, "min_samples": 300}  # the test/ split, judged at 90%
    assert params["evaluation"] == {"confidence": 0.9, "min_samples": 300}
    params["evaluation"] = {"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": "minimize", "resamples": 500}
    assert params["evaluation"]["resamples"] == 500


def preflight(context: dict) -> None:
    """The train task's pre_execute: the form's own checks, then lifecycle()'s (the job, sweep and deployment)."""
    from train_sweep_deploy import tasks

    tasks.preflight(context)


def context(dag, digits, **changes):
    """What the train task's pre_execute gets: the params, the run, and the task (its backend: local)."""
    params = {**dag.params.validate(), "data_dir": str(digits), **changes}
    task = copy.copy(dag.get_task("train"))
    task.backend_conn_id, task.budget = params["backend_conn_id"], params.get("budget")  # rendered, as pre_execute sees them
    return {"params": params, "dag": SimpleNamespace(dag_id=dag.dag_id), "run_id": "manual__2026-11-21", "task": task}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"lr_min": 0.1, "lr_max": 0.01}, "lr_min: 0.1 is not less than lr_max 0.01", id="lr-range"),
        pytest.param({"momentum_min": 0.9, "momentum_max": 0.5}, "momentum_min: 0.9 is not less than", id="momentum-range"),
        pytest.param({"max_trials": 2, "max_concurrent_trials": 4}, "sweep.limits.max_concurrent_trials: 4 is more than max_total_trials 2", id="concurrency"),
        pytest.param({"data_dir": "/nowhere"}, "data_dir: folder '/nowhere' does not exist", id="missing-data"),
        pytest.param({"code_dir": "/tmp"}, "code_dir: /tmp has no score.py", id="missing-scoring-script"),
        pytest.param({"search_space": {"batch_size": {"type": "choice", "values": []}}},
                     "search_space.batch_size.values: empty", id="empty-choice"),
        pytest.param({"search_space": {"batch_size": {"type": "choice", "values": [16, 32]}}},
                     "sweep.search_space.batch_size: never reaches the trial's command line", id="unused-hyperparameter"),
        pytest.param({"command": "python fit.py --rows ${{inputs.rows}}"},
                     r"job.command: \$\{\{inputs.rows\}\} has no matching input", id="undefined-input"),
        pytest.param({"command": "python fit.py --data ${{inputs.d}} --lr ${{inputs.learning_rate}} --m "
                                 "${{inputs.momentum}}", "inputs": {"d": {"type": "uri_folder", "path": "/nowhere/data"},
                                                                    "learning_rate": 0.1, "momentum": 0.9}},
                     "job.inputs.d: uri_folder '/nowhere/data' does not exist", id="missing-input-path"),
        pytest.param({"distribution": {"type": "mpi", "process_count_per_instance": 2}},
                     "distribution mpi: no mpirun on PATH", id="a-distribution-this-machine-cannot-run"),
        pytest.param({"early_termination": {"type": "truncation_selection", "truncation_percentage": 120}},
                     "early_termination.truncation_percentage: 120", id="bad-policy-value"),
        pytest.param({"endpoint_name": "digits-prod", "rollout": {"steps": [50, 10, 100]}},
                     "rollout.steps: \\[50, 10, 100\\] is not an ascending list", id="steps-not-ascending"),
        pytest.param({"endpoint_name": "digits-prod", "rollout": {"steps": [10, 50]}},
                     "rollout.steps: .* ending at 100", id="steps-not-ending-at-100"),
        pytest.param({"endpoint_name": "digits-prod", "evaluation": {"file": "eval.jsonl", "metric": "m.py:f"}},
                     "evaluation.file: .*eval.jsonl does not exist", id="evaluation-file-missing"),
        pytest.param({"sampling": "bayesian", "early_termination": {"type": "median_stopping"}},
                     "sweep.early_termination: bayesian sampling takes no early-termination policy", id="bayesian-policy"),
        pytest.param({"sampling": "bayesian", "search_space": {"learning_rate": {"type": "loguniform", "min_value": -7,
                                                                                 "max_value": -2}}},
                     "bayesian sampling takes choice, uniform and quniform only, not loguniform", id="bayesian-log"),
        pytest.param({"data_collector": {"collections": {"model_inputs": {"enabled": "yes"}}}},
                     "data_collector.collections.model_inputs.enabled: 'yes' is not true or false",
                     id="collector-enabled-not-a-boolean"),
        pytest.param({"endpoint_name": "digits-prod", "data_dir": "NO-TEST-SPLIT"},
                     "evaluation: there is no .*test to compare the challenger", id="no-test-split"),
    ],
)
def test_preflight_rejects_bad_combinations_before_any_job(dag, digits, changes, message, tmp_path, monkeypatch):
    from mlrunway.local import launch

    monkeypatch.setattr(launch, "find_mpirun", lambda: None)  # a machine without Open MPI (the test extra has it)
    if changes.get("data_dir") == "NO-TEST-SPLIT":  # the example's data as an earlier version wrote it
        for split in ("train", "val"):
            shutil.copytree(digits / split, tmp_path / "old" / split)
        changes = {**changes, "data_dir": str(tmp_path / "old")}
    with pytest.raises(SpecError, match=message):
        preflight(context(dag, digits, **changes))


def test_preflight_accepts_the_defaults(dag, digits):
    preflight(context(dag, digits))
    preflight(context(dag, digits, endpoint_name="digits-prod", rollout={"steps": [100], "window_s": 5}))
    for sampling in ("sobol", "bayesian", "grid"):  # the form's defaults fit each (bayesian: uniform, no policy)
        preflight(context(dag, digits, sampling=sampling))


def test_every_field_has_a_title_and_says_what_it_is_and_only_a_first_runs_fields_are_open(dag):
    schemas = {name: dag.params.get_param(name).schema for name in dag.params}
    untitled = [name for name, schema in schemas.items()
                if not schema.get("title") or not dag.params.get_param(name).description]
    assert not untitled, f"fields without a title or a description: {untitled}"
    assert len({schema["title"] for schema in schemas.values()}) == len(schemas)  # no two fields look alike
    open_ = [name for name, schema in schemas.items() if "section" not in schema]  # Airflow's open "Run Parameters"
    assert open_ == ["code_dir", "data_dir", "epochs", "max_trials", "max_concurrent_trials", "endpoint_prefix",
                     "keep_endpoint"]
    assert {n for n, s in schemas.items() if s.get("section") == "Azure ML only"} == {
        "compute", "environment", "instance_type", "instance_count"}
    assert {n for n, s in schemas.items() if s.get("section") == "Production endpoint"} == {
        "endpoint_name", "require_approval", "min_improvement", "evaluation", "rollout", "data_collector"}
    # The form marks a field required when its type does not admit null: only what a run cannot do without.
    required = {n for n, s in schemas.items() if "type" in s and "null" not in (s["type"] if isinstance(s["type"], list) else [s["type"]])}
    assert not required & {"inputs", "outputs", "search_space", "ignore_keys", "command", "distribution"}
    params = copy.deepcopy(dag.params)
    params["search_space"], params["inputs"], params["ignore_keys"] = None, None, None  # empty: the defaults
    assert params.validate()["search_space"] is None


def test_a_policy_that_cannot_act_within_the_epochs_is_warned_about_in_the_first_lines(dag, digits, caplog):
    import logging

    from mlrunway.early_termination import first_stop
    from mlrunway.early_termination.bandit import BanditPolicy

    assert first_stop(BanditPolicy(slack_factor=0.1, evaluation_interval=1, delay_evaluation=10), 10) is None
    assert first_stop(BanditPolicy(slack_factor=0.1, evaluation_interval=2, delay_evaluation=3), 10) == 4
    with caplog.at_level(logging.WARNING, logger="airflow.task"):
        preflight(context(dag, digits, epochs=3))  # the default delay_evaluation is 10
    assert "early termination can never stop a trial: bandit first looks after epoch 10" in caplog.text
    assert "each trial runs 3 epochs; lower delay_evaluation below epochs" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="airflow.task"):
        preflight(context(dag, digits, epochs=3, delay_evaluation=1))
        preflight(context(dag, digits, epochs=3, early_termination={"type": "none"}))
    assert "never stop" not in caplog.text


def test_a_stable_endpoint_on_a_backend_without_rollout_is_refused_before_any_job(dag, digits, monkeypatch):
    from mlrunway.backend.fake import FakeBackend

    train = copy.copy(dag.get_task("train"))
    backend = train.__dict__["backend"] = FakeBackend()
    train.__dict__["run_budget"] = None  # the run's budget, resolved: none (the form's default, a fake connection)
    monkeypatch.setattr(backend, "endpoints", object())  # endpoints that are not Rollout: no metrics, no lease
    with pytest.raises(SpecError, match="endpoint_name: the fake backend has no staged rollout yet; leave"):
        preflight({**context(dag, digits, endpoint_name="digits-prod"), "task": train})


def test_preflight_hands_the_trial_job_to_the_backends_own_checks(dag, digits):
    """After the params, the backend checks the job it will run (Azure: the compute exists) before any job."""
    from dataclasses import replace

    from mlrunway.backend.fake import FakeBackend

    train = copy.copy(dag.get_task("train"))
    backend = train.__dict__["backend"] = FakeBackend()
    train.__dict__["run_budget"] = None  # the run's budget, resolved: none (the form's default, a fake connection)
    preflight({**context(dag, digits), "task": train})
    train_spec, trial_spec = backend.jobs.validated  # the training job, then the sweep's trial
    assert train_spec == trial_spec
    spec = trial_spec
    assert spec.code == str(REPO / "training") and "${{inputs.learning_rate}}" in spec.command
    backend.jobs.computes = {"gpu-cluster"}
    with pytest.raises(SpecError, match="command_job.compute: 'cpu-cluster' is not a compute of the fake workspace"):
        backend.jobs.validate(replace(spec, compute="cpu-cluster"))


def regressor(tmp_path, **changes) -> dict:
    """The form filled for a team's regressor (examples/demand_forecast) with a uri_file input: no images at all."""
    table = tmp_path / "history.csv"
    table.write_text("week,demand\n1,12.5\n")
    command = ("python fit.py --rows 500 --history ${{inputs.history}} --hidden-units ${{inputs.hidden_units}} "
               "--lr ${{inputs.lr}} --epochs ${{inputs.epochs}} --model-dir ${{outputs.model}}")
    return {"command": command, "code_dir": str(REPO / "examples" / "demand_forecast"), "data_dir": None,
            "inputs": {"history": {"type": "uri_file", "path": str(table)}, "hidden_units": 32, "lr": 0.01, "epochs": 3},
            "outputs": {"model": {"type": "uri_folder"}}, "model_path": "${{outputs.model}}",
            "search_space": {"hidden_units": {"type": "choice", "values": [16, 32]},
                             "lr": {"type": "loguniform", "min_value": -7, "max_value": -2}},
            "primary_metric": "val_rmse", "goal": "minimize", "sample_request": "sample_request.json", **changes}


def test_the_form_carries_a_model_that_is_no_image_classifier(dag, digits, tmp_path):
    """Before: preflight refused any project without image class folders, and the form had no field for the
    request to smoke-test with or the model's location."""
    params = regressor(tmp_path)
    preflight(context(dag, digits, **params))
    copy.deepcopy(dag.params).validate()  # the new fields' defaults are valid
    form = copy.deepcopy(dag.params)
    for name, value in params.items():
        form[name] = value  # each is a field of the form, and the regressor's values are valid in it
    train = copy.copy(dag.get_task("train"))
    train.render_template_fields({**context(dag, digits, **params), "ti": None})
    assert train.model_path == "${{outputs.model}}" and train.job["inputs"]["history"]["type"] == "uri_file"


@pytest.mark.parametrize(("changes", "message"), [
    pytest.param({"inputs": {"history": {"type": "uri_file", "path": "/nowhere.csv"}, "hidden_units": 32, "lr": 0.01,
                             "epochs": 3}}, "job.inputs.history: uri_file '/nowhere.csv' does not exist",
                 id="uri-file-missing"),
    pytest.param({"inputs": {"history": {"type": "uri_file", "path": str(REPO / "examples")}, "hidden_units": 32,
                             "lr": 0.01, "epochs": 3}}, "job.inputs.history: uri_file .* does not exist",
                 id="uri-file-is-a-folder"),
    pytest.param({"sample_request": None}, "deployment.sample_request: is missing, and without data_dir there are "
                 "no images to smoke-test with; name a JSON request file", id="nothing-to-smoke-test-with"),
    pytest.param({"sample_request": "request.json"}, "deployment.sample_request: .*request.json does not exist",
                 id="request-missing"),
    pytest.param({"sample_request": "score.py"}, "deployment.sample_request: .*score.py is not JSON",
                 id="request-not-json"),
    pytest.param({"expected_response": "answer.json"}, "deployment.expected_response: .*answer.json does not exist",
                 id="expected-missing"),
    pytest.param({"sample_request": None, "data_dir": "DIGITS", "expected_response": "sample_request.json"},
                 "deployment.expected_response: is given without sample_request", id="expected-without-request"),
])
def test_a_regressors_mistakes_are_refused_before_any_job(dag, digits, tmp_path, changes, message):
    changes = {k: str(digits) if v == "DIGITS" else v for k, v in changes.items()}
    with pytest.raises(SpecError, match=message):
        preflight(context(dag, digits, **regressor(tmp_path, **changes)))


def test_ignore_keys_is_a_list_of_key_names(dag):
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dag.params)
    params["ignore_keys"] = ["request_id"]
    for bad in ("request_id", [""], [3]):
        with pytest.raises(ParamValidationError, match="Invalid input for param ignore_keys: "):
            params["ignore_keys"] = bad


# What the form of d454041 (before the settings were declared once) submitted for a production run: every field,
# with the values a team sets. Old runs' confs still validate, and their settings still parse.
EARLIER_CONF = {
    "code_dir": str(REPO / "training"), "data_dir": None, "epochs": 20, "max_trials": 8, "max_concurrent_trials": 2,
    "endpoint_prefix": "digits", "keep_endpoint": False, "command": None, "inputs": None, "outputs": None,
    "model_path": "outputs/model", "distribution": None, "search_space": None, "lr_min": 0.001, "lr_max": 0.1,
    "momentum_min": 0.5, "momentum_max": 0.95, "sampling": "sobol", "seed": 0, "primary_metric": "best_val_acc",
    "goal": "maximize", "early_termination": None, "slack_factor": 0.15, "evaluation_interval": 1,
    "delay_evaluation": 10, "sample_request": "sample_request.json", "expected_response": None,
    "ignore_keys": ["request_id"], "inputs_file": None, "endpoint_name": "digits-prod", "require_approval": True,
    "min_improvement": 0.01, "evaluation": {"confidence": 0.9, "min_samples": 200},
    "rollout": {"steps": [10, 50, 100], "window_s": 60, "mirror_percent": 10, "mirror_window_s": 30,
                "shadow_keys": ["label"]},
    "data_collector": {"collections": {"model_inputs": {"enabled": "true"}, "model_outputs": {"enabled": "true"}},
                       "sampling_rate": 1.0, "rolling_rate": "hour"},
    "compute": None, "environment": None, "instance_type": "Standard_DS3_v2", "instance_count": 20,
    "backend_conn_id": "mlrunway_default"}


def test_an_earlier_forms_conf_still_validates_and_its_settings_parse(dag):
    from mlrunway.backend.capture import DataCollector
    from mlrunway.backend.types import Instances
    from mlrunway.deploy.gate import Evaluation, Promotion
    from mlrunway.deploy.rollout import RolloutPolicy
    from mlrunway.deploy.smoke import SmokeTest

    params = copy.deepcopy(dag.params)
    for name, value in EARLIER_CONF.items():
        params[name] = value
    validated = params.validate()
    assert set(validated) == set(EARLIER_CONF) | {"budget"} and validated["budget"] is None  # added since: empty
    conf = EARLIER_CONF
    assert RolloutPolicy.parse(conf["rollout"]).steps == (10, 50, 100)
    assert Evaluation.parse(conf["evaluation"]).confidence == 0.9
    assert DataCollector.parse(conf["data_collector"]).enabled == ("model_inputs", "model_outputs")
    assert SmokeTest.parse({k: conf[k] for k in ("sample_request", "expected_response", "ignore_keys")},
                           "deployment").keys == ("request_id",)
    assert Promotion.parse(**{k: conf[k] for k in ("endpoint_name", "require_approval", "min_improvement")}) == \
        Promotion(endpoint_name="digits-prod", require_approval=True, min_improvement=0.01)
    assert Instances.parse("deployment", instance_type="Standard_DS3_v2", instance_count=20).instance_count == 20
