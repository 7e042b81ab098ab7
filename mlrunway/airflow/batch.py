"""The example batch-scoring DAG's task: data_dir's test/ split through a stable endpoint, after each change of its
production model (see dags/batch_scoring.py)."""

from __future__ import annotations

import json
from typing import Any

from mlrunway.airflow.hook import MlrunwayHook
from mlrunway.deploy import accuracy, evaluation_set, serving
from mlrunway.ledger.reports import ReportsFolder


def score_test_split(backend_conn_id: str, endpoint: str, data_dir: str, model: str | None) -> dict[str, Any]:
    """Score every test image through the endpoint's traffic (as any client would) and write the predictions to
    ``reports/batch_scoring/<model>.json``; return where, how many and the accuracy."""
    backend = MlrunwayHook(backend_conn_id).get_backend()
    live = serving(backend, endpoint)
    if live is None:
        raise LookupError(f"endpoint {endpoint}: nothing serves; the batch waits for the next production model")
    evaluation = evaluation_set(backend, live["model"], ".", data_dir, None)
    answers = [json.loads(backend.endpoints.invoke(endpoint, payload=request)) for request in evaluation.requests]
    scored = accuracy(answers, evaluation.expected)
    out = ReportsFolder(backend.reports).batch(live["model"])
    out.parent.mkdir(parents=True, exist_ok=True)
    labels = [p["label"] for answer in answers for p in answer["predictions"]]
    out.write_text(json.dumps({"endpoint": endpoint, "model": live["model"], "event_model": model,
                               "accuracy": scored, "predictions": labels}))
    return {"report": str(out), "images": len(labels), "accuracy": scored, "model": live["model"]}
