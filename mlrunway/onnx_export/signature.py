"""A model's inputs as its ``signature.json`` states them, and every rule export applies that needs no torch.

The same checks run twice: when the Train job ends, on the model folder it left (before the sweep spends
anything; the Airflow worker has no torch, so only these), and again at export, before the program is loaded.
Each refusal names the field and the fix; nothing here raises a raw numpy or zipfile error.

An input is ``{"name": "tokens", "dtype": "int64", "shape": [null, null]}``: a dtype of :data:`DTYPES` (float32
when left out, as signatures written before dtypes were read), and a shape whose first axis is the batch and
whose ``null`` axes take any size. The parity gate's inputs come from the model folder's inputs file (a ``.npy``
for one input, or an ``.npz`` with one array per input name), taken as they are, never cast; without one, float
inputs of fixed sizes may be random, and an int or bool input (an embedding's index range is unknown) or an axis
of any size is refused. float16 is refused unless the DAG sets the parity tolerance itself: the default rule is
tuned for float32 rounding.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SpecError

DTYPES = ("float32", "float64", "float16", "int64", "int32", "bool")
FLOATS = ("float32", "float64", "float16")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,127}$")
INPUTS_FILE = "export.inputs_file"


@dataclass(frozen=True)
class InputSpec:
    """One model input: its place in the signature (``index``), ONNX name, dtype and shape (None: any size)."""

    index: int
    name: str
    dtype: str
    shape: tuple[int | None, ...]

    @property
    def field(self) -> str:
        return f"signature.json inputs[{self.index}]"


@dataclass(frozen=True)
class ArrayHeader:
    """An array of an inputs file as its header describes it (nothing loaded)."""

    dtype: str
    shape: tuple[int, ...]


def inputs_of(signature: Any) -> list[InputSpec]:
    """The signature's inputs, checked: a non-empty list of objects, each with a unique ``name``, a ``dtype`` of
    :data:`DTYPES` and a ``shape`` of sizes (null for any), batch first."""
    inputs = signature.get("inputs") if isinstance(signature, Mapping) else None
    if not isinstance(inputs, list) or not inputs:
        raise SpecError(f"signature.json inputs: {inputs!r} is not a non-empty list; write e.g. "
                        '[{"name": "input", "dtype": "float32", "shape": [null, 3, 32, 32]}]')
    found: list[InputSpec] = []
    for index, entry in enumerate(inputs):
        field = f"signature.json inputs[{index}]"
        if not isinstance(entry, Mapping):
            raise SpecError(f"{field}: {entry!r} is not an object; write "
                            '{"name": "input", "dtype": "float32", "shape": [null, 8]}')
        name = entry.get("name", "input" if len(inputs) == 1 else None)
        if not isinstance(name, str) or not _NAME.match(name):
            raise SpecError(f"{field}.name: {name!r} is not an input name; name each input (letters, digits, '_', a "
                            "letter or '_' first): it becomes the ONNX model's input name")
        if name in {spec.name for spec in found}:
            raise SpecError(f"{field}.name: {name!r} is the name of an earlier input too; give each input its own")
        dtype = entry.get("dtype", "float32")
        if dtype not in DTYPES:
            raise SpecError(f"{field}.dtype: {dtype!r} is not one export handles; use one of {', '.join(DTYPES)}")
        shape = entry.get("shape")
        if not isinstance(shape, list) or not shape or not all(
                d is None or (isinstance(d, int) and not isinstance(d, bool) and d > 0) for d in shape):
            raise SpecError(f"{field}.shape: {shape!r} is not a list of sizes, batch first; write e.g. "
                            "[null, 3, 32, 32] (null for an axis of any size: the batch, a text's length)")
        found.append(InputSpec(index, name, dtype, tuple(shape)))
    return found


def outputs_named(signature: Any) -> list[str] | None:
    """The signature's ``outputs``, checked: None when left out, else a non-empty list of unique names (each a
    string, or an object with a ``name``) in the order the model's outputs are flattened; ``classifier_output``,
    when given, one of them (the output top-1 agreement is measured on; default the first)."""
    given = signature.get("outputs") if isinstance(signature, Mapping) else None
    chosen = signature.get("classifier_output") if isinstance(signature, Mapping) else None
    if chosen is not None and not (isinstance(chosen, str) and chosen):
        raise SpecError(f"signature.json classifier_output: {chosen!r} is not an output's name; name the output that "
                        "holds the class scores, or leave it out for the first")
    if given is None:
        return None
    names = [item.get("name") if isinstance(item, Mapping) else item for item in given] \
        if isinstance(given, list) else None
    if not names or not all(isinstance(n, str) and _NAME.match(n) for n in names) or len(set(names)) != len(names):
        raise SpecError(f"signature.json outputs: {given!r} is not a list of unique output names; write e.g. "
                        '["logits", "weekly_sales"], in the order the model returns them (a dict: its keys)')
    checked = [str(n) for n in names]
    if chosen is not None and chosen not in checked:
        raise SpecError(f"signature.json classifier_output: {chosen!r} is not one of outputs ({', '.join(checked)}); "
                        "name one of them")
    return checked


def check_inputs(signature: Any, inputs_file: Mapping[str, ArrayHeader] | None, *, images: bool = False,
                 tolerance_given: bool = False, file_name: str = "") -> list[InputSpec]:
    """Every static rule export applies to the signature's inputs, given the inputs file's arrays (name to
    header, from :func:`read_headers`; None without a file; ``file_name`` for the messages) and whether the gate reads validation ``images``
    instead (an image classifier with its data folder). ``tolerance_given``: the DAG set ``atol``/``rtol``
    itself, which float16 needs. Return the inputs."""
    specs = inputs_of(signature)
    for spec in specs:
        if spec.dtype == "float16" and not tolerance_given:
            raise SpecError(f"{spec.field}.dtype: float16 is refused by default: the parity rule's default tolerance "
                            "is tuned for float32 rounding; set export atol and rtol for float16 outputs (they are "
                            "then gated with those), or export a float32 model")
    if inputs_file is not None:
        _check_file(specs, inputs_file, file_name)
    elif images:
        if len(specs) > 1 or specs[0].dtype not in FLOATS:
            raise SpecError(f"{specs[0].field}: an image classifier's gate feeds one float input of validation "
                            f"images, and the signature has {len(specs)} input(s) of {specs[0].dtype}; pass "
                            f"{INPUTS_FILE} with the model's own inputs")
    else:
        for spec in specs:
            if spec.dtype not in FLOATS:
                raise SpecError(f"{spec.field}.dtype: {spec.dtype} input {spec.name!r} has no safe random values (an "
                                "embedding's index range is unknown), and there is no inputs file; pass "
                                f"{INPUTS_FILE}: a .npy (or an .npz of one array per input name) of real inputs "
                                "the job saves in the model folder")
            if any(size is None for size in spec.shape[1:]):
                axis = next(j for j, size in enumerate(spec.shape) if j and size is None)
                raise SpecError(f"{spec.field}.shape[{axis}]: null (any size) leaves random inputs no size to take, "
                                f"and there is no inputs file; pass {INPUTS_FILE} with real inputs")
    return specs


def _check_file(specs: list[InputSpec], arrays: Mapping[str, ArrayHeader], file_name: str = "") -> None:
    label = f"{INPUTS_FILE} {file_name}".strip()
    names = [spec.name for spec in specs]
    single = "" in arrays  # a .npy: the one input's array
    if single and len(specs) > 1:
        raise SpecError(f"{label}: a .npy holds one array and the signature has {len(specs)} inputs "
                        f"({', '.join(names)}); save an .npz with one array per input name "
                        "(numpy.savez(path, **{name: array}))")
    if not single and set(arrays) != set(names):
        missing, extra = sorted(set(names) - set(arrays)), sorted(set(arrays) - set(names))
        raise SpecError(f"{label}: its arrays are {sorted(arrays)} and the signature's inputs are {names}"
                        f"{f' (missing {missing})' if missing else ''}{f' (not inputs: {extra})' if extra else ''}; "
                        "name each array as its input")
    batch = None
    for spec in specs:
        header = arrays[""] if single else arrays[spec.name]
        what = label if single else f"{label} array {spec.name!r}"
        if header.dtype != spec.dtype:
            raise SpecError(f"{spec.field}.dtype: {spec.dtype}, and {what} holds {header.dtype}; save the inputs "
                            f"as {spec.dtype} (array.astype(numpy.{spec.dtype})): they are fed as they are, never "
                            "cast")
        if len(header.shape) != len(spec.shape) or not header.shape[0] or any(
                size is not None and size != got for size, got in zip(spec.shape[1:], header.shape[1:], strict=False)):
            wanted = ", ".join("N" if j == 0 else "any" if size is None else str(size)
                               for j, size in enumerate(spec.shape))
            raise SpecError(f"{spec.field}.shape: {what} holds shape {list(header.shape)}, and the signature wants "
                            f"[{wanted}] (N >= 1); save inputs of that shape, batch first")
        if batch is not None and header.shape[0] != batch:
            raise SpecError(f"{label}: array {spec.name!r} has {header.shape[0]} rows and the first input "
                            f"{batch}; give every input the same batch")
        batch = header.shape[0]


def read_headers(path: str | Path) -> dict[str, ArrayHeader]:
    """The arrays of an inputs file, from their headers: a ``.npy`` is one array (named ``""``), an ``.npz``
    one per member. A missing or unreadable file, or an array of objects, is a SpecError naming the field."""
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{INPUTS_FILE}: {path} does not exist; the job must save it in the model folder (a .npy, or "
                        "an .npz of one array per input name)")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.namelist() if m.endswith(".npy")]
                if not members:
                    raise ValueError("the archive holds no .npy arrays")
                headers = {}
                for member in members:
                    with archive.open(member) as handle:
                        headers[member.removesuffix(".npy")] = _header(np, handle)
                return headers
        with path.open("rb") as handle:
            return {"": _header(np, handle)}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise SpecError(f"{INPUTS_FILE}: {path.name} is not a .npy or .npz of arrays ({exc}); save one with "
                        "numpy.save or numpy.savez") from exc


def _header(np: Any, handle: Any) -> ArrayHeader:
    version = np.lib.format.read_magic(handle)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        raise ValueError(f".npy format version {version} (numpy.save writes 1.0 or 2.0)")
    shape, _fortran, dtype = readers[version](handle)
    if dtype.hasobject or dtype.names:
        raise ValueError("it holds Python objects or records, which are not model inputs")
    return ArrayHeader(dtype=np.dtype(dtype).name, shape=tuple(int(d) for d in shape))


def load_inputs(path: str | Path, specs: list[InputSpec], samples: int) -> dict[str, Any]:
    """The inputs file's arrays by input name (their first ``samples`` rows), as stored; the caller has checked
    them against ``specs`` with :func:`check_inputs` (their headers), so they are not read twice."""
    import numpy as np

    if not zipfile.is_zipfile(path):
        return {specs[0].name: np.load(path, allow_pickle=False)[:samples]}
    with np.load(path, allow_pickle=False) as archive:
        return {spec.name: archive[spec.name][:samples] for spec in specs}
