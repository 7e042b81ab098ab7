"""Outputs of any structure torch.export saves, and keyword inputs (issue 83): a dict of outputs (how Hugging Face-style
models answer), nested ones, a namedtuple or tuple, each ONNX output named by its key or path or by signature.json's
``outputs``; a program exported with keyword inputs; parity compared and reported per output; and what the export job
cannot rebuild (a team's own output class) refused naming the type and the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlrunway.errors import SpecError
from mlrunway.onnx_export import export_onnx
from tests.mlrunway.onnx_export.test_export_signatures import dims, token_ids

pytestmark = pytest.mark.slow
INPUTS = [{"name": "input_ids", "dtype": "int64", "shape": [None, None]},
          {"name": "attention_mask", "dtype": "bool", "shape": [None, None]},
          {"name": "numeric", "dtype": "float32", "shape": [None, 3]}]


def forecaster(shape: str):
    """Token ids, a bool mask and numbers in; class scores and a forecast out, returned as ``shape`` says."""
    import torch
    from torch import nn

    class Forecaster(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = nn.Embedding(50, 4), nn.Linear(7, 3)

        def forward(self, input_ids, attention_mask, numeric):
            pooled = (self.embed(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)).sum(1)
            logits = self.head(torch.cat([pooled, numeric], 1))
            sales = logits.sum(1, keepdim=True) * 100
            if shape == "dict":
                return {"logits": logits, "weekly_sales": sales, "hidden": (pooled, pooled * 2)}
            if shape == "ordered":
                return OrderedDict([("weekly_sales", sales), ("logits", logits)])
            return logits, sales

    torch.manual_seed(0)
    return Forecaster().eval()


def arrays(rows: int = 24) -> dict[str, np.ndarray]:
    ids = token_ids(rows, 7)
    return {"input_ids": ids, "attention_mask": ids != 0,
            "numeric": np.random.default_rng(1).standard_normal((rows, 3)).astype(np.float32)}


def save(folder: Path, shape: str, *, keywords: bool = True, **signature: Any) -> Path:
    """The forecaster saved with torch.export (its inputs by keyword, or by position), its signature and inputs."""
    import torch

    folder.mkdir(parents=True)
    data = arrays()
    example = {name: torch.from_numpy(a[:2]) for name, a in data.items()}
    dynamic = {"input_ids": dims(0, 1), "attention_mask": dims(0, 1), "numeric": dims(0)}
    if keywords:
        program = torch.export.export(forecaster(shape), (), kwargs=example, dynamic_shapes=dynamic)
    else:
        program = torch.export.export(forecaster(shape), tuple(example.values()),
                                      dynamic_shapes=tuple(dynamic.values()))
    torch.export.save(program, folder / "model.pt2")
    (folder / "signature.json").write_text(json.dumps({"format": "torch.export", "file": "model.pt2",
                                                       "inputs": INPUTS, **signature}))
    np.savez(folder / "inputs.npz", **data)
    return folder


def onnx_names(folder: Path) -> tuple[list[str], list[str]]:
    import onnx

    graph = onnx.load(str(folder / "model.onnx")).graph
    return [i.name for i in graph.input], [o.name for o in graph.output]


def test_a_dict_output_with_keyword_inputs_and_a_bool_mask_exports_each_output_by_its_key_and_gates_each(tmp_path):
    model = save(tmp_path / "m", "dict", classes=["a", "b", "c"], classifier_output="logits")
    report = export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npz")
    assert onnx_names(tmp_path / "onnx") == (["input_ids", "attention_mask", "numeric"],
                                             ["logits", "weekly_sales", "hidden.0", "hidden.1"])
    assert report.passed and report.top1_agreement == 1.0 and report.top1_output == "logits"
    assert [o["name"] for o in report.outputs or ()] == ["logits", "weekly_sales", "hidden.0", "hidden.1"]
    assert all(0 <= o["tolerance_used"] <= 1 and o["max_abs_diff"] >= 0 for o in report.outputs or ())
    assert max(o["tolerance_used"] for o in report.outputs or ()) == report.tolerance_used
    written = json.loads((tmp_path / "onnx" / "signature.json").read_text())["parity"]
    assert [o["name"] for o in written["outputs"]] == ["logits", "weekly_sales", "hidden.0", "hidden.1"]
    assert "4 outputs; the most: " in report.summary() and "top-1 agreement on logits 100.00%" in report.summary()

    # The ONNX model answers by name what the torch program answers by key: a score.py reads outputs by name.
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    feed = {name: a[:5] for name, a in arrays().items()}
    answers = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))
    program = torch.export.load(model / "model.pt2").module()
    expected = program(**{name: torch.from_numpy(a) for name, a in feed.items()})
    np.testing.assert_allclose(answers["weekly_sales"], expected["weekly_sales"].detach().numpy(), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize(("shape", "names"), [("ordered", ["weekly_sales", "logits"]), ("tuple", ["0", "1"])])
def test_ordered_dicts_and_tuples_are_named_by_key_or_position(tmp_path, shape, names):
    report = export_onnx(save(tmp_path / "m", shape, keywords=False), tmp_path / "onnx", inputs_file="inputs.npz")
    assert onnx_names(tmp_path / "onnx")[1] == names and [o["name"] for o in report.outputs or ()] == names


def test_a_tuples_outputs_take_the_names_signature_json_gives_them_in_order(tmp_path):
    model = save(tmp_path / "m", "tuple", keywords=False, outputs=["logits", {"name": "weekly_sales"}])
    export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npz")
    assert onnx_names(tmp_path / "onnx")[1] == ["logits", "weekly_sales"]


@pytest.mark.parametrize("outputs", [["logits", "sales", "hidden.0", "hidden.1"], ["logits", "weekly_sales"]])
def test_a_signature_naming_outputs_the_model_does_not_have_is_refused_naming_both_lists(tmp_path, outputs):
    model = save(tmp_path / "m", "dict", outputs=outputs)
    with pytest.raises(SpecError, match=r"signature.json outputs: .*; model.pt2 gives 4 \(logits, weekly_sales, "
                                        r"hidden.0, hidden.1\); name the model's outputs"):
        export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npz")


def test_a_keyword_input_the_signature_does_not_name_is_refused_naming_both(tmp_path):
    model = save(tmp_path / "m", "dict")
    signature = json.loads((model / "signature.json").read_text())
    signature["inputs"][1]["name"] = "mask"
    (model / "signature.json").write_text(json.dumps(signature))
    np.savez(model / "inputs.npz", **{("mask" if k == "attention_mask" else k): v for k, v in arrays().items()})
    with pytest.raises(SpecError, match=r"signature.json inputs: input_ids, mask, numeric; model.pt2 takes keyword "
                                        r"inputs input_ids, attention_mask, numeric: name each keyword input as its "
                                        r"keyword \(attention_mask is not\)"):
        export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npz")


SAVE_A_NAMEDTUPLE_OUTPUT = """
import collections, sys, torch
Forecast = collections.namedtuple("Forecast", ["scores", "total"])
torch.utils._pytree._register_namedtuple(Forecast, serialized_type_name="team_models.Forecast")
class Model(torch.nn.Module):
    def forward(self, x):
        return Forecast(x * 2, x.sum(1, keepdim=True))
program = torch.export.export(Model(), (torch.ones(2, 3),), dynamic_shapes=({0: torch.export.Dim("b")},))
torch.export.save(program, sys.argv[1] + "/model.pt2")
"""


def test_a_namedtuple_output_is_rebuilt_from_its_recorded_fields_and_named_by_them(tmp_path):
    """Saved by a process of the team's (torch.export saves a namedtuple registered with a name); the export job
    rebuilds it from the fields the archive records, without the team's code."""
    model = tmp_path / "m"
    model.mkdir()
    subprocess.run([sys.executable, "-c", SAVE_A_NAMEDTUPLE_OUTPUT, str(model)], check=True)
    (model / "signature.json").write_text(json.dumps({"file": "model.pt2", "inputs": [
        {"name": "x", "dtype": "float32", "shape": [None, 3]}]}))
    report = export_onnx(model, tmp_path / "onnx")
    assert onnx_names(tmp_path / "onnx")[1] == ["scores", "total"] and report.passed


SAVE_A_DATACLASS_OUTPUT = """
import dataclasses, json, sys, torch
@dataclasses.dataclass
class ForecastOutput:
    logits: torch.Tensor
torch.export.register_dataclass(ForecastOutput, serialized_type_name="team_models.ForecastOutput")
class Model(torch.nn.Module):
    def forward(self, x):
        return ForecastOutput(x * 2)
program = torch.export.export(Model(), (torch.ones(2, 3),), dynamic_shapes=({0: torch.export.Dim("b")},))
torch.export.save(program, sys.argv[1] + "/model.pt2")
"""


def test_an_output_class_the_export_job_cannot_import_is_refused_naming_it_and_the_fix(tmp_path):
    """Saved by a process that registered its own output class (as transformers registers ModelOutput); the export
    job has neither that code nor transformers."""
    model = tmp_path / "m"
    model.mkdir()
    subprocess.run([sys.executable, "-c", SAVE_A_DATACLASS_OUTPUT, str(model)], check=True)
    (model / "signature.json").write_text(json.dumps({"file": "model.pt2", "inputs": [
        {"name": "x", "dtype": "float32", "shape": [None, 3]}]}))
    with pytest.raises(SpecError, match=r"model: model.pt2 returns \(or takes\) team_models.ForecastOutput, a "
                                        r"container the export job cannot import .*return a dict from forward "
                                        r"\(e.g. `return dict\(output\)`\)"):
        export_onnx(model, tmp_path / "onnx")


@pytest.mark.parametrize(("signature", "error"), [
    ({"outputs": []}, r"signature.json outputs: \[\] is not a list of unique output names"),
    ({"outputs": ["a", "a"]}, r"signature.json outputs: \['a', 'a'\] is not a list of unique output names"),
    ({"outputs": ["a"], "classifier_output": "b"}, r"signature.json classifier_output: 'b' is not one of outputs"),
    ({"classifier_output": 3}, r"signature.json classifier_output: 3 is not an output's name"),
])
def test_a_signatures_outputs_the_pipeline_cannot_use_are_refused_with_no_torch(tmp_path, signature, error):
    from mlrunway.onnx_export.export import check_signature

    with pytest.raises(SpecError, match=error):
        check_signature({"inputs": INPUTS, **signature})


def test_a_teams_own_onnx_with_external_data_is_checked_gated_registered_and_loads_where_it_is_served(tmp_path):
    """A model.onnx whose weights are in model.onnx.data (how models over 2 GB are stored), a model.pt2 beside it:
    the file travels with it through the checker, the gate and the registry (before: only model.onnx was copied,
    and the checker failed)."""
    import onnx
    import onnxruntime as ort

    from mlrunway.local.backend import LocalBackend

    model = save(tmp_path / "m", "dict", classes=["a", "b", "c"])
    export_onnx(model, tmp_path / "plain", inputs_file="inputs.npz")
    proto = onnx.load(str(tmp_path / "plain" / "model.onnx"))
    onnx.save_model(proto, str(model / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=512)  # the embedding's weights, not the constants
    signature = json.loads((model / "signature.json").read_text())
    (model / "signature.json").write_text(json.dumps({**signature, "file": "model.onnx"}))
    report = export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npz")
    assert report.passed and report.max_abs_diff is not None  # gated against the model.pt2 beside it
    assert (tmp_path / "onnx" / "model.onnx.data").is_file()
    assert (tmp_path / "onnx" / "model.onnx").stat().st_size < (tmp_path / "plain" / "model.onnx").stat().st_size
    registered = LocalBackend.at(tmp_path / "ws").models.register("ext", tmp_path / "onnx")
    session = ort.InferenceSession(str(Path(registered.path) / "model.onnx"))
    answers = session.run(None, {name: a[:3] for name, a in arrays().items()})
    assert [o.name for o in session.get_outputs()] == ["logits", "weekly_sales", "hidden.0", "hidden.1"]
    assert answers[0].shape == (3, 3)


def test_external_data_that_leaves_the_model_folder_is_refused_naming_it(tmp_path):
    import onnx

    model = save(tmp_path / "m", "tuple", keywords=False)
    export_onnx(model, tmp_path / "plain", inputs_file="inputs.npz")
    from onnx.external_data_helper import _get_all_tensors

    proto = onnx.load(str(tmp_path / "plain" / "model.onnx"))
    onnx.save_model(proto, str(tmp_path / "elsewhere.onnx"), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    proto = onnx.load(str(tmp_path / "elsewhere.onnx"), load_external_data=False)
    for tensor in _get_all_tensors(proto):
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../weights.bin"  # beside the model folder: another model's file, say
    onnx.save(proto, str(model / "model.onnx"))
    signature = json.loads((model / "signature.json").read_text())
    (model / "signature.json").write_text(json.dumps({**signature, "file": "model.onnx"}))
    with pytest.raises(SpecError, match=r"model: model.onnx keeps tensor \S+ in '../weights.bin', which is not a "
                                        r"file beside it"):
        export_onnx(model, tmp_path / "onnx", inputs_file="inputs.npz")
