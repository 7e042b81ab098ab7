"""Score images with the exported ONNX model: Azure ML's scoring-script contract.

``init()`` runs once per worker: it loads ``model.onnx`` and ``signature.json`` from ``AZUREML_MODEL_DIR`` into
one ONNX Runtime session. ``run(raw_data)`` takes the request body as a string:

- ``{"data": [...]}``: a batch of images as nested arrays in the signature's shape (N, C, H, W), preprocessed;
- ``{"images": ["<base64 PNG or JPEG>", ...]}``: raw images, preprocessed here as the signature says.

It returns ``{"predictions": [{"label", "probability", "probabilities"}...]}``. Every malformed request comes
back as an ``AMLResponse`` with status 400 and a message that names the problem: JSON nested too deep, a number
out of range, values that are not numbers (strings, booleans), a wrong shape, too many images, an image that is
not a PNG or JPEG, one with more pixels than ``MAX_PIXELS`` (read from its header, before decoding), one that
does not decode, or values so large that the model's output overflows (NaN is no JSON a client can read).

When the deployment has a data collector (``model_inputs`` and ``model_outputs``), each scored image is collected
through Azure ML's SDK (``azureml-ai-monitoring``'s ``Collector``): as inputs, its summary statistics (``mean``,
``std``, ``p10``, ``p90`` of the model's input) rather than its pixels; as outputs, its ``label`` and
``probability``; both with its request's ``correlationid``. A DataFrame costs more to build than a request costs
to score, so rows are handed over as one DataFrame a second, by a thread of their own, never on the request path;
the last second's rows at the worker's exit (a redeploy, a scale-in, the endpoint's deletion). The same file runs
on Azure ML.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import io
import itertools
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from PIL import Image, UnidentifiedImageError

try:  # Azure ML's data collector SDK; without it (or without a data collector on the deployment) nothing is collected
    from azureml.ai.monitoring import Collector
except ImportError:  # pragma: no cover - the project's environment and the scoring image both install it
    Collector = None

try:  # Azure ML's scoring server provides it
    from azureml.contrib.services.aml_response import AMLResponse
except ImportError:  # the local endpoint reads the same two attributes

    class AMLResponse:  # type: ignore[no-redef]
        def __init__(self, message: str, status_code: int, json_str: bool = False) -> None:
            self.message, self.status_code, self.json_str = message, status_code, json_str


session: ort.InferenceSession | None = None
signature: dict = {}
collected: Collected | None = None
MAX_IMAGES = 256  # images (or inputs) per request
MAX_DEPTH = 8  # nesting of "data"; an image batch is 4 deep
MIN_PIXEL_BOUND = 1024 * 1024  # an uploaded image may have this many pixels, or 64 times the model's input


class Collected:
    """Rows for the deployment's ``model_inputs`` and ``model_outputs``, collected once a second."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.on = True
        self.inputs = Collector(name="model_inputs", on_error=self._refused)
        self.outputs = Collector(name="model_outputs", on_error=self._refused)
        self.rows: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.lock = threading.Lock()
        self.prefix, self.counter = os.urandom(4).hex(), itertools.count()
        if self.on:
            threading.Thread(target=self._loop, args=(every_s,), name="collect", daemon=True).start()
            atexit.register(self.flush)  # the last second's rows, when the server stops this worker

    def _refused(self, error: Exception) -> None:
        """The SDK's answer when the deployment collects nothing (or its queue is full): score on regardless."""
        if "not enabled" in str(error):
            self.on = False
        else:
            print(f"data collector: {error}", file=sys.stderr)

    def add(self, batch: np.ndarray, probabilities: np.ndarray) -> None:
        with self.lock:
            self.rows.append((next(self.counter), batch, probabilities))

    def _loop(self, every_s: float) -> None:
        while True:
            time.sleep(every_s)
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - collection never stops scoring
                print(f"data collector: {type(exc).__name__}: {exc}", file=sys.stderr)

    def flush(self) -> None:
        import pandas as pd

        with self.lock:
            rows, self.rows = self.rows, []
        if not rows:
            return
        ids = [f"{self.prefix}-{n}" for n, batch, _ in rows for _ in range(len(batch))]
        images = np.concatenate([batch for _, batch, _ in rows]).reshape(len(ids), -1)
        probabilities = np.concatenate([p for _, _, p in rows])
        low, high = np.percentile(images, [10, 90], axis=1)
        context = self.inputs.collect(pd.DataFrame({
            "correlationid": ids, "mean": images.mean(axis=1), "std": images.std(axis=1), "p10": low, "p90": high}))
        classes = signature["classes"]
        self.outputs.collect(pd.DataFrame({
            "correlationid": ids, "label": [classes[i] for i in probabilities.argmax(axis=1)],
            "probability": probabilities.max(axis=1)}), context)


def init() -> None:
    global session, signature, collected
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
    collected = Collected() if Collector is not None else None
    if collected is not None and not collected.on:
        collected = None


def _bad(message: str) -> AMLResponse:
    """A 400 whose message names the problem; never an object's address (``<... at 0x7f...>``)."""
    return AMLResponse(json.dumps({"error": re.sub(r" at 0x[0-9a-fA-F]+", "", message)[:500]}), 400, json_str=True)


def _open(index: int, item: object, max_pixels: int) -> Image.Image:
    """A PNG or JPEG, checked from its header (format and pixel count) before a single pixel is decoded."""
    if not isinstance(item, str):
        raise ValueError(f"images[{index}] is not a base64 string")
    try:
        image = Image.open(io.BytesIO(base64.b64decode(item, validate=True)), formats=["PNG", "JPEG"])
    except Image.DecompressionBombError:
        raise ValueError(f"images[{index}] declares more pixels than the limit of {max_pixels}") from None
    except (binascii.Error, ValueError, UnidentifiedImageError, OSError):
        raise ValueError(f"images[{index}] is not a base64-encoded PNG or JPEG") from None
    if image.width * image.height > max_pixels:
        raise ValueError(f"images[{index}] is {image.width}x{image.height} pixels, over the limit of {max_pixels}")
    try:
        image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise ValueError(f"images[{index}] does not decode: truncated or corrupt {image.format} "
                         f"({type(exc).__name__})") from None
    return image


def _decode_images(items: list) -> np.ndarray:
    prep = signature["preprocessing"]
    height, width = prep["size"]
    max_pixels = max(MIN_PIXEL_BOUND, 64 * height * width)
    arrays = []
    for index, item in enumerate(items):
        image = _open(index, item, max_pixels)
        image = image.convert(prep.get("color", "L")).resize((width, height))
        array = np.asarray(image, dtype=np.float32) * float(prep.get("scale", 1 / 255))
        array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
        arrays.append((array - _channels(prep, "mean", 0.0)) / _channels(prep, "std", 1.0))
    return np.stack(arrays).astype(np.float32)


def _channels(prep: dict, key: str, default: float) -> np.ndarray:
    """``mean`` or ``std``: one number for every channel, or a list of one per channel (shape (C, 1, 1))."""
    return np.asarray(prep.get(key, default), dtype=np.float32).reshape(-1, 1, 1)


def _depth(value: object, limit: int) -> None:
    """Raise ValueError when ``value`` nests lists deeper than ``limit`` or holds a boolean anywhere (numpy would
    read ``true`` among numbers as 1.0). Iteratively, one level at a time: no recursion to exhaust."""
    level, frontier = 0, [value]
    while True:
        if any(item is True or item is False for item in frontier):
            raise ValueError('"data" must hold numbers only, not booleans')
        if not any(isinstance(item, list) for item in frontier):
            return
        level += 1
        if level > limit:
            raise ValueError(f'"data" is nested deeper than {limit} levels')
        frontier = [x for item in frontier if isinstance(item, list) for x in item]


def _batch(body: object) -> np.ndarray:
    if not isinstance(body, dict) or not ({"data", "images"} & body.keys()):
        raise ValueError('the body must be a JSON object with "data" (nested arrays) or "images" (base64 strings)')
    if "images" in body:
        if not isinstance(body["images"], list) or not body["images"]:
            raise ValueError('"images" must be a non-empty list of base64 strings')
        if len(body["images"]) > MAX_IMAGES:
            raise ValueError(f'"images" holds {len(body["images"])} images; at most {MAX_IMAGES} a request')
        return _decode_images(body["images"])
    _depth(body["data"], MAX_DEPTH)
    try:
        raw = np.asarray(body["data"])
    except (ValueError, OverflowError):
        raise ValueError('"data" must be a regular array of numbers (every image the same shape)') from None
    if raw.dtype.kind not in "iuf":  # strings, booleans, numbers past int64, ragged rows
        raise ValueError(f'"data" must hold numbers only, not {_kind(raw.dtype.kind)}')
    if raw.ndim == 0:
        raise ValueError('"data" must be an array of inputs (nested lists), not a single number')
    if len(raw) > MAX_IMAGES:
        raise ValueError(f'"data" holds {len(raw)} inputs; at most {MAX_IMAGES} a request')
    with np.errstate(over="ignore"):
        batch = raw.astype(np.float32)
    expected = signature["inputs"][0]["shape"]
    if batch.ndim == len(expected) - 1:
        batch = batch[None]  # one image without its batch axis
    if batch.ndim != len(expected) or list(batch.shape[1:]) != expected[1:] or batch.shape[0] == 0:
        shown = ["N" if d is None else d for d in expected]
        raise ValueError(f'"data" has shape {list(batch.shape)}; expected {shown} (or one image without N)')
    if not np.isfinite(batch).all():
        raise ValueError('"data" holds NaN, infinity or a number out of float32\'s range')
    return batch


def _kind(kind: str) -> str:
    return {"b": "booleans", "U": "strings", "S": "strings", "O": "mixed values or numbers out of range"}.get(
        kind, f"values of kind {kind!r}")


def run(raw_data: str) -> dict | AMLResponse:
    try:
        body = json.loads(raw_data)
    except RecursionError:
        return _bad("malformed JSON: nested too deep to parse")
    except ValueError as exc:  # JSONDecodeError, and an integer of more digits than Python converts
        return _bad(f"malformed JSON: {exc}")
    try:
        batch = _batch(body)
    except ValueError as exc:
        return _bad(str(exc))
    logits = session.run(None, {session.get_inputs()[0].name: batch})[0]
    if not np.isfinite(logits).all():  # inputs near float32's limits, far from any preprocessed image's
        return _bad('"data" holds values so large that the model\'s output overflows (NaN or infinity)')
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    if collected is not None:
        collected.add(batch, probabilities)
    classes = signature["classes"]
    return {"predictions": [
        {"label": classes[int(row.argmax())], "probability": round(float(row.max()), 6),
         "probabilities": [round(float(p), 6) for p in row]}
        for row in probabilities
    ]}
