"""Train, sweep with Bandit early termination, pick the best, export to ONNX, deploy blue, clean up.

The DAG is a table of contents: its Params (the trigger form) and six tasks in order. Every name a run
creates derives from the run, so scheduled runs, manual triggers and backfills never collide. The backend is
the Airflow connection in ``backend_conn_id``; ``mlrunway_default`` is the local backend, with no set-up.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param

from operators import (
    CleanupOperator,
    DeployBlueOperator,
    ExportOnnxOperator,
    PickBestModelOperator,
    SweepOperator,
    TrainModelOperator,
)
from operators.preflight import check_run_params

PROJECT = Path(__file__).resolve().parent.parent
# Where scheduled runs read their data unless a trigger says otherwise; a deployment sets it for its workers.
DEFAULT_DATA = os.environ.get("MLRUNWAY_DATA_DIR") or str(PROJECT / "data" / "digits")
# A deployment's cadence without editing the DAG: a cron expression or preset; "none" for manual triggers only.
SCHEDULE = os.environ.get("MLRUNWAY_SCHEDULE", "@weekly")
P = "{{ params.%s }}"

with DAG(
    dag_id="train_sweep_deploy",
    description="PyTorch lifecycle: train, sweep (Bandit), pick best, ONNX, deploy blue, clean up",
    schedule=None if SCHEDULE.lower() == "none" else SCHEDULE,
    start_date=datetime(2026, 1, 5),
    catchup=False,
    max_active_runs=2,
    render_template_as_native_obj=True,
    tags=["mlrunway", "pytorch"],
    params={
        "epochs": Param(20, type="integer", minimum=1, maximum=500, description="Epochs per training run and sweep trial."),
        "lr_min": Param(0.001, type="number", exclusiveMinimum=0, maximum=1, description="Smallest learning rate (log-uniform)."),
        "lr_max": Param(0.1, type="number", exclusiveMinimum=0, maximum=1, description="Largest learning rate."),
        "momentum_min": Param(0.5, type="number", minimum=0, exclusiveMaximum=1, description="Smallest momentum."),
        "momentum_max": Param(0.95, type="number", minimum=0, exclusiveMaximum=1, description="Largest momentum."),
        "sampling": Param("random", enum=["random", "grid"], description="Random (seeded) or a 3x3 grid."),
        "seed": Param(0, type="integer", minimum=0, description="Seed of random sampling."),
        "max_trials": Param(8, type="integer", minimum=1, maximum=100, description="Trials at most."),
        "max_concurrent_trials": Param(2, type="integer", minimum=1, maximum=16, description="Trials at once."),
        "slack_factor": Param(0.15, type="number", exclusiveMinimum=0, maximum=1, description="Bandit slack factor."),
        "evaluation_interval": Param(1, type="integer", minimum=1, maximum=100, description="Epochs between Bandit evaluations."),
        "delay_evaluation": Param(10, type="integer", minimum=0, maximum=500, description="Epochs before the first evaluation."),
        "primary_metric": Param("best_val_acc", type="string", minLength=1, description="Metric the script logs once per epoch."),
        "goal": Param("maximize", enum=["maximize", "minimize"], description="Direction of the primary metric."),
        "data_dir": Param(DEFAULT_DATA, type="string", minLength=1, description="ImageFolder data: train/ and val/."),
        "code_dir": Param(str(PROJECT / "training"), type="string", minLength=1, description="Folder with train.py and score.py."),
        "endpoint_prefix": Param("digits", type="string", pattern="^[A-Za-z][A-Za-z0-9-]{0,22}$",
                                 description="Prefix of the run's names; the endpoint is <prefix>-<8 hex of the run>."),
        "keep_endpoint": Param(False, type="boolean", description="Keep the endpoint serving after the run."),
        "backend_conn_id": Param("mlrunway_default", type="string", minLength=1,
                                 description="Airflow connection of the backend; mlrunway_default is local."),
        # Optional, so null: the trigger form marks a plain string required and will not submit it empty.
        "instance_type": Param(None, type=["null", "string"], pattern="^[A-Za-z0-9_]+$",
                               description="Azure: VM size of the blue deployment (empty: the connection's)."),
        "instance_count": Param(1, type="integer", minimum=1, maximum=20,
                                description="Azure: instances of the blue deployment."),
    },
) as dag:
    common = {"backend_conn_id": P % "backend_conn_id", "name_prefix": P % "endpoint_prefix"}
    train = TrainModelOperator(
        task_id="train", code_dir=P % "code_dir", data_dir=P % "data_dir", num_epochs=P % "epochs",
        pre_execute=check_run_params, **common,
    )
    sweep = SweepOperator(
        task_id="sweep", code_dir=P % "code_dir", data_dir=P % "data_dir", num_epochs=P % "epochs",
        learning_rate_range=["{{ params.lr_min }}", "{{ params.lr_max }}"],
        momentum_range=["{{ params.momentum_min }}", "{{ params.momentum_max }}"],
        sampling_algorithm=P % "sampling", seed=P % "seed", max_total_trials=P % "max_trials",
        max_concurrent_trials=P % "max_concurrent_trials", slack_factor=P % "slack_factor",
        evaluation_interval=P % "evaluation_interval", delay_evaluation=P % "delay_evaluation",
        primary_metric=P % "primary_metric", goal=P % "goal", **common,
    )
    pick = PickBestModelOperator(task_id="pick_best", sweep_name=sweep.output["sweep_name"], **common)
    export = ExportOnnxOperator(
        task_id="export_onnx", model_name=pick.output["model_name"], model_version=pick.output["model_version"],
        data_dir=P % "data_dir", **common,
    )
    deploy = DeployBlueOperator(
        task_id="deploy_blue", model_name=export.output["model_name"], model_version=export.output["model_version"],
        code_dir=P % "code_dir", data_dir=P % "data_dir", instance_type=P % "instance_type",
        instance_count=P % "instance_count", **common,
    )
    clean = CleanupOperator(task_id="cleanup", keep_endpoint=P % "keep_endpoint", **common)

    train >> sweep >> pick >> export >> deploy >> clean
