"""Train, sweep with Bandit early termination, pick the best, export to ONNX, deploy blue, clean up.

The DAG is a table of contents: its Params (the trigger form) and six tasks in order. Every name a run
creates derives from the run, so within a workspace scheduled runs, manual triggers and backfills never collide;
on Azure ML the endpoint's also derives from the workspace, since endpoint names are unique per region. The backend is
the Airflow connection in ``backend_conn_id``; ``mlrunway_default`` is the local backend, with no set-up.
"""

from __future__ import annotations

import logging
import math
import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, AssetOrTimeSchedule, CronTriggerTimetable, Param

from mlrunway.airflow.assets import drift_asset
from mlrunway.airflow.params import (
    backend_param,
    budget_param,
    data_collector_param,
    evaluation_param,
    instances_params,
    promotion_params,
    rollout_param,
    smoke_test_params,
)
from mlrunway.check import fail
from mlrunway.data import check_image_folder
from mlrunway.early_termination import first_stop, policy_from_dict
from mlrunway.early_termination.registry import POLICIES
from mlrunway.errors import SpecError
from mlrunway.lifecycle import lifecycle
from mlrunway.specs.job import DISTRIBUTIONS
from mlrunway.specs.search_space import EXPRESSIONS

PROJECT = Path(__file__).resolve().parent.parent
# Where scheduled runs read their data unless a trigger says otherwise; a deployment sets it for its workers.
DEFAULT_DATA = os.environ.get("MLRUNWAY_DATA_DIR") or str(PROJECT / "data" / "digits")
# A deployment's cadence without editing the DAG: a cron expression or preset; "none" for manual triggers only.
SCHEDULE = os.environ.get("MLRUNWAY_SCHEDULE", "@weekly")
# A production endpoint that the scheduled runs improve (docs/tutorials/production-endpoint.md); empty: each run its own endpoint.
ENDPOINT_NAME = os.environ.get("MLRUNWAY_ENDPOINT_NAME") or None
# What a production endpoint's deployments collect by default: what its monitor (dags/monitor_endpoint.py) reads.
DATA_COLLECTOR = ({"collections": {"model_inputs": {"enabled": "true"}, "model_outputs": {"enabled": "true"}},
                   "sampling_rate": 1.0, "rolling_rate": "hour"} if ENDPOINT_NAME else None)
# How long a waiting task holds its worker slot before it defers to the triggerer (resuming costs a task process).
DEFER_AFTER_S = float(os.environ.get("MLRUNWAY_DEFER_AFTER_S", "20"))
P = "{{ params.%s }}"
# The tutorial's command: the example's own script and flags, given here as any team would give its own.
TUTORIAL_COMMAND = ("python train.py --data-dir ${{inputs.data}} --num-epochs ${{inputs.num_epochs}} "
                    "--learning-rate ${{inputs.learning_rate}} --momentum ${{inputs.momentum}}")


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
    chosen = early_termination(params)
    try:
        policy = None if chosen.get("type") == "none" else policy_from_dict(chosen)
    except SpecError:  # lifecycle()'s check of the sweep, next, names what is wrong with it
        policy = None
    if not params.get("command") and policy is not None and first_stop(policy, params["epochs"]) is None:
        logging.getLogger("airflow.task").warning(
            "early termination can never stop a trial: %s first looks after epoch %d (evaluation_interval %d, "
            "delay_evaluation %d) and each trial runs %d epochs; lower delay_evaluation below epochs for it to act",
            policy.type, max(policy.evaluation_interval, policy.delay_evaluation), policy.evaluation_interval,
            policy.delay_evaluation, params["epochs"])


def schedule() -> object:
    """The cadence; with a production endpoint, also whenever its monitor finds drift (dags/monitor_endpoint.py)."""
    timed = None if SCHEDULE.lower() == "none" else SCHEDULE
    if ENDPOINT_NAME is None:
        return timed
    if timed is None:
        return [drift_asset(ENDPOINT_NAME)]
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(timed, timezone="UTC"), assets=[drift_asset(ENDPOINT_NAME)])


# The form: what a first run needs, open (Airflow's "Run Parameters", the one section shown open); the rest in
# sections of their own, closed until opened. Every field has a title and says what empty means; a field that may
# be left empty is typed as nullable, so the form marks only what a run cannot do without.
JOB, SWEEP, POLICY, CHECKS, PRODUCTION, AZURE, BACKEND = (
    "Your own training job", "Sweep (advanced)", "Early termination", "Deployment checks", "Production endpoint",
    "Azure ML only", "Backend")
NULLABLE_STRING = ["null", "string"]  # optional: the trigger form will not submit a plain string param empty
PARAMS = {
    # Run Parameters: the tutorial's run as it stands; change the data, the size of the sweep, the names.
    "code_dir": Param(str(PROJECT / "training"), type="string", minLength=1, title="Code folder",
                      description="The folder with the training script and score.py (the scoring script)."),
    "data_dir": Param(DEFAULT_DATA, type=NULLABLE_STRING, title="Data folder", description=(
        "Images in train/, val/ and test/ folders (one folder per class): the tutorial's input, and the images the "
        "ONNX check and the smoke test use. Empty for a model of another kind (see Your own training job).")),
    "epochs": Param(20, type="integer", minimum=1, maximum=500, title="Epochs",
                    description="Epochs of the training job and of each sweep trial (1 to 500)."),
    "max_trials": Param(8, type="integer", minimum=1, maximum=100, title="Trials",
                        description="How many hyperparameter combinations the sweep tries at most (1 to 100)."),
    "max_concurrent_trials": Param(2, type="integer", minimum=1, maximum=16, title="Trials at once", description=(
        "How many trials run at the same time (1 to 16, at most Trials); locally each is a process.")),
    "endpoint_prefix": Param("digits", type="string", pattern="^[A-Za-z][A-Za-z0-9-]{0,22}$", title="Name prefix",
                             description=("Starts the names of the run's jobs, model and endpoint "
                                          "(<prefix>-<8 hex of the run>): a letter, then up to 22 letters, digits "
                                          "or hyphens. On Azure ML an endpoint name is unique in the whole region, "
                                          "across workspaces: its 8 hex also derive from the workspace.")),
    "keep_endpoint": Param(False, type="boolean", title="Keep the endpoint after the run",
                           description="Off: cleanup deletes the run's endpoint. On: it keeps serving."),
    # Your own training job: a team's command in azure-ai-ml's words.
    "command": Param(None, type=NULLABLE_STRING, title="Your training command", section=JOB, description=(
        "Your own command, with ${{inputs.x}} and ${{outputs.y}}. Empty: the tutorial's train.py.")),
    "inputs": Param(None, type=["null", "object"], title="Inputs of your command", section=JOB, description=(
        'Literals, or {"type": "uri_file", "path": "/data/train.csv"} (a file) and {"type": "uri_folder", "path": '
        "...} (a folder); paths are checked before the first job. Empty: none beyond the tutorial's.")),
    "outputs": Param(None, type=["null", "object"], title="Outputs of your command", section=JOB, description=(
        'Named outputs: {"model": {"type": "uri_folder"}} for --model-dir ${{outputs.model}}. Empty: none.')),
    "model_path": Param("outputs/model", type="string", minLength=1, title="Where the job leaves its model",
                        section=JOB, description=(
                            "A folder under ./outputs, or a named output such as ${{outputs.model}}. It holds the "
                            "model and its signature.json.")),
    "distribution": Param(None, type=["null", "object"], title="Distributed training", section=JOB, description=(
        'As azure-ai-ml: {"type": "pytorch", "process_count_per_instance": 2}, mpi, or tensorflow with '
        "worker_count and parameter_server_count. Empty: one process."), properties={
            "type": {"enum": list(DISTRIBUTIONS)}, "process_count_per_instance": {"type": "integer",
            "minimum": 1}, "worker_count": {"type": "integer", "minimum": 1},
            "parameter_server_count": {"type": "integer", "minimum": 0}}, required=["type"],
        additionalProperties=False),
    # Sweep (advanced): the search itself.
    "search_space": Param(None, type=["null", "object"], title="Search space", section=SWEEP, description=(
        'As azure.ai.ml.sweep: {"batch_size": {"type": "choice", "values": [32, 64]}}. Empty: the tutorial\'s '
        "learning rate and momentum, from the four fields below."),
        additionalProperties={"type": "object", "required": ["type"],
                              "properties": {"type": {"enum": list(EXPRESSIONS)}}}),
    "lr_min": Param(0.001, type="number", exclusiveMinimum=0, maximum=1, title="Learning rate from", section=SWEEP,
                    description="The tutorial's smallest learning rate, drawn log-uniformly (above 0, up to 1)."),
    "lr_max": Param(0.1, type="number", exclusiveMinimum=0, maximum=1, title="Learning rate to", section=SWEEP,
                    description="The tutorial's largest learning rate (more than Learning rate from)."),
    "momentum_min": Param(0.5, type="number", minimum=0, exclusiveMaximum=1, title="Momentum from", section=SWEEP,
                          description="The tutorial's smallest momentum, drawn uniformly (0 to below 1)."),
    "momentum_max": Param(0.95, type="number", minimum=0, exclusiveMaximum=1, title="Momentum to", section=SWEEP,
                          description="The tutorial's largest momentum (more than Momentum from)."),
    "sampling": Param("random", enum=["random", "sobol", "grid", "bayesian"], title="Sampling", section=SWEEP,
                      description=("random (seeded), sobol (a scrambled Sobol sequence, seeded), grid, or bayesian "
                                   "(uniform ranges only, and no early termination).")),
    "seed": Param(0, type="integer", minimum=0, title="Sampling seed", section=SWEEP,
                  description="The same seed draws the same trials (random and sobol)."),
    "primary_metric": Param("best_val_acc", type="string", minLength=1, title="Primary metric", section=SWEEP,
                            description="The metric your script logs once per epoch; the sweep ranks trials by it."),
    "goal": Param("maximize", enum=["maximize", "minimize"], title="Goal", section=SWEEP,
                  description="Whether a larger or a smaller primary metric is better."),
    # Early termination.
    "early_termination": Param(None, type=["null", "object"], title="Early-termination policy", section=POLICY,
                               description=(
        'As azure.ai.ml.sweep: {"type": "median_stopping", "evaluation_interval": 1, "delay_evaluation": 5}, '
        'truncation_selection, bandit, or {"type": "none"}. Empty: Bandit from the three fields below.'),
        properties={"type": {"enum": [*POLICIES, "none"]}},
        required=["type"]),
    "slack_factor": Param(0.15, type="number", exclusiveMinimum=0, maximum=1, title="Bandit slack factor",
                          section=POLICY, description=(
                              "A trial stops when its metric is worse than the best trial's by more than this "
                              "share (0.15: 15%).")),
    "evaluation_interval": Param(1, type="integer", minimum=1, maximum=100, title="Evaluation interval (epochs)",
                                 section=POLICY, description="How many epochs between two looks of the policy."),
    "delay_evaluation": Param(10, type="integer", minimum=0, maximum=500,
                              title="Delay before the first evaluation (epochs)", section=POLICY, description=(
                                  "Epochs before the policy first looks: below Epochs, or it never stops a "
                                  "trial (the run's first lines then say so).")),
    # Deployment checks: what the smoke test and the ONNX check use for a model that is not the tutorial's.
    **smoke_test_params(section=CHECKS),
    "inputs_file": Param(None, type=NULLABLE_STRING, title="ONNX parity inputs (.npy)", section=CHECKS,
                         description=(
        "A .npy of model inputs in the model folder (e.g. sample_inputs.npy): the ONNX parity check's inputs. "
        "Empty: the data folder's images for an image model, else random inputs of the signature's shape.")),
    # Production endpoint: a stable endpoint that scheduled runs improve.
    **promotion_params(section=PRODUCTION, endpoint_name=ENDPOINT_NAME),
    "evaluation": evaluation_param(section=PRODUCTION, description=(
        'Your evaluation set, {"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": "minimize"} in the code '
        "folder, and how sure the gate must be; without a file: accuracy on the data folder's test/ split.")),
    "rollout": rollout_param(section=PRODUCTION, description=(
        "A window with fewer than min_requests challenger requests is extended up to max_extension_s (null: one "
        "more window_s), then the run ends held. Within each window, the challenger's errors over the last watch_s seconds are watched and a clearly failing one is "
        "rolled back at once (watch_s 0: at the end only). Locally, the mirror window compares the challenger's "
        'answers with the champion\'s (shadow_keys, e.g. ["label"]; numbers within shadow_tolerance) and holds the '
        "rollout past max_disagreement (a share).")),
    "data_collector": data_collector_param(section=PRODUCTION, default=DATA_COLLECTOR, description=(
        'What the deployment collects for monitoring, e.g. {"collections": {"model_inputs": {"enabled": "true"}, '
        '"model_outputs": {"enabled": "true"}}, "sampling_rate": 1.0, "rolling_rate": "hour"}: model_inputs and '
        "model_outputs are filled by your score.py through azureml-ai-monitoring's Collector, request and response "
        "are the HTTP bodies. With a production endpoint set for the DAG (MLRUNWAY_ENDPOINT_NAME), model_inputs and "
        "model_outputs by default: its monitor reads them.")),
    # Azure ML only: ignored by the local backend.
    "compute": Param(None, type=NULLABLE_STRING, title="Compute cluster", section=AZURE,
                     description="A compute cluster for the jobs. Empty: the connection's, or serverless."),
    "environment": Param(None, type=NULLABLE_STRING, title="Environment", section=AZURE,
                         description="An environment for the jobs. Empty: one pinned to the project's torch."),
    **instances_params(section=AZURE),
    # Backend.
    "backend_conn_id": backend_param(section=BACKEND),
    "budget": budget_param(section=BACKEND),
}

with DAG(
    dag_id="train_sweep_deploy",
    description="PyTorch lifecycle: train, sweep (Bandit), pick best, ONNX, deploy blue, clean up",
    schedule=schedule(),
    start_date=datetime(2026, 1, 5),
    catchup=False,
    max_active_runs=2,
    default_args={"defer_after_s": DEFER_AFTER_S},
    user_defined_macros={"training_job": training_job, "search_space": search_space,
                         "sampling_algorithm": sampling_algorithm, "early_termination": early_termination},
    tags=["mlrunway", "pytorch"],
    params=PARAMS,
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
            "data_collector", "keep_endpoint")},
        model_path=P % "model_path", name_prefix=P % "endpoint_prefix", backend_conn_id=P % "backend_conn_id",
        budget=P % "budget", preflight=preflight)
