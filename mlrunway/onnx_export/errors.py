"""The errors the exporter raises, and the one helper it shares with mlrunway.

In the library (``mlrunway.onnx_export``) they are mlrunway's own, so a caller catches them as any SpecError. The
exporter also runs where mlrunway is not installed: :mod:`.job` is an export job's runner, and these modules are
shipped as that job's code folder, a package of another name (:func:`mlrunway.onnx_export.registered.code_folder`).
There they are stand-ins of the same names (:mod:`._standalone`), raised and caught inside the job alone: the job
reports them in its ``parity.json``, and the export task raises mlrunway's own from that report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__ == "mlrunway.onnx_export":
    from mlrunway.errors import ParityError, SpecError, shorten
else:  # shipped as a job's code folder: no mlrunway there
    from ._standalone import ParityError, SpecError, shorten

__all__ = ["ParityError", "SpecError", "shorten"]
