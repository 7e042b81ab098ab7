from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlrunway.errors import ParityError
from mlrunway.onnx_export import DEFAULT_OPSET, compare, export_onnx, export_registered

pytestmark = pytest.mark.slow


def test_export_passes_parity_on_validation_images(trained_model, digits, tmp_path):
    import onnx

    report = export_onnx(trained_model, tmp_path / "onnx", data_dir=digits)
    assert report.passed and report.inputs == "validation images" and report.samples == 256
    assert report.max_abs_diff < 1e-4 and report.top1_agreement == 1.0 and report.tolerance_used < 0.3
    model = onnx.load(str(tmp_path / "onnx" / "model.onnx"))
    assert model.opset_import[0].version == DEFAULT_OPSET
    batch_dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch_dim.dim_param and not batch_dim.dim_value  # a dynamic batch axis
    signature = json.loads((tmp_path / "onnx" / "signature.json").read_text())
    assert signature["format"] == "onnx" and signature["parity"]["passed"] and signature["classes"][0] == "0"


def test_export_without_data_uses_random_inputs_of_the_signature_shape(trained_model, tmp_path):
    report = export_onnx(trained_model, tmp_path / "onnx", samples=32)
    assert report.inputs == "random inputs" and report.samples == 32 and report.passed


def test_data_dir_is_read_as_images_only_for_an_image_classifier(trained_model, digits, tmp_path):
    """An image classifier's data_dir without val/ is a named error, not random inputs in its place; a model
    without classes and preprocessing (a regressor) never reads data_dir as images."""
    from mlrunway.errors import SpecError
    from mlrunway.onnx_export.export import held_out_inputs, read_signature

    signature = read_signature(Path(trained_model))
    with pytest.raises(SpecError, match=r"data_dir: .*nowhere/val does not exist; an image classifier's parity gate"):
        held_out_inputs(signature, tmp_path / "nowhere", 8)
    assert held_out_inputs(signature, digits, 8)[1] == "validation images"
    regressor = {"inputs": [{"name": "features", "dtype": "float32", "shape": [None, 8]}]}
    inputs, source = held_out_inputs(regressor, digits, 8)  # digits are no inputs of this model: not read
    assert source == "random inputs" and inputs["features"].shape == (8, 8) and inputs["features"].dtype == np.float32


def test_onnx_model_whose_output_differs_fails_the_gate_with_its_figures(trained_model, onnx_model, digits, tmp_path):
    import onnx
    import torch

    from mlrunway.onnx_export.export import held_out_inputs, parity_gate, read_signature

    # Perturb the classifier's bias in the exported file: the graph stays valid, its answers drift from PyTorch's.
    model = onnx.load(str(onnx_model / "model.onnx"))
    bias = next(t for t in model.graph.initializer if list(t.dims) == [10])
    values = onnx.numpy_helper.to_array(bias).copy()
    values[3] += 5.0
    bias.CopyFrom(onnx.numpy_helper.from_array(values, bias.name))
    broken = tmp_path / "broken.onnx"
    onnx.save(model, str(broken))

    program = torch.export.load(trained_model / "model.pt2")
    inputs, source = held_out_inputs(read_signature(trained_model), digits, 128)
    with pytest.raises(ParityError, match=r"onnx parity gate failed: max \|onnx - torch\| 5, \S+ times the tolerance "
                                          r"\(1e-05 \+ 0.0001·\|torch\|\), top-1 agreement .*% \(required 100.00%\) "
                                          r"on 128 validation images"):
        parity_gate(broken, program.module(), inputs, source=source, min_top1_agreement=1.0)


def test_compare_reports_shape_mismatch():
    with pytest.raises(ParityError, match=r"output logits has shape \(4, 9\), and PyTorch.s \(4, 10\)"):
        compare(lambda b: np.zeros((len(b), 10)), lambda b: np.zeros((len(b), 9)), np.zeros((4, 1, 8, 8), np.float32),
                source="random inputs", atol=1e-4, min_top1_agreement=1.0)


def test_export_registered_runs_a_job_and_adds_an_onnx_version_with_parity_opset_and_source(workspace, trained_model,
                                                                                          digits):
    """Export and its gate run as a local job (the exporter's code folder, in the backend's Python); the task's
    side reads its parity.json and registers its onnx output."""
    from mlrunway.local.backend import LocalBackend

    backend = LocalBackend(workspace)
    backend.models.register("digits", trained_model)
    onnx_version, figures = export_registered(backend, "digits", 1, job_name="run-export", data_dir=str(digits))
    assert (onnx_version.name, onnx_version.version, onnx_version.format) == ("digits-onnx", 1, "onnx")
    assert onnx_version.properties["source_model"] == "digits:1" and onnx_version.properties["opset"] == DEFAULT_OPSET
    assert onnx_version.properties["source_job"] == "run-export"
    assert onnx_version.properties["parity"]["passed"] and figures["samples"] == 256
    assert sorted(p.name for p in Path(onnx_version.path).iterdir()) == ["model.onnx", "signature.json"]
    job = backend.jobs.get("run-export")
    assert job.status.value == "Completed"
    verdict = json.loads((Path(backend.named_output("run-export", "report")) / "parity.json").read_text())
    assert verdict["passed"] and verdict["report"] == figures and verdict["torch"]
    # The ONNX model's signature is a property of its version: the deploy task reads it without a download.
    assert onnx_version.properties["signature"] == json.loads((Path(onnx_version.path) / "signature.json").read_text())
    # A retried task registers nothing new: the version it registered is found by its job.
    from mlrunway.onnx_export import register_export

    again = register_export(backend, "run-export", backend.models.get("digits", 1), verdict, opset=DEFAULT_OPSET)
    assert again.version == 1 and [m.version for m in backend.models.list("digits-onnx")] == [1]
