"""The parity gate scaled to the outputs (issue 32): numpy's ``isclose`` on every output, so float32 rounding
passes at any output scale and a 1% drift of the last layer does not; the figures old exports recorded still read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlrunway.errors import ParityError, SpecError
from mlrunway.onnx_export import ATOL, RTOL, ParityReport, compare, export_onnx, tolerance_used

FEATURES, OUTPUTS = 8, 3
OLD_ATOL = 1e-4  # the absolute rule before issue 32: max |onnx - torch| <= 1e-4
# A parity dict as the code before issue 32 recorded it: no rtol, no tolerance_used.
OLD_FIGURES = {"max_abs_diff": 3.8e-06, "top1_agreement": 1.0, "samples": 256, "inputs": "validation images",
               "atol": 1e-4, "min_top1_agreement": 1.0, "passed": True}


def regressor(scale: float) -> Any:
    """A small real regressor whose outputs are about ``scale`` (last layer's weights and bias scaled)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 8), nn.Tanh(), nn.Linear(8, OUTPUTS))
    with torch.no_grad():
        model[-1].weight.mul_(scale)
        model[-1].bias.fill_(scale)
    return model.eval()


def save_model(folder: Path, module: Any) -> Path:
    """The model contract for a regressor: model.pt2 (torch.export, dynamic batch) and a signature without classes."""
    import torch

    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(module, (torch.zeros(2, FEATURES),), dynamic_shapes=({0: batch},))
    folder.mkdir(parents=True)
    torch.export.save(program, folder / "model.pt2")
    (folder / "signature.json").write_text(json.dumps({
        "format": "torch.export", "file": "model.pt2",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [None, FEATURES]}]}))
    return folder


@dataclass(frozen=True)
class Exported:
    module: Any
    onnx: Path
    report: ParityReport


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The regressor at 1e4 through export_onnx with the default tolerance: the one real export (a second or two)."""
    root = tmp_path_factory.mktemp("parity")
    module = regressor(1e4)
    report = export_onnx(save_model(root / "model", module), root / "onnx", samples=256)
    return Exported(module, root / "onnx" / "model.onnx", report)


def with_parameters(template: Path, module: Any, path: Path) -> Path:
    """The exported graph with ``module``'s parameters as its initializers: what export_onnx writes for a module of
    the same architecture (the graph does not depend on the values), without paying for another export."""
    import onnx

    model = onnx.load(str(template))
    state = {name: value.detach().numpy() for name, value in module.state_dict().items()}
    assert sorted(t.name for t in model.graph.initializer) == sorted(state)
    for tensor in model.graph.initializer:
        tensor.CopyFrom(onnx.numpy_helper.from_array(state[tensor.name], tensor.name))
    onnx.save(model, str(path))
    return path


def gate_inputs() -> Any:
    return np.random.default_rng(0).standard_normal((256, FEATURES)).astype(np.float32)  # as export_onnx's own


def test_a_regressor_in_the_ten_thousands_passes_where_the_absolute_rule_failed(exported):
    from mlrunway.onnx_export.export import parity_gate

    report = exported.report
    assert report.passed and (report.atol, report.rtol) == (ATOL, RTOL) and report.top1_agreement is None
    assert 0 < report.tolerance_used <= 0.2, "float32 rounding should use a small share of the tolerance"
    # float32 rounding at 1e4 is ~1e-3 absolute: the old rule (|onnx - torch| <= 1e-4) refused this honest export.
    assert report.max_abs_diff > OLD_ATOL
    with pytest.raises(ParityError, match=r"times the tolerance \(0.0001\) on 256 random inputs"):
        parity_gate(exported.onnx, exported.module, gate_inputs(), source="random inputs", atol=OLD_ATOL, rtol=0.0,
                    min_top1_agreement=1.0, classifier=False)
    signature = json.loads((exported.onnx.parent / "signature.json").read_text())
    assert signature["parity"] == {**report.to_dict(), "passed": True}
    assert signature["parity"]["rtol"] == RTOL and signature["parity"]["tolerance_used"] == report.tolerance_used
    assert f"of the tolerance ({ATOL:g} + {RTOL:g}·|torch|) on 256 random inputs" in report.summary()


@pytest.mark.parametrize("scale", [1e-2, 1.0, 1e4])
def test_a_last_layer_bias_drifted_by_one_percent_is_refused_at_any_scale(exported, tmp_path, scale):
    import copy

    import torch

    from mlrunway.onnx_export.export import parity_gate

    module = regressor(scale)
    drifted = copy.deepcopy(module)
    with torch.no_grad():
        drifted[-1].bias.mul_(1.01)
    honest = parity_gate(with_parameters(exported.onnx, module, tmp_path / "honest.onnx"), module, gate_inputs(),
                         source="random inputs", min_top1_agreement=1.0, classifier=False)
    assert honest.passed and honest.tolerance_used < 0.2
    drifted_onnx = with_parameters(exported.onnx, drifted, tmp_path / "drifted.onnx")
    with pytest.raises(ParityError, match=r"onnx parity gate failed: max \|onnx - torch\| \S+, (\d+% of|\S+ times) "
                                          r"the tolerance \(1e-05 \+ 0.0001·\|torch\|\) on 256 random inputs; the "
                                          r"ONNX model was not registered"):
        parity_gate(drifted_onnx, module, gate_inputs(), source="random inputs", min_top1_agreement=1.0,
                    classifier=False)
    if scale == 1e-2:  # why ATOL is 1e-5: an absolute part of 1e-4 is 1% of outputs near 1e-2, and let this through
        assert parity_gate(drifted_onnx, module, gate_inputs(), source="random inputs", atol=1e-4, rtol=1e-4,
                           min_top1_agreement=1.0, classifier=False).passed


def boundary_pairs(rng: np.random.Generator, atol: float, rtol: float, n: int = 4000) -> tuple[Any, Any]:
    """References over ten decades (some 0) and candidates 0 to 2 tolerances away, many on the boundary itself."""
    reference = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
    reference[::50] = 0.0
    tolerance = atol + rtol * np.abs(reference)
    factor = rng.uniform(0, 2, n)
    factor[::3] = 1.0  # exactly one tolerance away, up to rounding: where a wrong rule shows first
    factor[1::7] = np.nextafter(1.0, 2.0)
    candidate = reference + rng.choice([-1.0, 1.0], n) * factor * tolerance
    return reference, candidate


@pytest.mark.parametrize(("atol", "rtol"), [(ATOL, RTOL), (1e-4, 0.0), (0.0, 1e-3), (1e-8, 1e-2)])
def test_tolerance_used_agrees_with_numpy_isclose_element_by_element(atol, rtol):
    rng = np.random.default_rng(32)
    reference, candidate = boundary_pairs(rng, atol, rtol)
    used = np.array([tolerance_used(r, c, atol, rtol) for r, c in zip(reference, candidate, strict=True)])
    close = np.isclose(candidate, reference, rtol=rtol, atol=atol)
    assert ((used <= 1) == close).all()
    assert 0.2 < close.mean() < 0.8  # both sides of the boundary were tried
    assert tolerance_used(reference, candidate, atol, rtol) == used.max()  # the array's figure is its worst output
    assert tolerance_used(reference[close], candidate[close], atol, rtol) <= 1
    nonzero = (atol + rtol * np.abs(reference)) > 0
    expected = np.abs(candidate - reference)[nonzero] / (atol + rtol * np.abs(reference))[nonzero]
    np.testing.assert_allclose(used[nonzero], expected, rtol=1e-12)


@pytest.mark.parametrize(("reference", "candidate", "used"), [
    pytest.param([np.nan], [np.nan], 0.0, id="nan-beside-nan"),
    pytest.param([1.0], [np.nan], np.inf, id="nan-from-a-number"),
    pytest.param([np.nan], [1.0], np.inf, id="a-number-from-nan"),
    pytest.param([np.inf], [np.inf], 0.0, id="the-same-infinity"),
    pytest.param([np.inf], [-np.inf], np.inf, id="opposite-infinities"),
    pytest.param([1e300], [np.inf], np.inf, id="infinity-from-a-huge-number"),
    pytest.param([np.inf], [1e300], np.inf, id="a-huge-number-from-infinity"),
    pytest.param([0.0, 2.0], [0.0, np.nan], np.inf, id="one-nan-among-numbers"),
    pytest.param([], [], 0.0, id="no-outputs"),
])
def test_nan_and_infinity_use_all_the_tolerance_unless_both_sides_agree(reference, candidate, used):
    assert tolerance_used(reference, candidate) == used
    if reference:  # the same verdict as isclose with NaN equal to NaN
        assert (used <= 1) == bool(np.isclose(candidate, reference, rtol=RTOL, atol=ATOL, equal_nan=True).all())


def test_compare_refuses_an_output_that_became_nan():
    """max(0.0, nan) is 0.0 in Python: the absolute gate let a NaN output through; the rule does not."""
    inputs = np.ones((4, 2), np.float32)

    def nan_one(batch):
        out = batch.sum(1, keepdims=True).astype(np.float64)
        out[1] = np.nan
        return out

    with pytest.raises(ParityError, match=r"max \|onnx - torch\| inf, a NaN or infinity against a different "
                                          r"value, beyond any tolerance \(1e-05 \+ 0.0001·\|torch\|\)"):
        compare(lambda b: b.sum(1, keepdims=True), nan_one, inputs, source="random inputs", min_top1_agreement=1.0,
                classifier=False)


def test_compare_judges_each_output_against_its_own_scale():
    inputs = np.linspace(1, 2, 40, dtype=np.float32).reshape(20, 2)

    def big(batch):
        return np.stack([batch[:, 0], 1e4 * batch[:, 1]], axis=1).astype(np.float64)

    def off(shift):  # the large column off by ``shift`` of its value, the small one exact
        return lambda batch: big(batch) * np.array([1.0, 1.0 + shift])

    report = compare(big, off(5e-5), inputs, source="random inputs", min_top1_agreement=1.0, classifier=False)
    assert report.passed and report.max_abs_diff > 0.5 and 0.45 < report.tolerance_used < 0.5
    with pytest.raises(ParityError, match=r"max \|onnx - torch\| \S+, 2\d\d% of the tolerance"):
        compare(big, off(2.5e-4), inputs, source="random inputs", min_top1_agreement=1.0, classifier=False)


@pytest.mark.parametrize(("atol", "rtol", "field"), [
    (-1e-5, RTOL, "atol"), (ATOL, "1e-4", "rtol"), (ATOL, float("nan"), "rtol"), (True, RTOL, "atol"),
    (0.0, 0.0, "atol, rtol"),
])
def test_a_tolerance_nothing_could_pass_is_refused_by_name(atol, rtol, field, tmp_path):
    with pytest.raises(SpecError, match=f"onnx parity {field}: "):
        compare(np.asarray, np.asarray, np.zeros((2, 2), np.float32), source="random inputs", atol=atol, rtol=rtol,
                min_top1_agreement=1.0)
    with pytest.raises(SpecError, match=f"onnx parity {field}: "):  # before any export work
        export_onnx(tmp_path / "no-model", tmp_path / "onnx", atol=atol, rtol=rtol)


def test_a_parity_dict_recorded_before_the_relative_part_still_reads():
    report = ParityReport.from_dict(OLD_FIGURES)
    assert report.passed and report.rtol == 0.0 and report.tolerance_used == pytest.approx(0.038)
    assert report.summary() == ("max |onnx - torch| 3.8e-06, 4% of the tolerance (0.0001), top-1 agreement "
                                "100.00% (required 100.00%) on 256 validation images")
    failed = ParityReport.from_dict({**OLD_FIGURES, "max_abs_diff": 3e-4, "passed": False})
    assert not failed.passed and failed.summary().startswith("max |onnx - torch| 0.0003, 300% of the tolerance")
    new = ParityReport.from_dict(ParityReport(max_abs_diff=0.002, top1_agreement=None, samples=64, inputs="x",
                                              atol=ATOL, rtol=RTOL, tolerance_used=0.007,
                                              min_top1_agreement=1.0).to_dict())
    assert new.to_dict()["tolerance_used"] == 0.007 and new.passed
    with pytest.raises(ValueError, match="ParityReport tolerance_used: missing with rtol=0.0001"):
        ParityReport(max_abs_diff=0.1, top1_agreement=None, samples=1, inputs="x", atol=ATOL, rtol=RTOL,
                     min_top1_agreement=1.0)
