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
    :param workers: server workers (local backend).
    :param instance_type: VM size of the deployment (Azure; default: the connection's).
    :param instance_count: instances of the deployment (Azure; default: the connection's).
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "model_name", "model_version", "code_dir", "data_dir",
                       "instance_type", "instance_count")

    def __init__(self, *, model_name: str, model_version: int | str, code_dir: str, data_dir: str, workers: int = 2,
                 instance_type: str | None = None, instance_count: int | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_name, self.model_version = model_name, model_version
        self.code_dir, self.data_dir, self.workers = code_dir, data_dir, workers
        self.instance_type, self.instance_count = instance_type, instance_count

    def execute(self, context: Context) -> dict[str, Any]:
        endpoint = self.names(context).endpoint
        self.link(context, "endpoint", endpoint)
        return deploy_blue(self.backend, endpoint, self.model_name, int(self.model_version), self.code_dir,
                           self.data_dir, workers=self.workers, instance_type=self.instance_type or None,
                           instance_count=int(self.instance_count) if self.instance_count else None)
