"""The export job's runner: export a model folder to ONNX, gate it on parity, and write the verdict.

``python -m <package>.job --model DIR --onnx DIR --report DIR [--opset N] [--atol X] [--rtol Y] [--inputs-file F]
[--data-dir DIR] [--trainer-torch V]``

It runs as a job on the backend's compute, never in an Airflow worker: locally ``mlrunway.onnx_export.job`` in the
backend's Python; on Azure ML this module and its siblings are the job's code folder, where mlrunway is not
installed (they import only numpy, torch, onnx, onnxscript, onnxruntime and, for an image gate, pillow). It writes
``<report>/parity.json`` and exits 0 whatever the verdict, a failed gate included: a gate that fails is an answer,
read by the export task (which raises the ParityError), not a crash. Only what it did not foresee exits non-zero.

``parity.json``: ``{"format": 1, "key": "<--key>", "passed": true, "report": {<ParityReport.to_dict()>}, "signature": {<the ONNX
model's signature.json>}, "torch": "2.13.0", "onnxruntime": "1.31.1"}``, or ``{"format": 1, "passed": false, "error": "ParityError" | "SpecError" |
"environment", "message": "...", "missing": [<packages the environment lacks>]}``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from .errors import ParityError, SpecError
from .export import DEFAULT_OPSET, SIGNATURE, export_onnx

REPORT_FILE = "parity.json"
FORMAT = 1
NEEDS = ("torch", "onnx", "onnxscript", "onnxruntime")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def verdict(args: argparse.Namespace) -> dict[str, Any]:
    """The export's outcome as parity.json holds it (see the module's docstring)."""
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        return {"passed": False, "error": "environment", "missing": missing,
                "message": f"the export job's environment lacks {', '.join(missing)} (it runs {sys.executable})"}
    torch = (_version("torch") or "").split("+")[0]
    if args.trainer_torch and torch != args.trainer_torch:
        return {"passed": False, "error": "environment", "missing": [],
                "message": f"the export job's environment has torch {torch or 'of no version'}, and the trials train "
                           f"with torch {args.trainer_torch}; a .pt2 loads only in the torch that wrote it"}
    try:
        report = export_onnx(args.model, args.onnx, opset=args.opset, data_dir=args.data_dir, atol=args.atol,
                             rtol=args.rtol, inputs_file=args.inputs_file)
    except (ParityError, SpecError) as exc:
        return {"passed": False, "error": type(exc).__name__, "message": str(exc)}
    signature = json.loads((Path(args.onnx) / SIGNATURE).read_text())
    return {"passed": True, "report": report.to_dict(), "signature": signature, "torch": torch,
            "onnxruntime": _version("onnxruntime")}


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(prog="export job", description=__doc__.split("\n\n")[0])
    parse.add_argument("--model", required=True, help="the model version's folder (signature.json, model.pt2)")
    parse.add_argument("--onnx", required=True, help="the folder to write model.onnx and its signature into")
    parse.add_argument("--report", required=True, help=f"the folder to write {REPORT_FILE} into")
    parse.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    parse.add_argument("--atol", type=float, default=None)
    parse.add_argument("--rtol", type=float, default=None)
    parse.add_argument("--inputs-file", default=None, help="the gate's inputs, relative to the model folder")
    parse.add_argument("--data-dir", default=None, help="an image classifier's ImageFolder data (val/ is read)")
    parse.add_argument("--trainer-torch", default=None, help="the torch the trials trained with")
    parse.add_argument("--key", default="", help="what the task asked, as a digest, echoed into the verdict")
    return parse


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    outcome = {"format": FORMAT, "key": args.key, **verdict(args)}
    report = Path(args.report)
    report.mkdir(parents=True, exist_ok=True)
    (report / REPORT_FILE).write_text(json.dumps(outcome, indent=1))
    print(f"export: {'passed' if outcome['passed'] else 'refused'}: "
          f"{outcome.get('report') or outcome.get('message')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
