"""Train, sweep with Bandit early termination, pick the best, export to ONNX, deploy blue, clean up.

The DAG is a table of contents: its Params (the trigger form) and six tasks in order. Every name a run
creates derives from the run, so scheduled runs, manual triggers and backfills never collide. The backend is
the Airflow connection in ``backend_conn_id``; ``mlrunway_default`` is the local backend, with no set-up.
"""

from __future__ import annotations

import math
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param

from mlrunway.airflow.lifecycle import lifecycle
from mlrunway.check import fail
from mlrunway.data import check_image_folder

PROJECT = Path(__file__).resolve().parent.parent
# Where scheduled runs read their data unless a trigger says otherwise; a deployment sets it for its workers.
DEFAULT_DATA = os.environ.get("MLRUNWAY_DATA_DIR") or str(PROJECT / "data" / "digits")
# A deployment's cadence without editing the DAG: a cron expression or preset; "none" for manual triggers only.
SCHEDULE = os.environ.get("MLRUNWAY_SCHEDULE", "@weekly")
# A production endpoint that the scheduled runs improve (see the README); empty: each run its own endpoint.
ENDPOINT_NAME = os.environ.get("MLRUNWAY_ENDPOINT_NAME") or None
# How long a waiting task holds its worker slot before it defers to the triggerer (resuming costs a task process).
DEFER_AFTER_S = float(os.environ.get("MLRUNWAY_DEFER_AFTER_S", "20"))
P = "{{ params.%s }}"
# The tutorial's command: the example's own script and flags, given here as any team would give its own.
TUTORIAL_COMMAND = ("python train.py --data-dir ${{inputs.data}} --num-epochs ${{inputs.num_epochs}} "
                    "--learning-rate ${{inputs.learning_rate}} --momentum ${{inputs.momentum}}")
EXPRESSIONS = ["choice", "uniform", "loguniform", "quniform", "qloguniform", "normal", "lognormal", "qnormal",
               "qlognormal", "randint"]


def training_job(params: dict) -> dict:
    """The job in azure-ai-ml's words: the tutorial's, or the form's own command with its own inputs and outputs."""
    own = bool(params.get("command"))
    inputs = {} if own else {"data": {"type": "uri_folder", "path": params["data_dir"]},
                             "num_epochs": params["epochs"], "learning_rate": 0.01, "momentum": 0.9}
    return {"command": params.get("command") or TUTORIAL_COMMAND, "code": params["code_dir"],
            "inputs": {**inputs, **(params.get("inputs") or {})}, "outputs": params.get("outputs") or None,
            "distribution": params.get("distribution") or None,
            "compute": params.get("compute") or None, "environment": params.get("environment") or None,
            "experiment_name": "mlrunway"}


def search_space(params: dict) -> dict:
    """The form's search space, else the tutorial's: log-uniform learning rate and uniform momentum (random),
    or three evenly spread values of each (grid)."""
    if params.get("search_space"):
        return params["search_space"]
    (lr_low, lr_high), (m_low, m_high) = (params["lr_min"], params["lr_max"]), (params["momentum_min"], params["momentum_max"])
    if params["sampling"] == "bayesian":  # Azure's rule: choice, uniform and quniform only
        return {"learning_rate": {"type": "uniform", "min_value": lr_low, "max_value": lr_high},
                "momentum": {"type": "uniform", "min_value": m_low, "max_value": m_high}}
    if params["sampling"] == "grid":
        def spread(low: float, high: float) -> dict:
            return {"type": "choice", "values": [round(low + (high - low) * i / 2, 6) for i in range(3)]}

        return {"learning_rate": spread(lr_low, lr_high), "momentum": spread(m_low, m_high)}
    return {"learning_rate": {"type": "loguniform", "min_value": math.log(lr_low), "max_value": math.log(lr_high)},
            "momentum": {"type": "uniform", "min_value": m_low, "max_value": m_high}}


def sampling_algorithm(params: dict) -> dict:
    """The form's choice in azure-ai-ml's object form: sobol is the random algorithm's other rule."""
    if params["sampling"] == "sobol":
        return {"type": "random", "rule": "sobol"}
    return {"type": params["sampling"]}


def early_termination(params: dict) -> dict:
    """The form's policy (``{"type": "none"}`` for none), else the tutorial's Bandit from its three fields (none
    with bayesian sampling, which takes no policy)."""
    if not params.get("early_termination") and params["sampling"] == "bayesian":
        return {"type": "none"}
    return params.get("early_termination") or {
        "type": "bandit", "slack_factor": params["slack_factor"], "evaluation_interval": params["evaluation_interval"],
        "delay_evaluation": params["delay_evaluation"]}


def preflight(context: dict) -> None:
    """Before the first job, the form's own checks (score.py, ranges, the tutorial's ImageFolder data); lifecycle()
    then checks the job, the sweep and the deployment (what the smoke test sends and expects) together. With a command of the
    team's own, data_dir is not checked as images here: the export and the smoke test use its images only for a
    model whose signature has classes and image preprocessing, and say so when it has none."""
    params = context["params"]
    code = Path(params["code_dir"])
    if not (code / "score.py").is_file():
        raise fail("code_dir", f"{code} has no score.py", "pass the folder that holds the scoring script")
    if not params.get("command"):  # the tutorial's train.py reads ImageFolder data
        check_image_folder("data_dir", params["data_dir"])
    for low, high in (("lr_min", "lr_max"), ("momentum_min", "momentum_max")):
        if params[low] >= params[high]:
            raise fail(low, f"{params[low]} is not less than {high} {params[high]}", f"make {low} < {high}")
    if params["max_concurrent_trials"] > params["max_trials"]:
        raise fail("max_concurrent_trials", f"{params['max_concurrent_trials']} is more than max_trials "
                                                  f"{params['max_trials']}", "lower it to at most max_trials")


CODE, JOB, SWEEP, POLICY, DEPLOY, BACKEND = ("Code and data", "Training job", "Sweep", "Early termination",
                                              "Deployment", "Backend")
NULLABLE_STRING = ["null", "string"]  # optional: the trigger form will not submit a plain string param empty

with DAG(
    dag_id="train_sweep_deploy",
    description="PyTorch lifecycle: train, sweep (Bandit), pick best, ONNX, deploy blue, clean up",
    schedule=None if SCHEDULE.lower() == "none" else SCHEDULE,
    start_date=datetime(2026, 1, 5),
    catchup=False,
    max_active_runs=2,
    default_args={"defer_after_s": DEFER_AFTER_S},
    user_defined_macros={"training_job": training_job, "search_space": search_space,
                         "sampling_algorithm": sampling_algorithm, "early_termination": early_termination},
    tags=["mlrunway", "pytorch"],
    params={
        "code_dir": Param(str(PROJECT / "training"), type="string", minLength=1, section=CODE,
                          description="The code folder: the training script and score.py."),
        "data_dir": Param(DEFAULT_DATA, type=NULLABLE_STRING, section=CODE,
                          description="ImageFolder data (train/, val/, test/): the tutorial's input, and the parity "
                                      "gate's and smoke test's images for an image classifier. Empty for any other "
                                      "model: give inputs, sample_request and the model's own parity inputs."),
        "command": Param(None, type=NULLABLE_STRING, section=JOB,
                         description="Your own command, with ${{inputs.x}} and ${{outputs.y}}; empty: the "
                                     "tutorial's train.py."),
        "inputs": Param({}, type="object", section=JOB, description=(
            'Inputs of your command: literals, or {"type": "uri_file", "path": "/data/train.csv"} (a file) and '
            '{"type": "uri_folder", "path": ...} (a folder); paths are checked before the first job.')),
        "outputs": Param({}, type="object", section=JOB, description=(
            'Named outputs of your command: {"model": {"type": "uri_folder"}} for --model-dir ${{outputs.model}}.')),
        "model_path": Param("outputs/model", type="string", minLength=1, section=JOB, description=(
            "Where the job leaves its model: a folder under ./outputs, or a named output such as "
            "${{outputs.model}}. It holds the model and its signature.json.")),
        "epochs": Param(20, type="integer", minimum=1, maximum=500, section=JOB,
                        description="Epochs per training run and sweep trial (the tutorial's command)."),
        "distribution": Param(None, section=JOB, type=["null", "object"], description=(
            'As azure-ai-ml: {"type": "pytorch", "process_count_per_instance": 2}, mpi, or tensorflow with '
            "worker_count and parameter_server_count."), properties={
                "type": {"enum": ["pytorch", "mpi", "tensorflow"]}, "process_count_per_instance": {"type": "integer",
                "minimum": 1}, "worker_count": {"type": "integer", "minimum": 1},
                "parameter_server_count": {"type": "integer", "minimum": 0}}, required=["type"],
            additionalProperties=False),
        "compute": Param(None, type=NULLABLE_STRING, section=JOB,
                         description="Azure: a compute cluster (empty: the connection's, or serverless)."),
        "environment": Param(None, type=NULLABLE_STRING, section=JOB,
                             description="Azure: an environment (empty: one pinned to the project's torch)."),
        "search_space": Param({}, type="object", section=SWEEP, description=(
            'As azure.ai.ml.sweep: {"batch_size": {"type": "choice", "values": [32, 64]}}; empty: the '
            "tutorial's learning rate and momentum from the fields below."),
            additionalProperties={"type": "object", "required": ["type"],
                                  "properties": {"type": {"enum": EXPRESSIONS}}}),
        "lr_min": Param(0.001, type="number", exclusiveMinimum=0, maximum=1, section=SWEEP,
                        description="Smallest learning rate (log-uniform)."),
        "lr_max": Param(0.1, type="number", exclusiveMinimum=0, maximum=1, section=SWEEP, description="Largest learning rate."),
        "momentum_min": Param(0.5, type="number", minimum=0, exclusiveMaximum=1, section=SWEEP, description="Smallest momentum."),
        "momentum_max": Param(0.95, type="number", minimum=0, exclusiveMaximum=1, section=SWEEP, description="Largest momentum."),
        "sampling": Param("random", enum=["random", "sobol", "grid", "bayesian"], section=SWEEP,
                          description="Random (seeded), a scrambled Sobol sequence (seeded), a grid, or bayesian "
                                      "(uniform ranges, no early termination)."),
        "seed": Param(0, type="integer", minimum=0, section=SWEEP, description="Seed of random sampling."),
        "max_trials": Param(8, type="integer", minimum=1, maximum=100, section=SWEEP, description="Trials at most."),
        "max_concurrent_trials": Param(2, type="integer", minimum=1, maximum=16, section=SWEEP, description="Trials at once."),
        "primary_metric": Param("best_val_acc", type="string", minLength=1, section=SWEEP,
                                description="Metric the script logs once per epoch."),
        "goal": Param("maximize", enum=["maximize", "minimize"], section=SWEEP, description="Direction of the primary metric."),
        "early_termination": Param(None, type=["null", "object"], section=POLICY, description=(
            'As azure.ai.ml.sweep: {"type": "median_stopping", "evaluation_interval": 1, "delay_evaluation": 5}, '
            'truncation_selection, bandit, or {"type": "none"}; empty: Bandit from the fields below.'),
            properties={"type": {"enum": ["bandit", "median_stopping", "truncation_selection", "none"]}},
            required=["type"]),
        "slack_factor": Param(0.15, type="number", exclusiveMinimum=0, maximum=1, section=POLICY, description="Bandit slack factor."),
        "evaluation_interval": Param(1, type="integer", minimum=1, maximum=100, section=POLICY,
                                     description="Epochs between evaluations."),
        "delay_evaluation": Param(10, type="integer", minimum=0, maximum=500, section=POLICY,
                                  description="Epochs before the first evaluation."),
        "sample_request": Param(None, type=NULLABLE_STRING, section=DEPLOY, description=(
            "A JSON request file in code_dir that score.py answers: the smoke test sends it (needed for any model "
            "that is not an image classifier with data_dir).")),
        "expected_response": Param(None, type=NULLABLE_STRING, section=DEPLOY, description=(
            "A JSON file in code_dir with the answer sample_request must get (numbers within the parity rule); "
            "empty: the answer of your score.py run on the exported model before it is deployed.")),
        "ignore_keys": Param([], type="array", items={"type": "string", "minLength": 1}, section=DEPLOY,
                             description="Keys of the answer the smoke test does not compare (a request id, a "
                                         "timestamp), wherever they appear."),
        "inputs_file": Param(None, type=NULLABLE_STRING, section=DEPLOY, description=(
            "A .npy of model inputs in the model folder (e.g. sample_inputs.npy): the ONNX parity gate's inputs; "
            "empty: data_dir's images for an image model, else random inputs of the signature's shape.")),
        "endpoint_prefix": Param("digits", type="string", pattern="^[A-Za-z][A-Za-z0-9-]{0,22}$", section=DEPLOY,
                                 description="Prefix of the run's names; the endpoint is <prefix>-<8 hex of the run>."),
        "keep_endpoint": Param(False, type="boolean", section=DEPLOY, description="Keep the endpoint serving after the run."),
        "endpoint_name": Param(ENDPOINT_NAME, type=NULLABLE_STRING, pattern="^[A-Za-z][A-Za-z0-9-]{2,31}$", section=DEPLOY,
                               description="A stable production endpoint that outlives runs: this run's model is a "
                                           "challenger, promoted only if it beats the serving one, through a staged "
                                           "rollout. Empty: the run's own endpoint, deleted at cleanup."),
        "require_approval": Param(False, type="boolean", section=DEPLOY,
                                  description="Stable endpoint: wait for a person's approval (python -m "
                                              "mlrunway.airflow.approval) after the gate, before traffic moves."),
        "min_improvement": Param(0.0, type="number", minimum=0, section=DEPLOY,
                                 description="Stable endpoint: how much better the challenger must score, "
                                             "at the gate's confidence (its lower bound must clear this)."),
        "evaluation": Param(None, type=["null", "object"], section=DEPLOY, description=(
            'Stable endpoint: your evaluation set, {"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": '
            '"minimize"} in the code folder; empty: accuracy on data_dir/test. The gate\'s settings: "confidence" '
            '(0.95), "min_samples" (100), "resamples" (2000, a metric\'s paired bootstrap).'), properties={
                "file": {"type": "string", "minLength": 1}, "metric": {"type": "string", "pattern": "^[^:]+\\.py:\\w+$"},
                "goal": {"enum": ["maximize", "minimize"]},
                "confidence": {"type": "number", "minimum": 0.5, "exclusiveMaximum": 1},
                "min_samples": {"type": "integer", "minimum": 1}, "resamples": {"type": "integer", "minimum": 200}},
            dependentRequired={"file": ["metric"], "metric": ["file"]}, additionalProperties=False),
        "rollout": Param(None, type=["null", "object"], section=DEPLOY, description=(
            'Stable endpoint: {"steps": [10, 50, 100], "window_s": 30, "mirror_percent": 0, "mirror_window_s": 0, '
            '"max_error_rate_increase": 0.01, "max_p99_ratio": 2.0, "p99_slack_ms": 50, "min_requests": 20, '
            '"max_extension_s": null, "watch_s": 10, "watch_alpha": 0.01, "shadow_keys": [], "shadow_tolerance": 0, '
            '"max_disagreement": null}; empty: these defaults. A window with '
            'fewer than min_requests challenger requests is extended up to max_extension_s (null: one more '
            'window_s), then the run ends held. Within each window, the challenger\'s errors over the last watch_s '
            'seconds are watched and a clearly failing one is rolled back at once (watch_s 0: at the end only). '
            'Locally, the mirror window compares the challenger\'s answers with the champion\'s (shadow_keys, e.g. '
            '["label"]; numbers within shadow_tolerance) and holds the rollout past max_disagreement (a share).'),
            properties={"steps": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 100},
                                  "minItems": 1},
                        **{k: {"type": "number", "minimum": 0} for k in (
                            "window_s", "mirror_window_s", "max_error_rate_increase", "max_p99_ratio", "p99_slack_ms")},
                        "mirror_percent": {"type": "integer", "minimum": 0, "maximum": 50},
                        "min_requests": {"type": "integer", "minimum": 0},
                        "max_extension_s": {"type": ["null", "number"], "minimum": 0},
                        "watch_s": {"type": "number", "minimum": 0},
                        "watch_alpha": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.1},
                        "shadow_keys": {"type": "array", "items": {"type": "string", "minLength": 1}},
                        "shadow_tolerance": {"type": "number", "minimum": 0},
                        "max_disagreement": {"type": ["null", "number"], "minimum": 0, "maximum": 1}},
            additionalProperties=False),
        "instance_type": Param(None, type=NULLABLE_STRING, pattern="^[A-Za-z0-9_]+$", section=DEPLOY,
                               description="Azure: VM size of the blue deployment (empty: the connection's)."),
        "instance_count": Param(1, type="integer", minimum=1, maximum=20, section=DEPLOY,
                                description="Azure: instances of the blue deployment."),
        "backend_conn_id": Param("mlrunway_default", type="string", minLength=1, section=BACKEND,
                                 description="Airflow connection of the backend; mlrunway_default is local."),
    },
) as dag:
    tasks = lifecycle(
        job="{{ training_job(params) }}",
        sweep={"search_space": "{{ search_space(params) }}", "sampling_algorithm": "{{ sampling_algorithm(params) }}",
               "objective": {"primary_metric": P % "primary_metric", "goal": P % "goal"}, "seed": P % "seed",
               "limits": {"max_total_trials": P % "max_trials", "max_concurrent_trials": P % "max_concurrent_trials"},
               "early_termination": "{{ early_termination(params) }}"},
        export={"data_dir": P % "data_dir", "inputs_file": P % "inputs_file"},
        deployment={name: P % name for name in (
            "code_dir", "data_dir", "sample_request", "expected_response", "ignore_keys", "instance_type",
            "instance_count", "endpoint_name", "min_improvement", "require_approval", "evaluation", "rollout",
            "keep_endpoint")},
        model_path=P % "model_path", name_prefix=P % "endpoint_prefix", backend_conn_id=P % "backend_conn_id",
        preflight=preflight)
