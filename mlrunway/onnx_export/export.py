"""Export a saved model (train.py's ``model.pt2`` + ``signature.json``) to ONNX and gate it on parity.

The ONNX file takes the signature's inputs (names, dtypes, a dynamic axis wherever it says null) at a stated
opset; ``onnx.checker`` must accept it; then ONNX Runtime and PyTorch must agree on held-out inputs: the model
folder's inputs file, else validation images when the data folder is known, else random float inputs of the
signature's shape (:mod:`.signature` holds the rules that need no torch).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from .errors import ParityError, SpecError, shorten
from .parity import ATOL, RTOL, ParityReport, check_tolerance, compare, outputs_of
from .signature import InputSpec, check_inputs, inputs_of, load_inputs, outputs_named, read_headers

DEFAULT_OPSET = 18
EXTERNAL_DATA_BYTES = 1_500_000_000  # weights over this go to model.onnx.data (a protobuf holds at most 2 GB)
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
    """Every input (:func:`.signature.inputs_of`: a name, a dtype, a shape of sizes with null for any);
    ``preprocessing`` (when present) with a 2-number ``size`` and a ``mean``/``std`` of one number or one per
    channel; ``classes`` a list when present."""
    from .images import normalization

    inputs_of(signature)
    outputs_named(signature)
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


def reads_images(signature: dict[str, Any], data_dir: str | Path | None) -> bool:
    """Whether the gate reads ``data_dir``'s validation images: an image classifier's signature (``classes`` and
    ``preprocessing``) with its data folder. Any other model's ``data_dir`` is not images to read."""
    return data_dir is not None and bool(signature.get("classes")) and bool(signature.get("preprocessing"))


def check_model_folder(model_dir: str | Path, *, inputs_file: str | None = None, data_dir: str | Path | None = None,
                       tolerance_given: bool = False) -> list[InputSpec]:
    """Every rule export applies that needs no torch, on a model folder: its signature.json, and the inputs file
    (relative to the folder) read from its header. The Train task runs it as soon as its job ends; export again."""
    signature = read_signature(Path(model_dir))
    headers = None if inputs_file is None else read_headers(Path(model_dir) / inputs_file)
    return check_inputs(signature, headers, images=reads_images(signature, data_dir), tolerance_given=tolerance_given,
                        file_name=inputs_file or "")


def held_out_inputs(signature: dict[str, Any], data_dir: str | Path | None, samples: int,
                    inputs_file: str | Path | None = None, *, tolerance_given: bool = False):
    """The parity gate's inputs, by input name: the arrays of a file the user names (``.npy`` for one input, or
    an ``.npz`` of one array per input name, batch first, as stored: never cast), else validation images (an
    image classifier's signature and ``data_dir/val/``), else seeded random inputs of each float input's dtype and
    shape; return (inputs, description). :func:`.signature.check_inputs` refuses what has no inputs."""
    import numpy as np

    from .images import load_labeled

    images = reads_images(signature, data_dir)
    specs = check_inputs(signature, None if inputs_file is None else read_headers(inputs_file), images=images,
                         tolerance_given=tolerance_given, file_name=Path(inputs_file or "").name)
    if inputs_file is not None:
        return load_inputs(inputs_file, specs, samples), f"inputs from {Path(inputs_file).name}"
    if images:
        # An image classifier's data: its validation images, or a named error (never random inputs in their place).
        val = Path(data_dir) / "val"  # type: ignore[arg-type]
        if not val.is_dir():
            raise SpecError(f"data_dir: {val} does not exist; an image classifier's parity gate reads its validation "
                            "images: pass ImageFolder data (val/<class>/<image>), or inputs_file")
        inputs, _ = load_labeled(val, signature["classes"], signature["preprocessing"], limit=samples)
        return {specs[0].name: inputs.astype(specs[0].dtype, copy=False)}, "validation images"
    rng = np.random.default_rng(0)  # check_inputs refused an axis of any size here: each size is known
    return {spec.name: rng.standard_normal([samples, *cast(list[int], spec.shape[1:])]).astype(spec.dtype)
            for spec in specs}, "random inputs"


def _session(onnx_path: Path, specs: list[InputSpec]) -> tuple[Any, Callable[[dict[str, Any]], dict[str, Any]]]:
    """An ONNX Runtime session on one thread, and a feed of the signature's inputs by position (a team's own
    ONNX file may name them otherwise); ParityError when the counts differ or the file does not load."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime raises its own types; the model is what failed
        raise ParityError(f"onnx: {onnx_path.name} does not load in ONNX Runtime: {type(exc).__name__}: "
                          f"{shorten(str(exc), 300)}") from exc
    names = [item.name for item in session.get_inputs()]
    if len(names) != len(specs):
        raise ParityError(f"signature.json inputs: {len(specs)} ({', '.join(s.name for s in specs)}), and "
                          f"{onnx_path.name} takes {len(names)} ({', '.join(names)}); describe each input in order")
    return session, lambda batch: {name: batch[spec.name] for name, spec in zip(names, specs, strict=True)}


def _guarded(what: str, run: Any) -> Any:
    """``run`` with any exception of torch or ONNX Runtime turned into a ParityError that says which model failed."""
    def call(batch: Any) -> Any:
        try:
            return run(batch)
        except Exception as exc:  # noqa: BLE001 - torch and ONNX Runtime raise their own types
            shapes = ", ".join(f"{name} {list(array.shape)} {array.dtype}" for name, array in batch.items())
            raise ParityError(f"onnx parity: {what} failed on inputs {shapes}: {type(exc).__name__}: "
                              f"{shorten(str(exc), 300)}") from exc
    return call


def parity_gate(onnx_path: Path, module: Any, inputs: Any, *, source: str, atol: float = ATOL,
                rtol: float = RTOL, min_top1_agreement: float, classifier: bool = True,
                specs: list[InputSpec] | None = None, positional: int | None = None,
                names: list[str] | None = None, top1_output: str | None = None) -> ParityReport:
    """ONNX Runtime on ``onnx_path`` against the PyTorch ``module``, both fed ``inputs`` (a dict by input name, in
    the order the program takes them ``specs``, default the dict's: the first ``positional`` by position, the rest
    by keyword; or one input's array); each output compared by its name (``names``, in the ONNX model's order: the
    torch module's outputs flattened as :func:`flatten` does); ParityError when an output is outside ``atol + rtol
    * |torch|`` (or a classifier's top-1 answers on ``top1_output`` disagree)."""
    import numpy as np
    import torch

    if not isinstance(inputs, dict):  # one input's array
        inputs = {specs[0].name if specs else "input": inputs}
    specs = specs or [InputSpec(i, name, array.dtype.name, tuple(array.shape))
                      for i, (name, array) in enumerate(inputs.items())]
    positional = len(specs) if positional is None else positional
    session, feed = _session(onnx_path, specs)

    def torch_outputs(batch: dict[str, Any]) -> Any:
        tensors = [torch.from_numpy(np.ascontiguousarray(batch[spec.name])) for spec in specs]
        with torch.no_grad():
            result = module(*tensors[:positional], **{s.name: t for s, t in zip(specs[positional:],
                                                                                 tensors[positional:], strict=True)})
        return [leaf for _, leaf in flatten(result)]

    return compare(_guarded("PyTorch", torch_outputs), _guarded("ONNX Runtime", lambda b: session.run(None, feed(b))),
                   inputs, source=source, atol=atol, rtol=rtol, min_top1_agreement=min_top1_agreement,
                   classifier=classifier, names=names, top1_output=top1_output)


def flatten(result: Any) -> list[tuple[str, Any]]:
    """A model's outputs in the one order torch.export and the ONNX export flatten them (torch's pytree: a tuple's
    or list's items in order, a dict's in its keys' order, a namedtuple's fields, nested ones depth first), each
    with its path as a name: ``logits`` (a dict key), ``hidden.0`` (its first item), ``0`` (a tuple's first); one
    tensor's path is empty."""
    from torch.utils._pytree import tree_flatten_with_path

    leaves, _ = tree_flatten_with_path(result)
    return [(".".join(str(next((getattr(key, attr) for attr in ("key", "idx", "name") if hasattr(key, attr)), key))
                      for key in path), leaf) for path, leaf in leaves]


def output_names(flat: list[tuple[str, Any]], signature: dict[str, Any], pt2: Path) -> list[str]:
    """The ONNX outputs' names: the flattened outputs' paths (one tensor: ``logits``), or signature.json's
    ``outputs`` in their place where the paths are only positions (a tuple's); where they are keys, the signature
    must name the same ones. A SpecError names both lists when the signature names outputs the model lacks, and
    an output that is not a tensor."""
    import torch

    for path, leaf in flat:
        if not isinstance(leaf, torch.Tensor):
            raise SpecError(f"model: {pt2.name}'s output {path or '(the whole output)'} is a {type(leaf).__name__}, "
                            "not a tensor; return tensors only (a dict, tuple or list of them)")
    paths = [path for path, _ in flat]
    given = outputs_named(signature)
    keyed = any(not part.isdigit() for path in paths for part in path.split(".") if path)
    if given is None:
        return ["logits"] if paths == [""] else paths
    shown = ", ".join(p or "(one tensor)" for p in paths)
    if len(given) != len(paths) or (keyed and sorted(given) != sorted(paths)):
        raise SpecError(f"signature.json outputs: {', '.join(given)}; {pt2.name} gives {len(paths)} ({shown}); name "
                        "the model's outputs: its dict keys, or one name per output in the order it returns them")
    return paths if keyed else given


def check_onnx(onnx_path: Path) -> None:
    """The ONNX checker with shape inference (``full_check``). A model keeping tensors in external data is checked
    with them loaded (shape inference reads constants, which a file may keep outside); one too large for a protobuf
    (2 GB) by its path, the checker's structure rules without shape inference."""
    import onnx

    data = external_data(onnx_path)
    if not data:
        onnx.checker.check_model(str(onnx_path), full_check=True)
    elif sum((onnx_path.parent / name).stat().st_size for name in data) < EXTERNAL_DATA_BYTES:
        onnx.checker.check_model(onnx.load(str(onnx_path)), full_check=True)
    else:
        onnx.checker.check_model(str(onnx_path))


def external_data(onnx_file: Path) -> list[str]:
    """The files an ONNX model keeps its tensors in beside it (``model.onnx.data``: how models over 2 GB are stored),
    relative to its folder; a location that leaves the folder is a SpecError (the model would read another file)."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    try:
        model = onnx.load(str(onnx_file), load_external_data=False)
    except Exception:  # noqa: BLE001 - not a model (protobuf's DecodeError, and more): the checker says what
        return []
    found = []
    for tensor in _get_all_tensors(model):
        if uses_external_data(tensor):
            location = ExternalDataInfo(tensor).location
            resolved = (onnx_file.parent / location).resolve()
            if not resolved.is_relative_to(onnx_file.parent.resolve()) or not resolved.is_file():
                raise SpecError(f"model: {onnx_file.name} keeps tensor {tensor.name} in {location!r}, which is not a "
                                "file beside it; save the model with its external data in its own folder")
            if location not in found:
                found.append(location)
    return found


def load_program(pt2: Path) -> Any:
    """``torch.export.load(pt2)``. A namedtuple the program returns is rebuilt from the fields the archive records
    (the export job has none of the team's code); any other container it cannot import (a team's own dataclass,
    transformers' ``ModelOutput``) is a SpecError naming the type and the fix."""
    import collections

    import torch
    import torch.utils._pytree as pytree

    types, namedtuples = _spec_types(pt2)
    for name, fields in namedtuples.items():
        if name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            rebuilt = collections.namedtuple(name.rpartition(".")[2] or "Output", fields)  # type: ignore[misc]
            pytree._register_namedtuple(rebuilt, serialized_type_name=name)
    unknown = sorted(t for t in types if t not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE)
    if unknown:
        raise SpecError(f"model: {pt2.name} returns (or takes) {', '.join(unknown)}, a container the export job "
                        "cannot import (it runs without your code and without transformers); return a dict from "
                        "forward (e.g. `return dict(output)`) and save the program again")
    try:
        return torch.export.load(pt2)
    except Exception as exc:  # noqa: BLE001 - torch raises a RuntimeError and logs the cause
        raise ParityError(f"onnx: {pt2.name} does not load with torch.export.load: {type(exc).__name__}: "
                          f"{shorten(str(exc), 300)}") from exc


def _spec_types(pt2: Path) -> tuple[set[str], dict[str, list[str]]]:
    """The container types a saved program's input and output specs name, and the namedtuples it records with
    their fields; read from its archive's model JSON, nothing loaded (empty where it cannot be read: the load then
    says what is wrong)."""
    import zipfile

    types: set[str] = set()
    namedtuples: dict[str, list[str]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("in_spec", "out_spec") and isinstance(value, str):
                    with contextlib.suppress(ValueError):
                        spec(json.loads(value))
                elif key == "treespec_namedtuple_fields" and isinstance(value, dict):
                    namedtuples.update({str(k): list(v.get("field_names", [])) for k, v in value.items()
                                        if isinstance(v, dict)})
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    def spec(node: Any) -> None:  # [version, {"type", "context", "children_spec"}] or the node itself
        if isinstance(node, list):
            for item in node:
                spec(item)
        elif isinstance(node, dict):
            if isinstance(node.get("type"), str) and node["type"] != "collections.namedtuple":
                types.add(node["type"])
            spec(node.get("children_spec") or [])

    try:
        with zipfile.ZipFile(pt2) as archive:
            for name in archive.namelist():
                if "/models/" in name and name.endswith(".json"):
                    walk(json.loads(archive.read(name)))
    except (OSError, ValueError, zipfile.BadZipFile):
        return set(), {}
    return types, namedtuples


def calling(program: Any, specs: list[InputSpec], pt2: Path) -> tuple[list[InputSpec], int]:
    """The signature's inputs in the order the program takes them, and how many it takes by position: those
    first, as the signature lists them, then its keyword inputs (``torch.export.export(model, (), kwargs=...)``),
    matched by name. A keyword the signature does not name is a SpecError naming both."""
    spec = program.call_spec.in_spec
    children = spec.children() if callable(getattr(spec, "children", None)) else spec.children_specs
    keywords = [str(k) for k in (children[1].context or [])] if len(children) == 2 else []
    if not keywords:
        return specs, len(specs)
    by_name = {s.name: s for s in specs}
    if missing := [k for k in keywords if k not in by_name]:
        raise SpecError(f"signature.json inputs: {', '.join(by_name)}; {pt2.name} takes keyword inputs "
                        f"{', '.join(keywords)}: name each keyword input as its keyword ({', '.join(missing)} is not)")
    positional = [s for s in specs if s.name not in keywords]
    return positional + [by_name[k] for k in keywords], len(positional)


def run_once(onnx_path: Path, inputs: dict[str, Any], specs: list[InputSpec], *, source: str, atol: float = ATOL,
             rtol: float = RTOL, min_top1_agreement: float) -> ParityReport:
    """ONNX Runtime on the inputs, with no source to compare against: it must load, take the inputs and give
    finite outputs, batch first, for each of them; ParityError says what went wrong."""
    import numpy as np

    session, feed = _session(onnx_path, specs)
    outputs = outputs_of(_guarded("ONNX Runtime", lambda b: session.run(None, feed(b)))(inputs))
    count = len(next(iter(inputs.values())))
    for output in outputs:
        if not output.shape or len(output) != count or (output.dtype.kind in "fc" and not np.isfinite(output).all()):
            raise ParityError(f"onnx: {onnx_path.name} gave {output.shape} outputs with non-finite values or the "
                              f"wrong batch size for {count} {source}")
    return ParityReport(max_abs_diff=None, top1_agreement=None, samples=count, inputs=source, atol=atol,
                        rtol=rtol, min_top1_agreement=min_top1_agreement)


def check_program(program: Any, specs: list[InputSpec], pt2: Path) -> None:
    """The torch program's own inputs against the signature: as many, each of the signature's dtype and rank,
    every axis the signature leaves any size (null) dynamic in the program (export cannot make a static axis
    dynamic), every size it gives the program's."""
    placeholders = [node for node in program.graph.nodes
                    if node.op == "placeholder" and node.name in program.graph_signature.user_inputs]
    if len(placeholders) != len(specs):
        raise SpecError(f"signature.json inputs: {len(specs)} ({', '.join(s.name for s in specs)}), and {pt2.name} "
                        f"takes {len(placeholders)}; describe each of the program's inputs, in order")
    for spec, node in zip(specs, placeholders, strict=True):
        value = node.meta.get("val")
        if value is None or not hasattr(value, "shape"):
            raise SpecError(f"{spec.field}: {pt2.name}'s input {node.name} is not a tensor; export a program whose "
                            "inputs are tensors")
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype != spec.dtype:
            raise SpecError(f"{spec.field}.dtype: {spec.dtype}, and {pt2.name} takes {dtype}; write {dtype!r} (or "
                            "export the program with inputs of the signature's dtype)")
        dims = list(value.shape)
        if len(dims) != len(spec.shape):
            raise SpecError(f"{spec.field}.shape: {len(spec.shape)} axes, and {pt2.name} takes {len(dims)}; describe "
                            "every axis, batch first")
        for axis, (size, dim) in enumerate(zip(spec.shape, dims, strict=True)):
            static = isinstance(dim, int)
            if size is None and static:
                raise SpecError(f"{spec.field}.shape[{axis}]: null (any size), and {pt2.name} has that axis fixed at "
                                f"{dim}; export cannot make a static axis dynamic: save the program with a "
                                f"torch.export.Dim on axis {axis} (dynamic_shapes), or write {dim} in signature.json")
            if size is not None and static and size != dim:
                raise SpecError(f"{spec.field}.shape[{axis}]: {size}, and {pt2.name} has that axis fixed at {dim}; "
                                "write the program's size")


def _resolved(atol: float | None, rtol: float | None) -> tuple[float, float, bool]:
    """The tolerance to gate with, and whether the DAG set it (float16 needs that)."""
    return (ATOL if atol is None else atol), (RTOL if rtol is None else rtol), atol is not None or rtol is not None


def export_onnx(model_dir: str | Path, out_dir: str | Path, *, opset: int = DEFAULT_OPSET,
                data_dir: str | Path | None = None, samples: int = 256, atol: float | None = None,
                rtol: float | None = None, min_top1_agreement: float = 1.0,
                inputs_file: str | Path | None = None) -> ParityReport:
    """Write ``out_dir/model.onnx`` and its signature; return the parity report (ParityError if it fails).
    ``inputs_file`` (a ``.npy``, or an ``.npz`` of one array per input name; relative paths are in the model
    folder) feeds the gate, which wants every output within ``atol + rtol * |torch|`` (numpy's ``isclose``; see
    :mod:`.parity`; None: the default rule, which float16 inputs may not use).

    The ONNX model's inputs are the signature's, by name, in the order the program takes them (positional, then
    keyword), with a dynamic axis wherever the signature says null (the program must have it dynamic); its outputs
    are the program's flattened (:func:`flatten`), named by :func:`output_names` (one tensor: ``logits``). A model folder whose
    signature names a ``.onnx`` (the team exported it itself) is taken as it is: the ONNX checker, then the gate
    against a ``model.pt2`` beside it, else one ONNX Runtime run on the gate's inputs (the deployment's smoke
    test then runs score.py on it)."""
    import onnx
    import torch

    atol, rtol, given = _resolved(atol, rtol)
    check_tolerance(atol, rtol)
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    signature = read_signature(model_dir)
    inputs, source = held_out_inputs(signature, data_dir, samples,
                                     None if inputs_file is None else model_dir / inputs_file, tolerance_given=given)
    specs = inputs_of(signature)
    model_file = signature.get("file", "model.pt2")
    pt2 = model_dir / (model_file if model_file.endswith(".pt2") else "model.pt2")
    program = load_program(pt2) if pt2.is_file() else None
    positional, names = len(specs), None
    if program is not None:
        specs, positional = calling(program, specs, pt2)
        check_program(program, specs, pt2)
        example = [torch.from_numpy(inputs[spec.name][:2].copy()) for spec in specs]
        args, kwargs = tuple(example[:positional]), {s.name: t for s, t in zip(specs[positional:],
                                                                               example[positional:], strict=True)}
        with torch.no_grad():  # the outputs' structure, which names them
            sample = _guarded("PyTorch", lambda _: program.module()(*args, **kwargs))(
                {spec.name: inputs[spec.name][:2] for spec in specs})
        names = output_names(flatten(sample), signature, pt2)
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = out_dir / ONNX_FILE
    if model_file.endswith(".onnx"):
        shutil.copy(model_dir / model_file, onnx_path)
        for data in external_data(model_dir / model_file):  # weights stored beside it (models over 2 GB)
            shutil.copy(model_dir / data, out_dir / data)
    elif program is None:
        raise SpecError(f"model: {pt2} is missing; save model.pt2 (torch.export) or model.onnx, as signature.json says")
    else:
        try:
            weights = sum(t.numel() * t.element_size() for t in program.state_dict.values())
            torch.onnx.export(program, args, str(onnx_path), kwargs=kwargs, opset_version=opset, dynamo=True,
                              input_names=[spec.name for spec in specs], output_names=names,
                              external_data=weights > EXTERNAL_DATA_BYTES)  # beside it: model.onnx.data
        except Exception as exc:  # noqa: BLE001 - torch's exporter raises many types; say which model and why
            raise ParityError(f"onnx: torch.onnx.export failed on {pt2.name} at opset {opset}: {type(exc).__name__}: "
                              f"{shorten(str(exc), 600)}") from exc
    try:
        check_onnx(onnx_path)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:  # a team's own file, or
        raise ParityError(f"onnx: {model_file} fails the ONNX checker: {str(exc)[:300]}") from exc  # (never) ours
    if program is None:
        report = run_once(onnx_path, inputs, specs, source=source, atol=atol, rtol=rtol,
                          min_top1_agreement=min_top1_agreement)
    else:
        report = parity_gate(onnx_path, program.module(), inputs, source=source, atol=atol, rtol=rtol,
                             min_top1_agreement=min_top1_agreement, classifier="classes" in signature, specs=specs,
                             positional=positional, names=names, top1_output=signature.get("classifier_output"))
    exported = {**signature, "format": "onnx", "file": ONNX_FILE, "opset": opset, "parity": report.to_dict()}
    (out_dir / SIGNATURE).write_text(json.dumps(exported, indent=1))
    for extra in model_dir.iterdir():  # labels, notes and the like travel with the model
        if extra.is_file() and extra.name not in (SIGNATURE, model_file):
            shutil.copy(extra, out_dir / extra.name)
    return report
