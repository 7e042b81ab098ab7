"""Check a run's parameters together before its first job starts (Params check each field alone)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrunway.backend.naming import RunNames
from mlrunway.data import check_image_folder
from mlrunway.pipeline import check_prefix
from mlrunway.specs import check
from operators._base import MlrunwayBaseOperator
from operators.sweep import sweep_spec


def check_run_params(context: Any) -> None:
    """Raise SpecError naming the param and the fix; used as the first task's ``pre_execute``. Then the
    backend's own checks of the trial's job (the compute exists, the inputs are there), before any job starts."""
    params = context["params"]
    RunNames.of(context["dag"].dag_id, context["run_id"], check_prefix(params["endpoint_prefix"]))
    code = Path(params["code_dir"])
    if not (code / "train.py").is_file() or not (code / "score.py").is_file():
        raise check.fail("code_dir", f"{code} lacks train.py or score.py", "pass the folder holding both scripts")
    check_image_folder("data_dir", params["data_dir"])
    for low, high in (("lr_min", "lr_max"), ("momentum_min", "momentum_max")):
        if params[low] >= params[high]:
            raise check.fail(low, f"{params[low]} is not less than {high} {params[high]}", f"make {low} < {high}")
    if params["max_concurrent_trials"] > params["max_trials"]:
        raise check.fail("max_concurrent_trials", f"{params['max_concurrent_trials']} is more than max_trials "
                          f"{params['max_trials']}", "lower it to at most max_trials")
    spec = sweep_spec(code_dir=str(code), data_dir=params["data_dir"], num_epochs=params["epochs"],
               learning_rate_range=(params["lr_min"], params["lr_max"]),
               momentum_range=(params["momentum_min"], params["momentum_max"]),
               sampling_algorithm=params["sampling"], max_total_trials=params["max_trials"],
               max_concurrent_trials=params["max_concurrent_trials"], slack_factor=params["slack_factor"],
               evaluation_interval=params["evaluation_interval"], delay_evaluation=params["delay_evaluation"],
               primary_metric=params["primary_metric"], goal=params["goal"], seed=params.get("seed", 0))
    task = context.get("task")
    if isinstance(task, MlrunwayBaseOperator):  # the backend's own checks (Azure: the compute exists)
        task.backend.jobs.validate(spec.trial)
