"""ExportOnnxOperator: export the picked model to ONNX, gate it on parity, register it."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway.onnx_export import DEFAULT_OPSET, export_registered
from operators._base import MlrunwayBaseOperator


class ExportOnnxOperator(MlrunwayBaseOperator):
    """:param model_name: registered model to export.
    :param model_version: its version.
    :param data_dir: ImageFolder data; the gate uses its validation images.
    :param opset: ONNX opset.
    :param atol: largest absolute difference of logits allowed.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "model_name", "model_version", "data_dir")

    def __init__(self, *, model_name: str, model_version: int | str, data_dir: str | None = None,
                 opset: int = DEFAULT_OPSET, atol: float = 1e-4, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_name, self.model_version, self.data_dir = model_name, model_version, data_dir
        self.opset, self.atol = opset, atol

    def execute(self, context: Context) -> dict[str, Any]:
        model, parity = export_registered(self.backend.models, self.model_name, int(self.model_version),
                                          data_dir=self.data_dir, opset=self.opset, atol=self.atol)
        self.link(context, "model", model.name, model.version)
        self.log.info("Exported %s:%s to %s:%s; parity: max |diff| %.3g, top-1 agreement %.2f%% on %d %s",
                      self.model_name, self.model_version, model.name, model.version, parity["max_abs_diff"],
                      100 * parity["top1_agreement"], parity["samples"], parity["inputs"])
        return {"model_name": model.name, "model_version": model.version, "opset": self.opset, "parity": parity}
