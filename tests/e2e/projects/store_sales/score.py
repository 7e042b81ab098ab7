"""``{"data": [{"words": [ids...], "numeric": [3 numbers]}, ...]}`` -> each store's demand class and weekly sales,
read from the ONNX model's outputs by name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

session = None
classes: list[str] = []


def init() -> None:
    global session, classes
    signature_file = next(Path(os.environ.get("AZUREML_MODEL_DIR", ".")).rglob("signature.json"))
    classes = json.loads(signature_file.read_text())["classes"]
    session = ort.InferenceSession(str(signature_file.parent / "model.onnx"), providers=["CPUExecutionProvider"])


def run(raw_data: str):
    rows = json.loads(raw_data)["data"]
    longest = max(len(row["words"]) for row in rows)
    ids = np.zeros((len(rows), longest), np.int64)
    for i, row in enumerate(rows):
        ids[i, :len(row["words"])] = row["words"]
    feed = {"input_ids": ids, "attention_mask": ids != 0,
            "numeric": np.array([row["numeric"] for row in rows], np.float32)}
    out = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))
    return {"predictions": [{"demand": classes[int(scores.argmax())], "weekly_sales": round(float(sales[0]), 3)}
                            for scores, sales in zip(out["logits"], out["weekly_sales"], strict=True)]}
