"""DeployBlueOperator: the ONNX model as the `blue` deployment at 100% traffic, smoke-tested."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway.pipeline import deploy_blue
from operators._base import MlrunwayBaseOperator


class DeployBlueOperator(MlrunwayBaseOperator):
    """Create or update the run's endpoint, deploy `blue` at 0%, smoke-test it with a real validation image
    through the deployment header, then move traffic to ``{"blue": 100}``. A failed smoke test fails the task
    and leaves traffic where it was.

    :param model_name: the ONNX model.
    :param model_version: its version.
    :param code_dir: folder holding score.py.
    :param data_dir: ImageFolder data; the smoke image comes from val/.
    :param workers: server workers.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "model_name", "model_version", "code_dir", "data_dir")

    def __init__(self, *, model_name: str, model_version: int | str, code_dir: str, data_dir: str, workers: int = 2,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_name, self.model_version = model_name, model_version
        self.code_dir, self.data_dir, self.workers = code_dir, data_dir, workers

    def execute(self, context: Context) -> dict[str, Any]:
        return deploy_blue(self.backend, self.names(context).endpoint, self.model_name, int(self.model_version),
                           self.code_dir, self.data_dir, workers=self.workers)
