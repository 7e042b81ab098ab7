"""A monitor's reference: what a deployment's own score.py collects when it is given the training data.

    python -m mlrunway.monitoring.reference --code training --model <model folder> --requests requests.jsonl --out <dir>

The script is loaded as a deployment would be (``init()`` with ``AZUREML_MODEL_DIR``), with ``model_inputs`` and
``model_outputs`` enabled, in this process; each request of the file (one JSON body per line, or
``{"request": <body>}``) goes to its ``run()``; what its ``Collector`` objects collected is written as rows to
``<dir>/model_inputs.jsonl`` and ``<dir>/model_outputs.jsonl``. The reference's rows are then made by the same code
as production's, so the drift compares like with like, whatever the script computes. It runs on any backend's
machine that has the deployment's environment (``python -m mlrunway.local.reference`` is its old name, kept).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.capture import rows_of

COLLECTIONS = ("model_inputs", "model_outputs")
SETTLE_S = 2.5  # rows stop arriving for this long: the script's collectors have handed everything over
MAX_WAIT_S = 120.0


def build(code_dir: str | Path, scoring_script: str, model_dir: str | Path, requests: list[Any], out: str | Path,
          model: str = "") -> dict[str, int]:
    """Replay ``requests`` through the script; write the rows of each collection under ``out``; return their counts."""
    from mlrunway.serving import capture
    from mlrunway.serving.runtime import load_deployment
    from mlrunway.serving.state import DeploymentState

    with tempfile.TemporaryDirectory() as scratch:
        endpoint_dir = Path(scratch) / "endpoints" / "reference"
        endpoint_dir.mkdir(parents=True)
        state = DeploymentState(name="reference", version=1, model_dir=str(Path(model_dir).resolve()),
                                code_dir=str(Path(code_dir).resolve()), scoring_script=scoring_script, model=model,
                                data_collector={"collections": {c: {"enabled": "true"} for c in COLLECTIONS}})
        loaded = load_deployment(endpoint_dir, state)
        for body in requests:
            loaded.module.run(json.dumps(body))
        root = capture.capture_root(endpoint_dir)
        counts: dict[str, int] = {}
        last_change, deadline = time.monotonic(), time.monotonic() + MAX_WAIT_S
        now: dict[str, list[dict[str, Any]]] = {}
        while time.monotonic() < deadline:
            capture.WRITER.flush()
            now = {c: rows_of(capture.read(root, "reference", c, 0, time.time() + 3600)) for c in COLLECTIONS}
            sizes = {c: len(rows) for c, rows in now.items()}
            if sizes != counts:
                counts, last_change = sizes, time.monotonic()
            elif time.monotonic() - last_change >= SETTLE_S:
                break
            time.sleep(0.25)
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        for collection, rows in now.items():
            if not rows:
                raise check.fail("reference", f"{scoring_script} collected nothing into {collection}",
                                 f"have its run() call Collector(name=\"{collection}\").collect(<DataFrame>)")
            partial = folder / f".{collection}.jsonl.partial"
            partial.write_text("".join(json.dumps(row) + "\n" for row in rows))
            partial.replace(folder / f"{collection}.jsonl")
        return counts


def read_requests(path: str | Path) -> list[Any]:
    requests = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise check.fail(f"requests line {number}", f"is not JSON ({exc})", "write one body per line") from None
            requests.append(item["request"] if isinstance(item, dict) and set(item) >= {"request"} else item)
    return requests


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", required=True, help="the folder of the scoring script")
    parser.add_argument("--scoring-script", default="score.py")
    parser.add_argument("--model", required=True, help="the model's folder (AZUREML_MODEL_DIR)")
    parser.add_argument("--model-ref", default="", help="the model as name:version, recorded with the rows")
    parser.add_argument("--requests", required=True, help="JSON lines: a request body (or {\"request\": ...}) each")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    counts = build(args.code, args.scoring_script, args.model, read_requests(args.requests), args.out, args.model_ref)
    print(json.dumps(counts))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
