"""ONNX export with a parity gate against PyTorch."""

from mlrunway.onnx_export.export import DEFAULT_OPSET, export_onnx, read_signature
from mlrunway.onnx_export.parity import ATOL, RTOL, ParityReport, compare, tolerance_used
from mlrunway.onnx_export.registered import export_registered

__all__ = ["ATOL", "DEFAULT_OPSET", "RTOL", "ParityReport", "compare", "export_onnx", "export_registered",
           "read_signature", "tolerance_used"]
