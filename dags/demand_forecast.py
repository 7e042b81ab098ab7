"""A second team's project through the same six operators: a demand forecaster (examples/demand_forecast).

Nothing of the digits example: the team's own script and flags (``fit.py --rows --hidden-units --lr
--weight-decay --epochs --model-dir``), data it makes itself, three hyperparameters (one an integer choice),
``val_rmse`` minimized with median stopping, DDP on two processes, the model in a named output, the parity
gate on the script's own sample inputs and a smoke test with the team's own request file.
"""

from __future__ import annotations

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

CODE = str(Path(__file__).resolve().parent.parent / "examples" / "demand_forecast")
P = "{{ params.%s }}"
MODEL = "${{outputs.model}}"

with DAG(
    dag_id="demand_forecast",
    description="A regressor of a team's own: DDP training, a sweep minimizing val_rmse, ONNX, blue, clean up",
    schedule=None,
    start_date=datetime(2026, 1, 5),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["mlrunway", "example"],
    params={
        "epochs": Param(8, type="integer", minimum=1, maximum=200, description="Epochs per run."),
        "max_trials": Param(4, type="integer", minimum=1, maximum=50, description="Sweep trials."),
        "processes": Param(2, type="integer", minimum=1, maximum=8, description="DDP processes per job."),
        "backend_conn_id": Param("mlrunway_default", type="string", minLength=1, description="The backend."),
    },
) as dag:
    job = {
        "command": ("python fit.py --rows 4000 --hidden-units ${{inputs.hidden_units}} --lr ${{inputs.lr}} "
                    "--weight-decay ${{inputs.weight_decay}} --epochs ${{inputs.epochs}} --model-dir " + MODEL),
        "code": CODE,
        "inputs": {"hidden_units": 32, "lr": 0.01, "weight_decay": 1e-4, "epochs": P % "epochs"},
        "outputs": {"model": {"type": "uri_folder"}},
        "distribution": {"type": "pytorch", "process_count_per_instance": P % "processes"},
        "experiment_name": "demand-forecast",
        "tags": {"team": "forecasting"},
    }
    common = {"backend_conn_id": P % "backend_conn_id", "name_prefix": "demand"}
    train = TrainModelOperator(task_id="train", job=job, model_path=MODEL, **common)
    sweep = SweepOperator(
        task_id="sweep", trial=job,
        search_space={"hidden_units": {"type": "choice", "values": [16, 32, 64]},
                      "lr": {"type": "loguniform", "min_value": -7, "max_value": -2},
                      "weight_decay": {"type": "loguniform", "min_value": -11, "max_value": -5}},
        objective={"primary_metric": "val_rmse", "goal": "minimize"}, sampling_algorithm="random", seed=3,
        limits={"max_total_trials": P % "max_trials", "max_concurrent_trials": 2},
        early_termination={"type": "median_stopping", "evaluation_interval": 1, "delay_evaluation": 3}, **common,
    )
    pick = PickBestModelOperator(task_id="pick_best", sweep_name=sweep.output["sweep_name"], model_path=MODEL, **common)
    export = ExportOnnxOperator(task_id="export_onnx", model_name=pick.output["model_name"],
                                model_version=pick.output["model_version"], inputs_file="sample_inputs.npy", **common)
    deploy = DeployBlueOperator(task_id="deploy_blue", model_name=export.output["model_name"],
                                model_version=export.output["model_version"], code_dir=CODE,
                                sample_request="sample_request.json", **common)
    clean = CleanupOperator(task_id="cleanup", **common)

    train >> sweep >> pick >> export >> deploy >> clean
