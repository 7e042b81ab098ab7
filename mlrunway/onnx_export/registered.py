"""Export a registered model and register the ONNX file as a new version, with its parity figures."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Protocol

from mlrunway.errors import MlrunwayError
from mlrunway.extras import installed_version, require
from mlrunway.onnx_export.export import DEFAULT_OPSET, export_onnx


class ModelStore(Protocol):
    """What export needs of a model registry (the local one, or Azure's through the backend)."""

    def download(self, name: str, version: int | str | None, dest: str | Path) -> Path: ...
    def register(self, name: str, path: str | Path, *, base: str | Path | None = None, format: str = "custom",
                 tags: dict[str, str] | None = None, properties: dict[str, Any] | None = None,
                 description: str = "") -> Any: ...


def export_registered(models: ModelStore, name: str, version: int | str, *, onnx_name: str | None = None,
                      data_dir: str | Path | None = None, opset: int = DEFAULT_OPSET, atol: float | None = None,
                      rtol: float | None = None, min_top1_agreement: float = 1.0,
                      inputs_file: str | None = None, trainer_torch: str | None = None) -> tuple[Any, dict[str, Any]]:
    """Download ``name:version``, export and gate it, register ``onnx_name`` (default ``<name>-onnx``).

    Return (the new model version, the parity report as a dict). A failed gate (an output outside
    ``atol + rtol * |torch|``; None: the default rule, ``ATOL`` and ``RTOL``) registers nothing. ``trainer_torch``:
    the torch the backend's jobs trained with, where it is not this process's (a backend's
    ``Capabilities.trainer_torch``); a ``.pt2`` is only promised to load in the torch that wrote it, so this
    worker's torch must be that one.
    """
    require("exporting a model to ONNX", "export", "torch", "onnx", "onnxscript", "onnxruntime")
    here = installed_version("torch")
    if trainer_torch is not None and here != trainer_torch:
        raise MlrunwayError(f"export of {name}:{version}: the backend's jobs train with torch {trainer_torch}, this "
                            f"worker has torch {here}; a .pt2 loads only in the torch that wrote it: install "
                            f"torch=={trainer_torch} where the export task runs")
    with tempfile.TemporaryDirectory() as scratch:
        source = models.download(name, version, Path(scratch) / "source")
        report = export_onnx(source, Path(scratch) / "onnx", opset=opset, data_dir=data_dir, atol=atol,
                             rtol=rtol, min_top1_agreement=min_top1_agreement, inputs_file=inputs_file)
        figures = report.to_dict()
        registered = models.register(
            onnx_name or f"{name}-onnx", "onnx", base=scratch, format="onnx",
            tags={"source_model": f"{name}:{version}", "opset": str(opset)},
            properties={"source_model": f"{name}:{version}", "opset": opset, "parity": figures},
            description=f"ONNX export of {name}:{version}; {report.summary()}",
        )
    return registered, figures
