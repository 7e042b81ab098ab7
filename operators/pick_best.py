"""PickBestModelOperator: register the best trial's model with its hyperparameters and metric."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway import lineage
from mlrunway.operators._base import MlrunwayBaseOperator
from mlrunway.pipeline import pick_best


class PickBestModelOperator(MlrunwayBaseOperator):
    """:param sweep_name: the sweep job (the Sweep task's ``sweep_name``).
    :param model_path: where each trial leaves its model: a folder under its outputs (``outputs/model``) or a
        named output (``${{outputs.model}}``), as for the Train task.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "sweep_name", "model_path")

    def __init__(self, *, sweep_name: str, model_path: str = "outputs/model", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep_name, self.model_path = sweep_name, model_path

    def execute(self, context: Context) -> dict[str, Any]:
        picked = pick_best(self.backend, self.sweep_name, self.names(context).model, self.model_path)
        self.link(context, "model", picked["model_name"], picked["model_version"])
        return picked

    # -- OpenLineage -------------------------------------------------------------------------------------
    def lineage_inputs(self) -> list[lineage.LineageDataset]:
        """The sweep whose best trial it registers."""
        return [lineage.job(self.lineage_namespace, self.sweep_name)]

    def lineage_outputs(self, result: dict[str, Any]) -> list[lineage.LineageDataset]:
        """The model version it registered."""
        if not result.get("model_name"):
            return []
        return [lineage.model_version(self.lineage_namespace, result["model_name"], result["model_version"])]
