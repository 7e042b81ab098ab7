"""ExportOnnxOperator: export the picked model to ONNX, gate it on parity, register it."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway import lineage
from mlrunway.onnx_export import DEFAULT_OPSET, ParityReport, export_registered
from mlrunway.operators._base import MlrunwayBaseOperator


class ExportOnnxOperator(MlrunwayBaseOperator):
    """:param model_name: registered model to export.
    :param model_version: its version.
    :param data_dir: ImageFolder data; the gate uses its validation images.
    :param opset: ONNX opset.
    :param atol: the parity gate's absolute tolerance: each ONNX output must be within ``atol + rtol * |torch|``
        of PyTorch's (numpy's ``isclose``); ``atol`` covers outputs near zero. Default (None): ``ATOL``; a model
        with a float16 input is refused unless ``atol`` or ``rtol`` is set here (the default is tuned for float32).
    :param rtol: the relative tolerance, the part that grows with the outputs (float32 rounding does), so a
        regressor whose outputs are in the thousands passes as one whose outputs are near 1. Default: ``RTOL``.
    :param inputs_file: the gate's inputs in the model folder, fed as stored (never cast): a ``.npy`` for a model
        of one input (``sample_inputs.npy``), or an ``.npz`` of one array per input name; needed for an int or bool
        input, or an axis of any size. Default: the validation images ``data_dir`` holds for an image model,
        else random float inputs of the signature's shape.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "model_name", "model_version", "data_dir", "inputs_file",
                      "atol", "rtol")

    def __init__(self, *, model_name: str, model_version: int | str, data_dir: str | None = None,
                 opset: int = DEFAULT_OPSET, atol: float | None = None, rtol: float | None = None, inputs_file: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_name, self.model_version, self.data_dir = model_name, model_version, data_dir
        self.opset, self.atol, self.rtol, self.inputs_file = opset, atol, rtol, inputs_file

    def execute(self, context: Context) -> dict[str, Any]:
        model, parity = export_registered(self.backend.models, self.model_name, int(self.model_version),
                                          data_dir=self.data_dir, opset=self.opset, atol=self.atol, rtol=self.rtol,
                                          inputs_file=self.inputs_file or None,
                                          trainer_torch=self.backend.capabilities.trainer_torch)
        self.link(context, "model", model.name, model.version)
        self.log.info("Exported %s:%s to %s:%s; parity: %s", self.model_name, self.model_version, model.name,
                      model.version, ParityReport.from_dict(parity).summary())
        return {"model_name": model.name, "model_version": model.version, "opset": self.opset, "parity": parity}

    # -- OpenLineage -------------------------------------------------------------------------------------
    def lineage_inputs(self) -> list[lineage.LineageDataset]:
        """The model version it exports and the data its parity gate reads."""
        namespace = self.lineage_namespace
        gate = [lineage.data(self.data_dir, namespace)] if self.data_dir else []
        return [lineage.model_version(namespace, self.model_name, self.model_version), *gate]

    def lineage_outputs(self, result: dict[str, Any]) -> list[lineage.LineageDataset]:
        """The ONNX model version it registered."""
        if not result.get("model_name"):
            return []
        return [lineage.model_version(self.lineage_namespace, result["model_name"], result["model_version"])]
