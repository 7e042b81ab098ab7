"""ExportOnnxOperator: export the picked model to ONNX, gate it on parity, register it."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway.onnx_export import DEFAULT_OPSET, ParityReport, export_registered
from operators._base import MlrunwayBaseOperator


class ExportOnnxOperator(MlrunwayBaseOperator):
    """:param model_name: registered model to export.
    :param model_version: its version.
    :param data_dir: ImageFolder data; the gate uses its validation images.
    :param opset: ONNX opset.
    :param atol: largest absolute difference of logits allowed.
    :param inputs_file: a ``.npy`` of model inputs in the model folder (e.g. ``sample_inputs.npy``) for the gate;
        default: the validation images ``data_dir`` holds for an image model, else random inputs of the
        signature's shape.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "model_name", "model_version", "data_dir", "inputs_file")

    def __init__(self, *, model_name: str, model_version: int | str, data_dir: str | None = None,
                 opset: int = DEFAULT_OPSET, atol: float = 1e-4, inputs_file: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_name, self.model_version, self.data_dir = model_name, model_version, data_dir
        self.opset, self.atol, self.inputs_file = opset, atol, inputs_file

    def execute(self, context: Context) -> dict[str, Any]:
        model, parity = export_registered(self.backend.models, self.model_name, int(self.model_version),
                                          data_dir=self.data_dir, opset=self.opset, atol=self.atol,
                                          inputs_file=self.inputs_file or None)
        self.link(context, "model", model.name, model.version)
        self.log.info("Exported %s:%s to %s:%s; parity: %s", self.model_name, self.model_version, model.name,
                      model.version, ParityReport(**{k: v for k, v in parity.items() if k != "passed"}).summary())
        return {"model_name": model.name, "model_version": model.version, "opset": self.opset, "parity": parity}
