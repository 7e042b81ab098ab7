"""A team's own text classifier (examples/support_tickets): int64 token ids of any length, val_f1 maximized."""

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param

from mlrunway.lifecycle import lifecycle

CODE = str(Path(__file__).resolve().parent.parent / "examples" / "support_tickets")
COMMAND = ("python fit.py --tickets ${{inputs.tickets}} --embedding-dim ${{inputs.embedding_dim}} --lr ${{inputs.lr}} "
           "--epochs ${{inputs.epochs}} --model-dir ${{outputs.model}}")
PARAMS = {"epochs": Param(6, type="integer", minimum=1, description="Epochs of the job and of each trial."),
          "max_trials": Param(4, type="integer", minimum=1, description="Trials the sweep runs at most."),
          "tickets": Param(1200, type="integer", minimum=100, description="Synthetic tickets the job generates."),
          "keep_endpoint": Param(False, type="boolean", description="Keep the run's endpoint after cleanup.")}
with DAG("support_tickets", schedule=None, start_date=datetime(2026, 1, 5), params=PARAMS, tags=["mlrunway"]) as dag:
    lifecycle(
        job={"command": COMMAND, "code": CODE, "experiment_name": "support-tickets",
             "inputs": {"tickets": "{{ params.tickets }}", "embedding_dim": 16, "lr": 0.05,
                        "epochs": "{{ params.epochs }}"},
             "outputs": {"model": {"type": "uri_folder"}}},
        sweep={"search_space": {"embedding_dim": {"type": "choice", "values": [8, 16, 32]},
                                "lr": {"type": "loguniform", "min_value": -5, "max_value": -1}},
               "objective": {"primary_metric": "val_f1", "goal": "maximize"}, "seed": 5,
               "limits": {"max_total_trials": "{{ params.max_trials }}", "max_concurrent_trials": 2},
               "early_termination": {"type": "bandit", "slack_factor": 0.1, "delay_evaluation": 2}},
        export={"inputs_file": "sample_inputs.npy"},
        deployment={"sample_request": "sample_request.json", "keep_endpoint": "{{ params.keep_endpoint }}"},
        model_path="${{outputs.model}}", name_prefix="tickets")
