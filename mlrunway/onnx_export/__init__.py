"""ONNX export with a parity gate against PyTorch, run as a job on the backend (:mod:`.registered`, :mod:`.job`)."""

from mlrunway.onnx_export.export import DEFAULT_OPSET, export_onnx, read_signature
from mlrunway.onnx_export.parity import ATOL, RTOL, ParityReport, compare, tolerance_used
from mlrunway.onnx_export.registered import ExportSettings, export_job, export_registered, read_verdict, register_export

__all__ = ["ATOL", "DEFAULT_OPSET", "RTOL", "ExportSettings", "ParityReport", "compare", "export_job", "export_onnx",
           "export_registered", "read_signature", "read_verdict", "register_export", "tolerance_used"]
