"""The rules export applies that need no torch (mlrunway.onnx_export.signature): what the Train task checks
as soon as its job ends, and export again. Each refusal names the field and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from mlrunway.errors import SpecError
from mlrunway.onnx_export.signature import ArrayHeader, check_inputs, inputs_of, load_inputs, read_headers

TOKENS = {"name": "tokens", "dtype": "int64", "shape": [None, None]}
MASK = {"name": "attention_mask", "dtype": "bool", "shape": [None, None]}


def sig(*inputs: dict) -> dict:
    return {"inputs": list(inputs)}


def test_inputs_are_read_with_their_dtypes_and_a_missing_dtype_is_float32():
    specs = inputs_of(sig(TOKENS, {"name": "x", "shape": [None, 8]}))
    assert [(s.name, s.dtype, s.shape) for s in specs] == [("tokens", "int64", (None, None)),
                                                            ("x", "float32", (None, 8))]


@pytest.mark.parametrize(("signature", "message"), [
    ({}, r"signature.json inputs: None is not a non-empty list"),
    (sig({"name": "x", "dtype": "uint8", "shape": [None, 2]}), r"inputs\[0\].dtype: 'uint8' is not one export handles"),
    (sig(TOKENS, {**MASK, "name": "tokens"}), r"inputs\[1\].name: 'tokens' is the name of an earlier input too"),
    (sig({"name": "x", "shape": [None, 0]}), r"inputs\[0\].shape: \[None, 0\] is not a list of sizes"),
    (sig({"name": "x", "shape": [None, True]}), r"inputs\[0\].shape"),
    (sig(TOKENS, {"dtype": "bool", "shape": [None]}), r"inputs\[1\].name: None is not an input name"),
])
def test_a_signature_export_cannot_honour_is_refused_naming_the_field(signature, message):
    with pytest.raises(SpecError, match=message):
        inputs_of(signature)


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_an_int_or_bool_input_without_an_inputs_file_is_refused(dtype):
    with pytest.raises(SpecError, match=rf"signature.json inputs\[1\].dtype: {dtype} input 'ids' has no safe random "
                                        r"values .* pass export.inputs_file"):
        check_inputs(sig({"name": "x", "shape": [None, 4]}, {"name": "ids", "dtype": dtype, "shape": [None, 4]}), None)


def test_a_float_axis_of_any_size_without_an_inputs_file_is_refused_and_fixed_sizes_may_be_random():
    with pytest.raises(SpecError, match=r"inputs\[0\].shape\[2\]: null .* pass export.inputs_file"):
        check_inputs(sig({"name": "x", "dtype": "float64", "shape": [None, 3, None]}), None)
    assert check_inputs(sig({"name": "x", "dtype": "float64", "shape": [None, 3, 5]}), None)[0].dtype == "float64"


def test_float16_is_refused_unless_the_dag_sets_the_tolerance():
    half = sig({"name": "x", "dtype": "float16", "shape": [None, 4]})
    with pytest.raises(SpecError, match=r"inputs\[0\].dtype: float16 is refused by default: the parity rule's default "
                                        r"tolerance is tuned for float32 rounding; set export atol and rtol"):
        check_inputs(half, None)
    assert check_inputs(half, None, tolerance_given=True)[0].dtype == "float16"


def test_an_image_gate_takes_one_float_input_only():
    with pytest.raises(SpecError, match=r"an image classifier's gate feeds one float input"):
        check_inputs(sig(TOKENS), None, images=True)
    assert check_inputs(sig({"name": "input", "shape": [None, 1, 8, 8]}), None, images=True)


def headers(**arrays: tuple[str, tuple[int, ...]]) -> dict[str, ArrayHeader]:
    return {name: ArrayHeader(dtype, shape) for name, (dtype, shape) in arrays.items()}


@pytest.mark.parametrize(("signature", "arrays", "message"), [
    (sig(TOKENS), {"": ArrayHeader("float32", (4, 7))},
     r"inputs\[0\].dtype: int64, and export.inputs_file holds float32; .* never cast"),
    (sig(TOKENS), {"": ArrayHeader("int64", (4,))},
     r"inputs\[0\].shape: export.inputs_file holds shape \[4\], and the signature wants \[N, any\]"),
    (sig({"name": "x", "shape": [None, 8]}), {"": ArrayHeader("float32", (4, 9))},
     r"holds shape \[4, 9\], and the signature wants \[N, 8\]"),
    (sig({"name": "x", "shape": [None, 8]}), {"": ArrayHeader("float32", (0, 8))}, r"\(N >= 1\)"),
    (sig(TOKENS, MASK), {"": ArrayHeader("int64", (4, 7))},
     r"export.inputs_file: a .npy holds one array and the signature has 2 inputs .* save an .npz"),
    (sig(TOKENS, MASK), headers(tokens=("int64", (4, 7)), mask=("bool", (4, 7))),
     r"its arrays are \['mask', 'tokens'\] .* \(missing \['attention_mask'\]\) \(not inputs: \['mask'\]\)"),
    (sig(TOKENS, MASK), headers(tokens=("int64", (4, 7)), attention_mask=("int64", (4, 7))),
     r"inputs\[1\].dtype: bool, and export.inputs_file array 'attention_mask' holds int64"),
    (sig(TOKENS, MASK), headers(tokens=("int64", (4, 7)), attention_mask=("bool", (3, 7))),
     r"array 'attention_mask' has 3 rows and the first input 4"),
])
def test_an_inputs_file_must_match_the_signature_without_casting(signature, arrays, message):
    with pytest.raises(SpecError, match=message):
        check_inputs(signature, arrays)


def test_headers_are_read_without_loading_and_the_arrays_load_as_stored(tmp_path):
    tokens = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.save(tmp_path / "one.npy", tokens)
    np.savez(tmp_path / "two.npz", tokens=tokens, attention_mask=tokens > 2)
    assert read_headers(tmp_path / "one.npy") == {"": ArrayHeader("int64", (3, 4))}
    assert read_headers(tmp_path / "two.npz") == headers(tokens=("int64", (3, 4)), attention_mask=("bool", (3, 4)))
    specs = check_inputs(sig(TOKENS, MASK), read_headers(tmp_path / "two.npz"))
    loaded = load_inputs(tmp_path / "two.npz", specs, samples=2)
    assert loaded["tokens"].dtype == np.int64 and loaded["attention_mask"].dtype == np.bool_
    assert loaded["tokens"].tolist() == tokens[:2].tolist()
    assert load_inputs(tmp_path / "one.npy", inputs_of(sig(TOKENS)), samples=5)["tokens"].shape == (3, 4)


@pytest.mark.parametrize(("content", "message"), [
    (None, r"export.inputs_file: .*missing.npy does not exist; the job must save it in the model folder"),
    (b"not an array", r"export.inputs_file: bad.npy is not a .npy or .npz of arrays"),
    ("objects", r"is not a .npy or .npz of arrays \(it holds Python objects"),
])
def test_an_unreadable_inputs_file_is_a_named_error(tmp_path, content, message):
    path = tmp_path / ("missing.npy" if content is None else "bad.npy")
    if content == "objects":
        np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(SpecError, match=message):
        read_headers(path)


def test_the_train_tasks_check_of_a_model_folder_imports_no_torch(tmp_path):
    """It runs in the Airflow worker, which has no torch: the signature and the inputs file's header only."""
    import json
    import subprocess
    import sys

    np.save(tmp_path / "ids.npy", np.ones((2, 5), np.int64))
    (tmp_path / "signature.json").write_text(json.dumps(sig(TOKENS)))
    code = ("import sys; from mlrunway.onnx_export.export import check_model_folder; "
            f"specs = check_model_folder({str(tmp_path)!r}, inputs_file='ids.npy'); "
            "print(specs[0].dtype, sorted(m for m in ('torch', 'onnx', 'onnxruntime') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["int64", "[]"]
