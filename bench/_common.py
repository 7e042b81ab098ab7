"""What the benchmarks share: the model they measure, and how a result is printed and recorded.

Each script records ``bench/results/<name>.json`` with the date, the machine's cores, the versions that
matter and its arguments, so a figure in the README can be traced to the run that produced it.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
if str(REPO) not in sys.path:  # the example's specs (training/tutorial.py) for the scripts run as bench/<name>.py
    sys.path.insert(0, str(REPO))


def build_model(tmp: Path, epochs: int = 3) -> tuple[Path, Path, Path]:
    """Train training/train.py in-process and export it; return (torch model, ONNX model, data) folders."""
    import importlib.util

    from mlrunway.data import write_digits
    from mlrunway.onnx_export import export_onnx

    data = write_digits(tmp / "digits")
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
    spec = importlib.util.spec_from_file_location("train", REPO / "training" / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    train.main(["--data-dir", str(data), "--num-epochs", str(epochs), "--output-dir", str(tmp / "trained")])
    import mlflow

    mlflow.end_run()  # close train.py's run now, not at exit when its store is gone
    export_onnx(tmp / "trained" / "model", tmp / "onnx", data_dir=data)
    return tmp / "trained" / "model", tmp / "onnx", data


def validation_images(model_dir: Path, data: Path, limit: int | None = None) -> Any:
    """The validation split, preprocessed as the model's signature says: (N, 1, 8, 8) float32."""
    from mlrunway.data.images import load_labeled

    signature = json.loads((model_dir / "signature.json").read_text())
    inputs, _ = load_labeled(data / "val", signature["classes"], signature["preprocessing"], limit=limit)
    return inputs


def versions(*packages: str) -> dict[str, str]:
    found = {}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def record(name: str, args: Any, results: Any, packages: tuple[str, ...], **extra: Any) -> Path:
    """Write ``bench/results/<name>.json``; return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps({
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "cores": os.cpu_count(),
        "machine": platform.machine(), "python": platform.python_version(), "versions": versions(*packages),
        "args": vars(args), **extra, "results": results,
    }, indent=1, default=str) + "\n")
    print(f"recorded in {out.relative_to(REPO)}")
    return out


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """A plain aligned table: ``columns`` are (key, header) pairs."""
    cells = [[header for _, header in columns]] + [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
             for line in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)
