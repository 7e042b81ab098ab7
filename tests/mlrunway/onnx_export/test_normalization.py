"""A signature's ``mean`` and ``std`` as users write them: one number, or one per channel. Each goes through
export (the parity gate on validation images), the smoke payload and the example score.py, and all three
preprocess the same image to the same numbers; a signature the pipeline cannot use is a named error at export."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest

from mlrunway.errors import ParityError, SpecError
from mlrunway.onnx_export import export_onnx
from tests.conftest import REPO

CLASSES = ["red", "green", "blue"]


def colour_model(folder: Path, mean: object, std: object) -> Path:
    """A small RGB classifier saved as the model contract asks: model.pt2 and signature.json."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 3)).eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(model, (torch.zeros(2, 3, 8, 8),), dynamic_shapes=({0: batch},))
    folder.mkdir(parents=True)
    torch.export.save(program, folder / "model.pt2")
    (folder / "signature.json").write_text(json.dumps({
        "format": "torch.export", "file": "model.pt2", "classes": CLASSES,
        "inputs": [{"name": "x", "dtype": "float32", "shape": [None, 3, 8, 8]}],
        "preprocessing": {"color": "RGB", "size": [8, 8], "scale": 1 / 255, "mean": mean, "std": std}}))
    return folder


def colour_images(root: Path) -> Path:
    from PIL import Image

    rng = np.random.default_rng(1)
    for index, name in enumerate(CLASSES):
        (root / "val" / name).mkdir(parents=True)
        for k in range(4):
            pixels = rng.integers(0, 80, (8, 8, 3), dtype=np.uint8)
            pixels[..., index] += 150
            Image.fromarray(pixels, "RGB").save(root / "val" / name / f"{k}.png")
    return root


def score_module(model_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(model_dir))
    spec = importlib.util.spec_from_file_location("example_score", REPO / "training" / "score.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.init()
    return module


@pytest.mark.parametrize(("mean", "std"), [
    pytest.param(0.5, 0.25, id="scalar"),
    pytest.param([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], id="per-channel"),
])
def test_normalisation_is_the_same_in_export_smoke_and_score_py(tmp_path, monkeypatch, mean, std):
    from PIL import Image

    from mlrunway.deploy.blue import smoke_payload
    from mlrunway.onnx_export.images import preprocess

    data = colour_images(tmp_path / "data")
    report = export_onnx(colour_model(tmp_path / "model", mean, std), tmp_path / "onnx", data_dir=data)
    assert report.passed and report.inputs == "validation images" and report.samples == 12

    signature = json.loads((tmp_path / "onnx" / "signature.json").read_text())
    payload, truth = smoke_payload(data, signature)
    assert np.asarray(payload["data"]).shape == (1, 3, 8, 8) and truth in CLASSES

    image_path = data / "val" / "green" / "0.png"
    with Image.open(image_path) as image:
        ours = preprocess(image, signature["preprocessing"])
    pixels = np.asarray(Image.open(image_path).convert("RGB"), dtype=np.float32).transpose(2, 0, 1) / 255
    expected = (pixels - np.asarray(mean, np.float32).reshape(-1, 1, 1)) / np.asarray(std, np.float32).reshape(-1, 1, 1)
    np.testing.assert_allclose(ours, expected, rtol=1e-6)

    score = score_module(tmp_path / "onnx", monkeypatch)
    by_image = score.run(json.dumps({"images": [base64.b64encode(image_path.read_bytes()).decode()]}))
    by_array = score.run(json.dumps({"data": [ours.tolist()]}))
    assert by_image["predictions"][0]["probabilities"] == pytest.approx(by_array["predictions"][0]["probabilities"],
                                                                          abs=1e-6)


@pytest.mark.parametrize(("change", "message"), [
    pytest.param({"mean": [0.5, 0.5]}, r"preprocessing.mean: \[0.5, 0.5\] is neither a number nor 3 numbers",
                 id="two-means-for-rgb"),
    pytest.param({"std": [0.2, 0.0, 0.2]}, r"preprocessing.std: .* has a value <= 0", id="zero-std"),
    pytest.param({"mean": "imagenet"}, r"preprocessing.mean: 'imagenet' is neither a number", id="named-mean"),
    pytest.param({"color": "CMYK"}, r"preprocessing.color: 'CMYK' is not one of", id="unknown-colour-mode"),
    pytest.param({"size": 8}, r"preprocessing.size: 8 is not \[height, width\]", id="size-not-a-pair"),
])
def test_a_signature_the_pipeline_cannot_use_fails_export_with_a_named_error(tmp_path, change, message):
    folder = colour_model(tmp_path / "model", 0.5, 0.5)
    signature = json.loads((folder / "signature.json").read_text())
    signature["preprocessing"].update(change)
    (folder / "signature.json").write_text(json.dumps(signature))
    with pytest.raises(SpecError, match=message):
        export_onnx(folder, tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()


def test_score_py_reads_a_per_channel_png_sent_as_base64(tmp_path, monkeypatch):
    """The same request a client would send: a PNG of the model's colour mode."""
    from PIL import Image

    export_onnx(colour_model(tmp_path / "model", [0.4, 0.4, 0.4], [0.3, 0.3, 0.3]), tmp_path / "onnx")
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (250, 10, 10)).save(buffer, "PNG")
    score = score_module(tmp_path / "onnx", monkeypatch)
    answer = score.run(json.dumps({"images": [base64.b64encode(buffer.getvalue()).decode()]}))
    assert answer["predictions"][0]["label"] in CLASSES
    assert sum(answer["predictions"][0]["probabilities"]) == pytest.approx(1.0, abs=1e-5)


def regressor(folder: Path) -> Path:
    """A model that is not a classifier: 8 features in, one value out; no classes, no preprocessing."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    folder.mkdir(parents=True)
    torch.export.save(torch.export.export(model, (torch.zeros(2, 8),), dynamic_shapes=({0: batch},)),
                      folder / "model.pt2")
    (folder / "signature.json").write_text(json.dumps({"file": "model.pt2",
                                                       "inputs": [{"name": "x", "shape": [None, 8]}]}))
    np.save(folder / "sample_inputs.npy", np.random.default_rng(3).standard_normal((40, 8)).astype(np.float32))
    return folder


def test_a_regressor_passes_the_gate_on_its_own_inputs_without_a_top1_check(tmp_path):
    report = export_onnx(regressor(tmp_path / "model"), tmp_path / "onnx", inputs_file="sample_inputs.npy")
    assert report.passed and report.top1_agreement is None
    assert (report.samples, report.inputs) == (40, "inputs from sample_inputs.npy")
    assert "top-1" not in report.summary() and report.max_abs_diff < 1e-4
    assert (tmp_path / "onnx" / "sample_inputs.npy").is_file()  # files beside the model travel with it


def test_inputs_of_the_wrong_shape_are_a_named_error(tmp_path):
    folder = regressor(tmp_path / "model")
    np.save(folder / "wrong.npy", np.zeros((4, 3), dtype=np.float32))
    with pytest.raises(SpecError, match=r"inputs\[0\].shape: export.inputs_file wrong.npy holds shape \[4, 3\], and the "
                                        r"signature wants \[N, 8\]"):
        export_onnx(folder, tmp_path / "onnx", inputs_file="wrong.npy")


def own_onnx(folder: Path, keep_pt2: bool) -> Path:
    """A team that exported ONNX itself: model.onnx named by the signature, with or without its .pt2."""
    source = regressor(folder.parent / f"{folder.name}-src")
    export_onnx(source, folder, inputs_file="sample_inputs.npy")
    signature = json.loads((folder / "signature.json").read_text())
    signature.pop("parity")
    (folder / "signature.json").write_text(json.dumps({**signature, "file": "model.onnx"}))
    if keep_pt2:
        (folder / "model.pt2").write_bytes((source / "model.pt2").read_bytes())
    return folder


def test_a_teams_own_onnx_with_its_pt2_beside_it_goes_through_the_gate(tmp_path):
    report = export_onnx(own_onnx(tmp_path / "own", keep_pt2=True), tmp_path / "onnx", inputs_file="sample_inputs.npy")
    assert report.passed and report.max_abs_diff is not None and report.max_abs_diff < 1e-4


def test_a_teams_own_onnx_alone_is_checked_and_run_not_compared(tmp_path):
    report = export_onnx(own_onnx(tmp_path / "own", keep_pt2=False), tmp_path / "onnx", inputs_file="sample_inputs.npy")
    assert report.passed and report.max_abs_diff is None and report.samples == 40
    assert report.summary() == "no PyTorch model to compare with: ran on 40 inputs from sample_inputs.npy"
    assert json.loads((tmp_path / "onnx" / "signature.json").read_text())["file"] == "model.onnx"


def test_a_teams_own_onnx_that_is_not_a_model_is_refused_by_the_checker(tmp_path):
    folder = own_onnx(tmp_path / "own", keep_pt2=False)
    (folder / "model.onnx").write_bytes(b"not a protobuf")
    with pytest.raises(ParityError, match="onnx: model.onnx fails the ONNX checker: Unable to parse proto"):
        export_onnx(folder, tmp_path / "onnx")
