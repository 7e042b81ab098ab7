"""Export a saved model (train.py's ``model.pt2`` + ``signature.json``) to ONNX and gate it on parity.

The ONNX file gets a dynamic batch axis and a stated opset; ``onnx.checker`` must accept it; then ONNX Runtime
and PyTorch must agree on held-out inputs: validation images when the data folder is known, else random inputs
of the signature's shape.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mlrunway.errors import ParityError, SpecError
from mlrunway.onnx_export.parity import ATOL, RTOL, ParityReport, check_tolerance, compare

DEFAULT_OPSET = 18
ONNX_FILE = "model.onnx"
SIGNATURE = "signature.json"


def read_signature(model_dir: Path) -> dict[str, Any]:
    """The model folder's signature.json, checked: a field the pipeline cannot use is a named SpecError here,
    at export, rather than a TypeError in the parity gate, the smoke test or score.py."""
    path = Path(model_dir) / SIGNATURE
    if not path.is_file():
        raise SpecError(f"model: {path} is missing; a model folder needs signature.json next to its model file")
    try:
        signature = json.loads(path.read_text())
    except ValueError as exc:
        raise SpecError(f"model: {path} is not JSON ({exc}); write it with json.dump") from exc
    check_signature(signature)
    return signature


def check_signature(signature: Any) -> None:
    """``inputs[0].shape`` a list of sizes (None for any); ``preprocessing`` (when present) with a 2-number
    ``size`` and a ``mean``/``std`` of one number or one per channel; ``classes`` a list when present."""
    from mlrunway.data.images import normalization

    inputs = signature.get("inputs") if isinstance(signature, dict) else None
    shape = inputs[0].get("shape") if isinstance(inputs, list) and inputs and isinstance(inputs[0], dict) else None
    if not isinstance(shape, list) or not all(d is None or (isinstance(d, int) and d > 0) for d in shape):
        raise SpecError(f"signature.json inputs[0].shape: {shape!r} is not a list of sizes; write e.g. "
                        "[null, 3, 32, 32] (null for the batch axis)")
    if "classes" in signature and not (isinstance(signature["classes"], list) and signature["classes"]):
        raise SpecError(f"signature.json classes: {signature['classes']!r} is not a non-empty list; "
                        "list the class names in output order, or leave classes out for a non-classifier")
    prep = signature.get("preprocessing")
    if prep is None:
        return
    size = prep.get("size") if isinstance(prep, dict) else None
    if not (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size)):
        raise SpecError(f"signature.json preprocessing.size: {size!r} is not [height, width]; write two sizes")
    normalization(prep)


def held_out_inputs(signature: dict[str, Any], data_dir: str | Path | None, samples: int,
                    inputs_file: str | Path | None = None):
    """The parity gate's inputs: a file of model inputs the user names (``.npy``, batch first), else validation
    images (an image classifier's signature, with ``classes`` and ``preprocessing``, and ``data_dir/val/``), else
    seeded random inputs of the signature's shape; return (inputs, description)."""
    import numpy as np

    from mlrunway.data.images import load_labeled

    if inputs_file is not None:
        try:
            inputs = np.asarray(np.load(inputs_file, allow_pickle=False), dtype=np.float32)
        except (OSError, ValueError) as exc:
            raise SpecError(f"inputs_file: {inputs_file} is not a .npy array ({exc}); save one with numpy.save") from exc
        expected = signature["inputs"][0]["shape"][1:]
        if list(inputs.shape[1:]) != expected or not len(inputs):
            raise SpecError(f"inputs_file: {inputs_file} holds shape {list(inputs.shape)}; the signature wants "
                            f"[N, {', '.join(map(str, expected))}]")
        return inputs[:samples], f"inputs from {Path(inputs_file).name}"
    if data_dir is not None and signature.get("classes") and signature.get("preprocessing"):
        # An image classifier's data: its validation images, or a named error (never random inputs in their place).
        # Any other model's data_dir is not images to read, and the gate takes random inputs of its shape.
        val = Path(data_dir) / "val"
        if not val.is_dir():
            raise SpecError(f"data_dir: {val} does not exist; an image classifier's parity gate reads its validation "
                            "images: pass ImageFolder data (val/<class>/<image>), or inputs_file")
        inputs, _ = load_labeled(val, signature["classes"], signature["preprocessing"], limit=samples)
        return inputs, "validation images"
    shape = [samples, *signature["inputs"][0]["shape"][1:]]
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32), "random inputs"


def parity_gate(onnx_path: Path, module: Any, inputs: Any, *, source: str, atol: float = ATOL, rtol: float = RTOL,
                min_top1_agreement: float, classifier: bool = True) -> ParityReport:
    """ONNX Runtime on ``onnx_path`` against the PyTorch ``module``; ParityError when an output is outside
    ``atol + rtol * |torch|`` (or a classifier's top-1 answers disagree)."""
    import numpy as np
    import onnxruntime as ort
    import torch

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def torch_logits(batch: Any) -> Any:
        with torch.no_grad():
            return module(torch.from_numpy(np.ascontiguousarray(batch))).numpy()

    return compare(torch_logits, lambda batch: session.run(None, {name: batch})[0], inputs, source=source,
                   atol=atol, rtol=rtol, min_top1_agreement=min_top1_agreement, classifier=classifier)


def run_once(onnx_path: Path, inputs: Any, *, source: str, atol: float = ATOL, rtol: float = RTOL,
             min_top1_agreement: float) -> ParityReport:
    """ONNX Runtime on the inputs, with no source to compare against: it must load, take the inputs and give
    finite outputs for each of them; ParityError says what went wrong."""
    import numpy as np
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        outputs = np.asarray(session.run(None, {session.get_inputs()[0].name: inputs})[0])
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime raises its own types; the model is what failed
        raise ParityError(f"onnx: {onnx_path.name} does not run on {source}: {type(exc).__name__}: "
                          f"{str(exc)[:300]}") from exc
    if len(outputs) != len(inputs) or not np.isfinite(outputs).all():
        raise ParityError(f"onnx: {onnx_path.name} gave {outputs.shape} outputs with non-finite values or the "
                          f"wrong batch size for {len(inputs)} {source}")
    return ParityReport(max_abs_diff=None, top1_agreement=None, samples=len(inputs), inputs=source, atol=atol,
                        rtol=rtol, min_top1_agreement=min_top1_agreement)


def export_onnx(model_dir: str | Path, out_dir: str | Path, *, opset: int = DEFAULT_OPSET,
                data_dir: str | Path | None = None, samples: int = 256, atol: float = ATOL, rtol: float = RTOL,
                min_top1_agreement: float = 1.0, inputs_file: str | Path | None = None) -> ParityReport:
    """Write ``out_dir/model.onnx`` and its signature; return the parity report (ParityError if it fails).
    ``inputs_file`` (a ``.npy`` of model inputs; relative paths are in the model folder) feeds the gate, which
    wants every output within ``atol + rtol * |torch|`` (numpy's ``isclose``; see :mod:`.parity`).

    A model folder whose signature names a ``.onnx`` (the team exported it itself) is taken as it is: the ONNX
    checker, then the gate against a ``model.pt2`` beside it, else one ONNX Runtime run on the gate's inputs
    (the deployment's smoke test then runs score.py on it)."""
    import onnx
    import torch

    check_tolerance(atol, rtol)
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    signature = read_signature(model_dir)
    model_file = signature.get("file", "model.pt2")
    pt2 = model_dir / (model_file if model_file.endswith(".pt2") else "model.pt2")
    program = torch.export.load(pt2) if pt2.is_file() else None
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = out_dir / ONNX_FILE
    if model_file.endswith(".onnx"):
        shutil.copy(model_dir / model_file, onnx_path)
    elif program is None:
        raise SpecError(f"model: {pt2} is missing; save model.pt2 (torch.export) or model.onnx, as signature.json says")
    else:
        example = torch.zeros(2, *signature["inputs"][0]["shape"][1:])
        torch.onnx.export(program, (example,), str(onnx_path), opset_version=opset, dynamo=True,
                          input_names=["input"], output_names=["logits"], external_data=False)
    try:
        onnx.checker.check_model(str(onnx_path), full_check=True)
    except onnx.checker.ValidationError as exc:  # a team's own file, or (never seen) our export
        raise ParityError(f"onnx: {model_file} fails the ONNX checker: {str(exc)[:300]}") from exc
    inputs, source = held_out_inputs(signature, data_dir, samples,
                                     None if inputs_file is None else model_dir / inputs_file)
    if program is None:
        report = run_once(onnx_path, inputs, source=source, atol=atol, rtol=rtol,
                          min_top1_agreement=min_top1_agreement)
    else:
        report = parity_gate(onnx_path, program.module(), inputs, source=source, atol=atol, rtol=rtol,
                             min_top1_agreement=min_top1_agreement, classifier="classes" in signature)
    exported = {**signature, "format": "onnx", "file": ONNX_FILE, "opset": opset, "parity": report.to_dict()}
    (out_dir / SIGNATURE).write_text(json.dumps(exported, indent=1))
    for extra in model_dir.iterdir():  # labels, notes and the like travel with the model
        if extra.is_file() and extra.name not in (SIGNATURE, model_file):
            shutil.copy(extra, out_dir / extra.name)
    return report
