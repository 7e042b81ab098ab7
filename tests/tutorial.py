"""The tutorial's job and sweep in azure-ai-ml's words, as a DAG hands them to the operators.

DAG files that tests write import this module, so it imports nothing of the test session (tests/conftest.py
resets the Airflow home and the workspace when imported).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from training.tutorial import TRAIN_COMMAND

REPO = Path(__file__).resolve().parent.parent


def tutorial_job(data: str, *, epochs: int = 3, code: str | None = None) -> dict[str, Any]:
    return {"command": TRAIN_COMMAND, "code": code or str(REPO / "training"),
            "inputs": {"data": {"type": "uri_folder", "path": data}, "num_epochs": epochs, "learning_rate": 0.01,
                       "momentum": 0.9}}


SPACE = {"learning_rate": {"type": "loguniform", "min_value": math.log(1e-3), "max_value": math.log(1e-1)},
         "momentum": {"type": "uniform", "min_value": 0.5, "max_value": 0.95}}
OBJECTIVE = {"primary_metric": "best_val_acc", "goal": "maximize"}


def bandit(delay_evaluation: int = 10) -> dict[str, Any]:
    return {"type": "bandit", "slack_factor": 0.15, "evaluation_interval": 1, "delay_evaluation": delay_evaluation}
