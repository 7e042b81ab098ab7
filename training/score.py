"""Score images with the exported ONNX model: Azure ML's scoring-script contract.

``init()`` runs once per worker: it loads ``model.onnx`` and ``signature.json`` from ``AZUREML_MODEL_DIR`` into
one ONNX Runtime session. ``run(raw_data)`` takes the request body as a string:

- ``{"data": [...]}``: a batch of images as nested arrays in the signature's shape (N, C, H, W), preprocessed;
- ``{"images": ["<base64 PNG or JPEG>", ...]}``: raw images, preprocessed here as the signature says.

It returns ``{"predictions": [{"label", "probability", "probabilities"}...]}``. A bad request comes back as an
``AMLResponse`` with status 400 and a message that names the problem. The same file runs on Azure ML.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
from PIL import Image, UnidentifiedImageError

try:  # Azure ML's scoring server provides it
    from azureml.contrib.services.aml_response import AMLResponse
except ImportError:  # the local endpoint reads the same two attributes

    class AMLResponse:  # type: ignore[no-redef]
        def __init__(self, message: str, status_code: int, json_str: bool = False) -> None:
            self.message, self.status_code, self.json_str = message, status_code, json_str


session: ort.InferenceSession | None = None
signature: dict = {}


def init() -> None:
    global session, signature
    root = Path(os.environ.get("AZUREML_MODEL_DIR", "."))
    found = next(root.rglob("signature.json"), None)  # Azure nests the files under the model's own folder
    if found is None:
        raise FileNotFoundError(f"no signature.json under AZUREML_MODEL_DIR={root}")
    signature = json.loads(found.read_text())
    options = ort.SessionOptions()
    # One request is one small batch: a thread per worker beats a thread pool fighting the other workers.
    options.intra_op_num_threads = int(os.environ.get("ORT_INTRA_OP_NUM_THREADS", "1"))
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(found.parent / signature.get("file", "model.onnx")), options,
                                   providers=["CPUExecutionProvider"])


def _bad(message: str) -> AMLResponse:
    return AMLResponse(json.dumps({"error": message}), 400, json_str=True)


def _decode_images(items: list) -> np.ndarray:
    prep = signature["preprocessing"]
    height, width = prep["size"]
    arrays = []
    for index, item in enumerate(items):
        try:
            image = Image.open(io.BytesIO(base64.b64decode(item, validate=True)))
        except (binascii.Error, TypeError, ValueError, UnidentifiedImageError) as exc:
            raise ValueError(f"images[{index}] is not a base64-encoded PNG or JPEG ({exc})") from exc
        image = image.convert(prep.get("color", "L")).resize((width, height))
        array = np.asarray(image, dtype=np.float32) * float(prep.get("scale", 1 / 255))
        array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
        arrays.append((array - _channels(prep, "mean", 0.0)) / _channels(prep, "std", 1.0))
    return np.stack(arrays).astype(np.float32)


def _channels(prep: dict, key: str, default: float) -> np.ndarray:
    """``mean`` or ``std``: one number for every channel, or a list of one per channel (shape (C, 1, 1))."""
    return np.asarray(prep.get(key, default), dtype=np.float32).reshape(-1, 1, 1)


def _batch(body: object) -> np.ndarray:
    if not isinstance(body, dict) or not ({"data", "images"} & body.keys()):
        raise ValueError('the body must be a JSON object with "data" (nested arrays) or "images" (base64 strings)')
    if "images" in body:
        if not isinstance(body["images"], list) or not body["images"]:
            raise ValueError('"images" must be a non-empty list of base64 strings')
        return _decode_images(body["images"])
    try:
        batch = np.asarray(body["data"], dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f'"data" must hold numbers only ({exc})') from exc
    expected = signature["inputs"][0]["shape"]
    if batch.ndim == len(expected) - 1:
        batch = batch[None]  # one image without its batch axis
    if batch.ndim != len(expected) or list(batch.shape[1:]) != expected[1:] or batch.shape[0] == 0:
        shown = ["N" if d is None else d for d in expected]
        raise ValueError(f'"data" has shape {list(batch.shape)}; expected {shown} (or one image without N)')
    if not np.isfinite(batch).all():
        raise ValueError('"data" holds NaN or infinity')
    return batch


def run(raw_data: str) -> dict | AMLResponse:
    try:
        body = json.loads(raw_data)
    except json.JSONDecodeError as exc:
        return _bad(f"malformed JSON: {exc}")
    try:
        batch = _batch(body)
    except ValueError as exc:
        return _bad(str(exc))
    logits = session.run(None, {session.get_inputs()[0].name: batch})[0]
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    classes = signature["classes"]
    return {"predictions": [
        {"label": classes[int(row.argmax())], "probability": round(float(row.max()), 6),
         "probabilities": [round(float(p), 6) for p in row]}
        for row in probabilities
    ]}
