"""An A/B of two checkouts' endpoint servers, interleaved: the same ONNX model and training/score.py, 2 workers,
16 keep-alive wrk connections, with no data collector and with score.py's ``model_inputs``/``model_outputs``.

    .venv/bin/python bench/socket_ab.py A_CHECKOUT B_CHECKOUT [--rounds 6] [--duration 10]

Each checkout's server runs from its own tree (PYTHONPATH), in a workspace of its own; each round measures the four
in rotated order, 3 s apart. Written for issue 35, to compare one shared listening socket (925fb9f) with a socket
per worker (69bb730) on the same machine at the same time; its one run is in bench/results/socket_ab.txt. Not a
harness benchmark: it prints every run and the medians, and records nothing itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import build_model, validation_images
from endpoint import under_wrk, wait_answers

MAKE = """
import json, sys
from pathlib import Path
from mlrunway.backend.capture import DataCollector
from mlrunway.backend.types import DeploymentSettings, EndpointSettings
from mlrunway.local.registry import LocalModels
from mlrunway.local.serving.endpoints import LocalEndpoints
from mlrunway.local.workspace import Workspace
root, onnx, code, name, collect, delete = sys.argv[1:7]
endpoints = LocalEndpoints(Workspace.at(root))
if delete == "1":
    endpoints.delete(name)
    sys.exit()
model = LocalModels(endpoints.workspace).register("digits", onnx)
endpoints.create_or_update(name, EndpointSettings(workers=2))
collector = {"collections": {"model_inputs": {"enabled": "true"}, "model_outputs": {"enabled": "true"}}}
endpoints.create_or_update_deployment(name, "blue", DeploymentSettings(
    model=f"digits:{model.version}", code_dir=code, data_collector=DataCollector.parse(collector if collect == "1" else None)))
endpoints.set_traffic(name, {"blue": 100})
state = endpoints.state(name)
print(json.dumps({"uri": state.scoring_uri, "key": state.keys["primary"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs=2, help="two checkouts of mlrunway")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        _, onnx, data = build_model(tmp)
        body = tmp / "request.json"
        body.write_text(json.dumps({"data": validation_images(onnx, data, limit=1).tolist()}))
        arms: dict[tuple[str, str], tuple[str, str, dict[str, str]]] = {}
        try:
            for tree in args.trees:
                label = subprocess.run(["git", "-C", tree, "rev-parse", "--short=7", "HEAD"], capture_output=True,
                                       text=True, check=True).stdout.strip()
                for collect in ("0", "1"):
                    name, ws = f"ab{len(arms)}", str(tmp / f"ws{len(arms)}")
                    out = subprocess.run([sys.executable, "-c", MAKE, ws, str(onnx), f"{tree}/training", name, collect,
                                          "0"], env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True,
                                         check=True).stdout
                    info = json.loads(out.strip().splitlines()[-1])
                    wait_answers(info["uri"], body.read_bytes(), info["key"])
                    arms[(label, "custom" if collect == "1" else "off")] = (tree, ws, info)
            runs: dict[tuple[str, str], list[int]] = {arm: [] for arm in arms}
            order = list(arms)
            for n in range(args.rounds):
                for arm in order[n % len(order):] + order[:n % len(order)]:
                    result = under_wrk(arms[arm][2]["uri"], arms[arm][2]["key"], body, 16, args.duration, tmp)
                    runs[arm].append(result["rps"])
                    print(n, arm, result, flush=True)
                    time.sleep(3)
            for arm, values in runs.items():
                print(f"{arm[0]} {arm[1]}: median {statistics.median(values):.0f} req/s ({min(values)} to "
                      f"{max(values)}); runs {values}")
        finally:
            for index, (tree, ws, _) in enumerate(arms.values()):
                subprocess.run([sys.executable, "-c", MAKE, ws, "", "", f"ab{index}", "0", "1"],
                               env={**os.environ, "PYTHONPATH": tree}, check=False)


if __name__ == "__main__":
    main()
