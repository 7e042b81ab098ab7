"""Score demand forecasts: ``{"data": [[8 features], ...]}`` -> ``{"predictions": [...]}`` (Azure ML's contract).

A malformed request is the client's error: a 400 (``AMLResponse``) that names the problem.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

try:  # Azure ML's scoring server provides it
    from azureml.contrib.services.aml_response import AMLResponse
except ImportError:  # the local endpoint reads the same two attributes
    class AMLResponse:  # type: ignore[no-redef]
        def __init__(self, message: str, status_code: int, json_str: bool = False) -> None:
            self.message, self.status_code, self.json_str = message, status_code, json_str

session = None
FEATURES = 8


def init() -> None:
    global session
    root = Path(os.environ.get("AZUREML_MODEL_DIR", "."))
    signature = next(root.rglob("signature.json"))
    file = json.loads(signature.read_text()).get("file", "model.onnx")
    session = ort.InferenceSession(str(signature.parent / file), providers=["CPUExecutionProvider"])


def run(raw_data: str):
    try:
        rows = np.asarray(json.loads(raw_data)["data"], dtype=np.float32)
    except (ValueError, KeyError, TypeError) as exc:
        return AMLResponse(json.dumps({"error": f'send {{"data": [[{FEATURES} numbers], ...]}} ({exc})'}), 400,
                           json_str=True)
    if rows.ndim != 2 or rows.shape[1] != FEATURES or not np.isfinite(rows).all():
        return AMLResponse(json.dumps({"error": f"data has shape {list(rows.shape)}; expected [N, {FEATURES}] "
                                                "finite numbers"}), 400, json_str=True)
    predictions = session.run(None, {session.get_inputs()[0].name: rows})[0][:, 0]
    return {"predictions": [float(p) for p in predictions]}
