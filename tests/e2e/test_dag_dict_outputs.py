"""A Hugging Face-style model of a team's own through a ``lifecycle(...)`` DAG on the local backend (issue 83):
``forward(input_ids=, attention_mask=, numeric=)`` with a bool mask, exported with keyword inputs, answering a dict
``{"logits", "weekly_sales"}``; each output exported by its name and gated on its own, and a deployment whose
score.py reads the outputs by name answers stores it never saw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlrunway.local.backend import LocalBackend

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CODE = Path(__file__).parent / "projects" / "store_sales"
DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG

from mlrunway.lifecycle import lifecycle

with DAG("store_sales", schedule=None, start_date=datetime(2026, 1, 5)) as dag:
    lifecycle(
        job={{"command": "python fit.py --width ${{{{inputs.width}}}} --lr ${{{{inputs.lr}}}} --epochs 3 "
                        "--model-dir ${{{{outputs.model}}}}",
             "code": {code!r}, "experiment_name": "store-sales", "inputs": {{"width": 16, "lr": 0.02}},
             "outputs": {{"model": {{"type": "uri_folder"}}}}}},
        sweep={{"search_space": {{"width": {{"type": "choice", "values": [8, 16]}}}},
               "objective": {{"primary_metric": "val_acc", "goal": "maximize"}}, "seed": 1,
               "limits": {{"max_total_trials": 2, "max_concurrent_trials": 2}}}},
        export={{"inputs_file": "sample_inputs.npz"}},
        deployment={{"sample_request": "sample_request.json", "keep_endpoint": True}},
        model_path="${{{{outputs.model}}}}", name_prefix="store")
"""


RUN = """
import sys
sys.path.insert(0, sys.argv[1])
from store_sales import dag
run = dag.test()
print("RUN", run.state, run.run_id, flush=True)
"""


def test_a_dict_output_keyword_input_model_with_a_bool_mask_exports_gates_and_serves_its_outputs_by_name(
        airflow_db, tmp_path):
    import os
    import subprocess
    import sys

    import onnx

    from mlrunway.airflow.summary import run_results

    dags = tmp_path / "dags"  # a DAG file, as a team writes one, run in an Airflow process of its own
    dags.mkdir()
    (dags / "store_sales.py").write_text(DAG_FILE.format(code=str(CODE)))
    done = subprocess.run([sys.executable, "-c", RUN, str(dags)], capture_output=True, text=True, timeout=900, env={
        **os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "MLRUNWAY_WORKSPACE": str(tmp_path / "ws")})
    said = [line.split() for line in done.stdout.splitlines() if line.startswith("RUN ")]
    assert done.returncode == 0 and said, done.stdout[-3000:] + done.stderr[-3000:]
    [(_, state, run_id)] = said
    results = run_results("store_sales", run_id)
    assert state == "success", results
    backend = LocalBackend.at(tmp_path / "ws")

    parity = results["export_onnx"]["parity"]
    assert parity["passed"] and parity["inputs"] == "inputs from sample_inputs.npz"
    assert [o["name"] for o in parity["outputs"]] == ["logits", "weekly_sales"]
    assert all(0 <= o["tolerance_used"] <= 1 for o in parity["outputs"])
    assert parity["top1_output"] == "logits" and parity["top1_agreement"] == 1.0
    exported = backend.models.get(results["export_onnx"]["model_name"], results["export_onnx"]["model_version"])
    graph = onnx.load(f"{exported.path}/model.onnx").graph
    assert [(i.name, i.type.tensor_type.elem_type) for i in graph.input] == [
        ("input_ids", onnx.TensorProto.INT64), ("attention_mask", onnx.TensorProto.BOOL),
        ("numeric", onnx.TensorProto.FLOAT)]  # the program's keyword order, not the signature's
    assert [o.name for o in graph.output] == ["logits", "weekly_sales"]

    deployed = results["deploy_blue"]
    assert deployed["smoke_matched"].startswith("as expected (score.py run on ")
    stores = [{"words": [3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 3, 6], "numeric": [2.0, 1.0, 0.0]},
              {"words": [1], "numeric": [-2.0, 0.0, 0.0]}]  # lengths the model was not exported on
    try:
        answer = json.loads(backend.endpoints.invoke(deployed["endpoint"], payload={"data": stores}))
        # What the exported model says of them, read by output name here too.
        import numpy as np
        import onnxruntime as ort

        session = ort.InferenceSession(f"{exported.path}/model.onnx")
        ids = np.zeros((2, 15), np.int64)
        for i, store in enumerate(stores):
            ids[i, :len(store["words"])] = store["words"]
        out = dict(zip([o.name for o in session.get_outputs()], session.run(None, {
            "input_ids": ids, "attention_mask": ids != 0,
            "numeric": np.array([s["numeric"] for s in stores], np.float32)}), strict=True))
        classes = json.loads((Path(exported.path) / "signature.json").read_text())["classes"]
        assert answer == {"predictions": [{"demand": classes[int(scores.argmax())], "weekly_sales": round(float(y[0]), 3)}
                                          for scores, y in zip(out["logits"], out["weekly_sales"], strict=True)]}
    finally:
        backend.endpoints.delete(deployed["endpoint"])
    assert backend.endpoints.list() == [] and backend.leftovers() == []
