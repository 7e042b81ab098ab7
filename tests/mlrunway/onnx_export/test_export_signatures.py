"""Export and its parity gate honour the signature: each input's dtype (float32, float64, int64, int32, bool,
float16 with a stated tolerance), an axis of any size exported as dynamic, several inputs by name and several
outputs by position, from a torch program or a team's own ONNX file; and what export cannot honour is refused
naming the field, never a raw error of torch, numpy or ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlrunway.errors import ParityError, SpecError
from mlrunway.onnx_export import export_onnx

pytestmark = pytest.mark.slow


def save_model(folder: Path, module, examples: tuple, inputs: list[dict], dynamic: tuple | None,
               arrays: dict | None = None, classes: list[str] | None = None) -> Path:
    """``module`` exported with torch.export and saved as the model contract asks, with its inputs file."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    program = torch.export.export(module.eval(), examples, dynamic_shapes=dynamic)
    torch.export.save(program, folder / "model.pt2")
    signature = {"format": "torch.export", "file": "model.pt2", "inputs": inputs}
    if classes:
        signature["classes"] = classes
    (folder / "signature.json").write_text(json.dumps(signature))
    if arrays is not None:
        if len(arrays) == 1:
            np.save(folder / "inputs.npy", next(iter(arrays.values())))
        else:
            np.savez(folder / "inputs.npz", **arrays)
    return folder


def text_classifier():
    import torch
    from torch import nn

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.out = nn.Embedding(50, 8, padding_idx=0), nn.Linear(8, 3)

        def forward(self, tokens):
            mask = (tokens != 0).unsqueeze(-1).to(torch.float32)
            return self.out((self.embed(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1.0))

    torch.manual_seed(0)
    return Bag()


def dims(*axes: int) -> dict:
    import torch

    return {axis: torch.export.Dim(f"d{axis}", min=1, max=512) for axis in axes}


def token_ids(rows: int, length: int, seed: int = 0) -> np.ndarray:
    ids = np.random.default_rng(seed).integers(1, 50, (rows, length)).astype(np.int64)
    ids[::3, length // 2:] = 0  # some texts shorter than the batch's longest: padded
    return ids


def test_int64_token_ids_of_any_length_export_with_dynamic_axes_and_pass_the_gate(tmp_path):
    import onnx
    import onnxruntime as ort
    import torch

    ids = token_ids(40, 9)
    model = save_model(tmp_path / "m", text_classifier(), (torch.from_numpy(ids[:2]),),
                       [{"name": "tokens", "dtype": "int64", "shape": [None, None]}], (dims(0, 1),),
                       {"tokens": ids}, classes=["a", "b", "c"])
    report = export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npy")
    assert report.passed and report.inputs == "inputs from inputs.npy" and report.samples == 40
    assert report.top1_agreement == 1.0
    graph = onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph
    (only,) = graph.input
    assert only.name == "tokens" and only.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert all(d.dim_param and not d.dim_value for d in only.type.tensor_type.shape.dim)  # batch and length
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert session.run(None, {"tokens": token_ids(3, 17, seed=1)})[0].shape == (3, 3)  # a longer text than exported


def test_several_inputs_of_their_own_dtypes_are_fed_by_name_and_several_outputs_compared_by_position(tmp_path):
    import onnx
    import torch
    from torch import nn

    class TwoInTwoOut(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.scale = nn.Embedding(50, 4), nn.Linear(3, 4)

        def forward(self, input_ids, attention_mask, extra, offset):
            keep = attention_mask.unsqueeze(-1).to(torch.float64)
            pooled = (self.embed(input_ids).to(torch.float64) * keep).sum(1)
            return pooled + self.scale(extra.to(torch.float32)).to(torch.float64), offset * 2 + 1

    torch.manual_seed(0)
    ids = token_ids(20, 6)
    arrays = {"input_ids": ids, "attention_mask": ids != 0,
              "extra": np.random.default_rng(2).standard_normal((20, 3)),  # float64
              "offset": np.arange(20, dtype=np.int32).reshape(20, 1)}
    inputs = [{"name": "input_ids", "dtype": "int64", "shape": [None, None]},
              {"name": "attention_mask", "dtype": "bool", "shape": [None, None]},
              {"name": "extra", "dtype": "float64", "shape": [None, 3]},
              {"name": "offset", "dtype": "int32", "shape": [None, 1]}]
    examples = tuple(torch.from_numpy(a[:2]) for a in arrays.values())
    model = save_model(tmp_path / "m", TwoInTwoOut(), examples, inputs,
                       (dims(0, 1), dims(0, 1), dims(0), dims(0)), arrays)
    report = export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npz")
    assert report.passed and report.samples == 20 and report.top1_agreement is None
    graph = onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "extra", "offset"]
    assert [i.type.tensor_type.elem_type for i in graph.input] == [
        onnx.TensorProto.INT64, onnx.TensorProto.BOOL, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT32]
    assert len(graph.output) == 2


def test_a_static_axis_the_signature_calls_any_size_is_refused_naming_both(tmp_path):
    import torch

    ids = token_ids(8, 9)
    model = save_model(tmp_path / "m", text_classifier(), (torch.from_numpy(ids[:2]),),
                       [{"name": "tokens", "dtype": "int64", "shape": [None, None]}], (dims(0),), {"tokens": ids})
    with pytest.raises(SpecError, match=r"signature.json inputs\[0\].shape\[1\]: null \(any size\), and model.pt2 has "
                                        r"that axis fixed at 9; export cannot make a static axis dynamic"):
        export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npy")
    assert not (tmp_path / "onnx").exists()  # refused before anything was written


def test_a_signature_dtype_other_than_the_programs_is_refused(tmp_path):
    import torch

    ids = token_ids(8, 9)
    model = save_model(tmp_path / "m", text_classifier(), (torch.from_numpy(ids[:2]),),
                       [{"name": "tokens", "dtype": "int32", "shape": [None, None]}], (dims(0, 1),),
                       {"tokens": ids.astype(np.int32)})
    with pytest.raises(SpecError, match=r"inputs\[0\].dtype: int32, and model.pt2 takes int64"):
        export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npy")


def test_an_int_input_without_an_inputs_file_is_refused_before_export(tmp_path):
    import torch

    ids = token_ids(8, 9)
    model = save_model(tmp_path / "m", text_classifier(), (torch.from_numpy(ids[:2]),),
                       [{"name": "tokens", "dtype": "int64", "shape": [None, None]}], (dims(0, 1),))
    with pytest.raises(SpecError, match=r"inputs\[0\].dtype: int64 input 'tokens' has no safe random values"):
        export_onnx(model, tmp_path / "onnx")


def test_float16_is_refused_by_default_and_gated_with_a_stated_tolerance(tmp_path):
    import torch
    from torch import nn

    class Half(nn.Module):
        def forward(self, x):
            return x * 3 + 1

    x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float16)
    model = save_model(tmp_path / "m", Half(), (torch.from_numpy(x[:2]),),
                       [{"name": "x", "dtype": "float16", "shape": [None, 4]}], (dims(0),), {"x": x})
    with pytest.raises(SpecError, match=r"float16 is refused by default"):
        export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npy")
    report = export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npy", atol=1e-2, rtol=1e-2)
    assert report.passed and (report.atol, report.rtol) == (1e-2, 1e-2)


def test_a_teams_own_onnx_with_an_int_input_is_run_on_its_inputs_by_position(tmp_path):
    import torch

    ids = token_ids(12, 5)
    folder = tmp_path / "m"
    folder.mkdir()
    torch.onnx.export(torch.export.export(text_classifier().eval(), (torch.from_numpy(ids[:2]),),
                                          dynamic_shapes=(dims(0, 1),)),
                      (torch.from_numpy(ids[:2]),), str(folder / "model.onnx"), dynamo=True,
                      input_names=["ids_their_own_name"], external_data=False)
    np.save(folder / "inputs.npy", ids)
    (folder / "signature.json").write_text(json.dumps(
        {"format": "onnx", "file": "model.onnx", "inputs": [{"name": "tokens", "dtype": "int64", "shape": [None, None]}]}))
    report = export_onnx(folder, tmp_path / "onnx", inputs_file="inputs.npy")
    assert report.max_abs_diff is None and report.samples == 12 and report.passed
    np.save(folder / "inputs.npy", ids.astype(np.float32))
    with pytest.raises(SpecError, match=r"inputs\[0\].dtype: int64, and export.inputs_file inputs.npy holds float32"):
        export_onnx(folder, tmp_path / "onnx2", inputs_file="inputs.npy")


def test_a_program_that_fails_on_the_gates_inputs_is_a_parity_error_naming_the_side(tmp_path):
    import torch

    ids = token_ids(8, 6)
    model = save_model(tmp_path / "m", text_classifier(), (torch.from_numpy(ids[:2]),),
                       [{"name": "tokens", "dtype": "int64", "shape": [None, None]}], (dims(0, 1),),
                       {"tokens": ids + 100})  # ids past the embedding's 50 rows
    with pytest.raises(ParityError, match=r"onnx parity: PyTorch failed on inputs tokens \[\d+, 6\] int64: IndexError: "
                                          r"index out of range"):
        export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npy")
