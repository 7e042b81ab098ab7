"""The export job's runner (``mlrunway.onnx_export.job``) and the code folder it ships as: every verdict written to
parity.json with exit code 0, read back by the task's side into the error it names; the shipped modules import
nothing of mlrunway. The whole job, run by a backend, is tested in test_export.py (local) and the Azure tests (the
fake service's compute runs the shipped folder where mlrunway cannot be imported)."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from mlrunway.backend.fake import FakeBackend
from mlrunway.errors import JobFailed, ParityError, SpecError
from mlrunway.onnx_export import job, read_verdict
from mlrunway.onnx_export.registered import RUNNER_PACKAGE, SHIPPED, code_folder

ALLOWED = {"numpy", "torch", "onnx", "onnxscript", "onnxruntime", "PIL"}


def run(tmp_path: Path, model: Path, *extra: str) -> dict:
    assert job.main(["--model", str(model), "--onnx", str(tmp_path / "onnx"), "--report", str(tmp_path / "report"),
                     *extra]) == 0
    return json.loads((tmp_path / "report" / job.REPORT_FILE).read_text())


def nan_model(folder: Path) -> Path:
    """A team's own model.onnx (no .pt2 beside it) whose outputs are NaN: log of minus |x| - 1."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["n"]),
             helper.make_node("Log", ["n"], ["logits"])]
    graph = helper.make_graph(nodes, "nan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])])
    folder.mkdir()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9  # what every ONNX Runtime of this range loads
    onnx.save(model, folder / "model.onnx")
    (folder / "signature.json").write_text(json.dumps({"file": "model.onnx", "inputs": [
        {"name": "x", "dtype": "float32", "shape": [None, 4]}]}))
    np.save(folder / "sample_inputs.npy", np.ones((8, 4), np.float32))
    return folder


def test_the_shipped_modules_import_only_each_other_the_standard_library_and_the_ml_packages(tmp_path):
    folder = code_folder(tmp_path) / RUNNER_PACKAGE
    assert sorted(p.name for p in folder.iterdir()) == sorted([*SHIPPED, "__init__.py"])
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                top = node.module.split(".")[0]
            elif isinstance(node, ast.Import):
                top = ",".join(alias.name.split(".")[0] for alias in node.names)
            else:
                continue
            for name in top.split(","):
                if path.name == "errors.py" and name == "mlrunway":  # the library's branch, never taken when shipped
                    continue
                assert name in sys.stdlib_module_names or name in ALLOWED, f"{path.name} imports {name}"


def test_a_failed_gate_is_a_verdict_with_exit_code_0_and_the_task_raises_parity_error(tmp_path):
    verdict = run(tmp_path, nan_model(tmp_path / "model"), "--inputs-file", "sample_inputs.npy")
    assert verdict["passed"] is False and verdict["error"] == "ParityError"
    assert "non-finite values" in verdict["message"]
    fake = FakeBackend(tmp_path / "fake")
    report = Path(fake.named_output("m-export", "report"))
    report.mkdir(parents=True)
    (report / job.REPORT_FILE).write_text(json.dumps(verdict))
    with pytest.raises(ParityError, match=r"^export job m-export: onnx: model.onnx gave \(8, 4\) outputs with non-finite"):
        read_verdict(fake, "m-export", environment_field="export.environment")


def test_a_model_export_refuses_is_a_spec_error_verdict(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "signature.json").write_text(json.dumps({"inputs": [{"name": "x", "dtype": "int8", "shape": [None]}]}))
    verdict = run(tmp_path, model)
    assert (verdict["passed"], verdict["error"]) == (False, "SpecError") and "int8" in verdict["message"]


def test_an_environment_without_what_export_needs_or_with_another_torch_is_named(tmp_path, monkeypatch):
    model = nan_model(tmp_path / "model")
    other = run(tmp_path, model, "--trainer-torch", "9.9.9")
    assert other["error"] == "environment" and "and the trials train with torch 9.9.9" in other["message"]
    monkeypatch.setattr(job, "NEEDS", (*job.NEEDS, "onnx_that_is_not_installed"))
    lacking = run(tmp_path, model)
    assert (lacking["error"], lacking["missing"]) == ("environment", ["onnx_that_is_not_installed"])
    fake = FakeBackend(tmp_path / "fake")
    report = Path(fake.named_output("m-export", "report"))
    report.mkdir(parents=True)
    (report / job.REPORT_FILE).write_text(json.dumps(lacking))
    with pytest.raises(SpecError, match=r"^export.environment: export job m-export: the export job's environment lacks "
                                        r"onnx_that_is_not_installed .*; name an environment with the trials' torch"):
        read_verdict(fake, "m-export", environment_field="export.environment")


@pytest.mark.parametrize(("content", "match"), [
    (None, "left no readable parity.json"), ("{not json", "left no readable parity.json"),
    ('{"format": 99, "passed": true}', "is not a verdict of format 1"),
])
def test_a_job_that_left_no_verdict_fails_naming_its_log(tmp_path, content, match):
    fake = FakeBackend(tmp_path / "fake")
    report = Path(fake.named_output("m-export", "report"))
    report.mkdir(parents=True)
    if content is not None:
        (report / job.REPORT_FILE).write_text(content)
    with pytest.raises(JobFailed, match=match):
        read_verdict(fake, "m-export", environment_field="export.environment")


@pytest.mark.parametrize(("inputs_file", "opset"), [("/abs/x.npy", 18), ("../x.npy", 18), ("x.csv", 18),
                                                    ("my inputs.npy", 18), (None, 99), (None, True)])
def test_an_export_job_that_could_not_run_is_refused_before_it_is_submitted(tmp_path, inputs_file, opset):
    from mlrunway.onnx_export import export_job

    model = type("Model", (), {"name": "m", "version": 1, "path": str(tmp_path)})
    field = "export.inputs_file" if inputs_file else "export.opset"
    with pytest.raises(SpecError, match=rf"^{re.escape(field)}: "):
        export_job(model, tmp_path, inputs_file=inputs_file, opset=opset)
