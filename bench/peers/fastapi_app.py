"""The peer a user would write: a plain FastAPI app over the same ONNX model, served by uvicorn.

    MODEL_DIR=<folder with model.onnx> uvicorn --factory fastapi_app:create_app --workers 2

It takes the same ``{"data": [...]}`` body and answers the same predictions as training/score.py, with no
auth, no traffic routing and no limits: the cost of serving alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI
from pydantic import BaseModel


class ScoreRequest(BaseModel):
    data: list


def create_app() -> FastAPI:
    root = Path(os.environ["MODEL_DIR"])
    classes = json.loads((root / "signature.json").read_text())["classes"]
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(root / "model.onnx"), options, providers=["CPUExecutionProvider"])
    app = FastAPI()

    @app.post("/score")
    def score(request: ScoreRequest) -> dict:
        logits = session.run(None, {"input": np.asarray(request.data, dtype=np.float32)})[0]
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = exp / exp.sum(axis=1, keepdims=True)
        return {"predictions": [{"label": classes[int(p.argmax())], "probability": float(p.max()),
                                 "probabilities": p.tolist()} for p in probabilities]}

    return app
