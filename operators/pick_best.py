"""PickBestModelOperator: register the best trial's model with its hyperparameters and metric."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway.pipeline import pick_best
from operators._base import MlrunwayBaseOperator


class PickBestModelOperator(MlrunwayBaseOperator):
    """:param sweep_name: the sweep job (the Sweep task's ``sweep_name``)."""

    template_fields = (*MlrunwayBaseOperator.template_fields, "sweep_name")

    def __init__(self, *, sweep_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep_name = sweep_name

    def execute(self, context: Context) -> dict[str, Any]:
        picked = pick_best(self.backend, self.sweep_name, self.names(context).model)
        self.link(context, "model", picked["model_name"], picked["model_version"])
        return picked
