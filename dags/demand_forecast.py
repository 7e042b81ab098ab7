"""A team's own regressor (examples/demand_forecast): DDP training, a sweep minimizing val_rmse, ONNX, blue."""

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param

from mlrunway.lifecycle import lifecycle

CODE = str(Path(__file__).resolve().parent.parent / "examples" / "demand_forecast")
COMMAND = ("python fit.py --rows 4000 --hidden-units ${{inputs.hidden_units}} --lr ${{inputs.lr}} --weight-decay "
           "${{inputs.weight_decay}} --epochs ${{inputs.epochs}} --model-dir ${{outputs.model}}")
PARAMS = {"epochs": Param(8, type="integer", minimum=1, description="Epochs of the job and of each trial."),
          "max_trials": Param(4, type="integer", minimum=1, description="Trials the sweep runs at most.")}

with DAG("demand_forecast", schedule=None, start_date=datetime(2026, 1, 5), params=PARAMS, tags=["mlrunway"]) as dag:
    lifecycle(
        job={"command": COMMAND, "code": CODE,
             "inputs": {"hidden_units": 32, "lr": 0.01, "weight_decay": 1e-4, "epochs": "{{ params.epochs }}"},
             "outputs": {"model": {"type": "uri_folder"}}, "experiment_name": "demand-forecast",
             "distribution": {"type": "pytorch", "process_count_per_instance": 2}},
        sweep={"search_space": {"hidden_units": {"type": "choice", "values": [16, 32, 64]},
                                "lr": {"type": "loguniform", "min_value": -7, "max_value": -2},
                                "weight_decay": {"type": "loguniform", "min_value": -11, "max_value": -5}},
               "objective": {"primary_metric": "val_rmse", "goal": "minimize"}, "seed": 3,
               "limits": {"max_total_trials": "{{ params.max_trials }}", "max_concurrent_trials": 2},
               "early_termination": {"type": "median_stopping", "evaluation_interval": 1, "delay_evaluation": 3}},
        export={"inputs_file": "sample_inputs.npy"},
        deployment={"sample_request": "sample_request.json"},
        model_path="${{outputs.model}}", name_prefix="demand")
