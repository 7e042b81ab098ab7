"""Route support tickets: ``{"data": ["ticket text", ...]}`` -> ``{"predictions": [{"label", "probability",
"probabilities"}, ...]}`` (Azure ML's scoring contract). The texts are tokenized by ``vocab``, the module beside
this file that fit.py trained with. A malformed request is the client's error: a 400 that names the problem.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import vocab  # beside this file: Azure ML's scoring server and the local endpoint put the code folder on sys.path

try:  # Azure ML's scoring server provides it
    from azureml.contrib.services.aml_response import AMLResponse
except ImportError:  # the local endpoint reads the same two attributes
    class AMLResponse:  # type: ignore[no-redef]
        def __init__(self, message: str, status_code: int, json_str: bool = False) -> None:
            self.message, self.status_code, self.json_str = message, status_code, json_str

MAX_TICKETS = 256
session = None
classes: list[str] = []


def init() -> None:
    global session, classes
    root = Path(os.environ.get("AZUREML_MODEL_DIR", "."))
    signature_file = next(root.rglob("signature.json"))
    signature = json.loads(signature_file.read_text())
    classes = signature["classes"]
    session = ort.InferenceSession(str(signature_file.parent / signature.get("file", "model.onnx")),
                                   providers=["CPUExecutionProvider"])


def _bad(message: str) -> AMLResponse:
    return AMLResponse(json.dumps({"error": message}), 400, json_str=True)


def run(raw_data: str):
    try:
        texts = json.loads(raw_data)["data"]
    except (ValueError, KeyError, TypeError) as exc:
        return _bad(f'send {{"data": ["ticket text", ...]}} ({type(exc).__name__}: {exc})')
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return _bad('data must be a non-empty list of ticket texts: {"data": ["ticket text", ...]}')
    if len(texts) > MAX_TICKETS:
        return _bad(f"{len(texts)} tickets in one request; send at most {MAX_TICKETS}")
    logits = session.run(None, {session.get_inputs()[0].name: vocab.batch(texts)})[0]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = exp / exp.sum(axis=1, keepdims=True)
    return {"predictions": [{"label": classes[int(p.argmax())], "probability": float(p.max()),
                             "probabilities": [float(v) for v in p]} for p in probabilities]}
