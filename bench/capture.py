"""What a deployment's data collector costs: the local endpoint's throughput and latency with capture off and on.

    .venv/bin/python bench/capture.py [--duration 5] [--clients 16] [--repeats 5]

Three local endpoints serve the same ONNX model with training/score.py (2 workers each, the same single-image
request from wrk as bench/endpoint.py, 16 keep-alive connections):

- **off**: no data collector (bench/endpoint.py's "mlrunway");
- **custom**: ``model_inputs`` and ``model_outputs`` at 100% sampling: score.py's rows through
  azureml-ai-monitoring's ``Collector`` (summary statistics in, label and probability out), written by the workers;
- **payload**: ``request`` and ``response`` at 100%: the HTTP bodies, kept by the server.

Each repeat measures the three in rotated order, ``--settle`` seconds apart (a capturing endpoint's writers finish
what they queued rather than take CPU from the next cell); the **cost** is ``1 - req/s with capture / req/s without`` within
a repeat (target: at most 5% for custom logging at 16 clients, issue 35). After the last repeat, the rows captured
are counted against the requests the endpoint answered (its own metrics): capture that kept up loses none.
Records bench/results/capture.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, Bench, Target, build_model, harness_args, interleaved, table, validation_images
from endpoint import COLUMNS, under_wrk, wait_answers

SERVERS = {
    "off": None,
    "custom": {"collections": {"model_inputs": {"enabled": "true"}, "model_outputs": {"enabled": "true"}}},
    "payload": {"collections": {"request": {"enabled": "true"}, "response": {"enabled": "true"}}},
}
LABELS = {"off": "no data collector", "custom": "model_inputs + model_outputs (score.py's Collector), 100%",
          "payload": "request + response (the server), 100%"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per cell (wrk takes whole seconds)")
    parser.add_argument("--warm-up", type=int, default=2)
    parser.add_argument("--clients", type=int, nargs="+", default=[16])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds between cells: the last endpoint's writers finish what they queued")
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed as the load generator: apt-get install wrk")
    bench = Bench("capture", args)
    from mlrunway.backend.capture import DataCollector
    from mlrunway.backend.types import DeploymentSettings, EndpointSettings
    from mlrunway.local.registry import LocalModels
    from mlrunway.local.serving.endpoints import LocalEndpoints
    from mlrunway.local.workspace import Workspace

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as running:
        tmp = Path(scratch)
        _, onnx_dir, data = build_model(tmp)
        body = tmp / "request.json"
        body.write_text(json.dumps({"data": validation_images(onnx_dir, data, limit=1).tolist()}))
        workspace = Workspace.at(tmp / "ws")
        endpoints = LocalEndpoints(workspace)
        model = LocalModels(workspace).register("digits", onnx_dir)
        servers: dict[str, tuple[str, str]] = {}
        for server, collector in SERVERS.items():
            name = f"bench-{server}"
            running.callback(endpoints.delete, name)
            endpoints.create_or_update(name, EndpointSettings(workers=args.workers))
            endpoints.create_or_update_deployment(name, "blue", DeploymentSettings(
                model=f"digits:{model.version}", code_dir=str(REPO / "training"),
                data_collector=DataCollector.parse(collector)))
            endpoints.set_traffic(name, {"blue": 100})
            state = endpoints.state(name)
            servers[server] = (state.scoring_uri, state.keys["primary"])
            wait_answers(state.scoring_uri, body.read_bytes(), state.keys["primary"])
        started = time.time()  # the readiness checks' requests, just before, are counted on both sides
        for clients in args.clients:
            for url, key in servers.values():
                under_wrk(url, key, body, clients, args.warm_up, tmp)
            for repeat, order in interleaved(list(servers), args.repeats):
                measured: dict[str, dict[str, Any]] = {}
                for server in order:
                    time.sleep(args.settle)
                    cell = measured[server] = under_wrk(*servers[server], body, clients, args.duration, tmp)
                    if cell["errors"]:
                        raise SystemExit(f"{server}: {cell['errors']} failed requests; not recorded")
                    rows.append({"repeat": repeat, "server": server, "clients": clients, **cell})
                    print(table(rows[-1:], COLUMNS), flush=True)
                    bench.add(f"{server} req/s at {clients}", cell["rps"], "req/s")
                    bench.add(f"{server} p99 ms at {clients}", cell["p99_ms"], "ms")
                for server in ("custom", "payload"):
                    bench.add(f"{server} capture's cost in req/s at {clients}",
                              1 - measured[server]["rps"] / measured["off"]["rps"], "fraction")
        time.sleep(2.0)  # score.py hands rows over once a second; the workers write every quarter second
        now = time.time()
        kept = {}
        for server, collection in (("custom", "model_outputs"), ("payload", "response")):
            served = endpoints.deployment_metrics(f"bench-{server}", "blue", started - 60, now).requests
            rows_kept = sum(len(r["data"]) if collection == "model_outputs" else 1
                            for r in endpoints.captured(f"bench-{server}", "blue", collection, started - 60, now + 60))
            kept[server] = {"requests": served, "captured": rows_kept}
            bench.add(f"{server}: captured / answered", rows_kept / served if served else 0.0, "fraction")
        print(json.dumps(kept))
    targets = [Target(f"custom capture's cost in req/s at {c}", "<=", 0.05,
                      f"model_inputs + model_outputs at 100% cost at most 5% of req/s at {c} clients")
               for c in args.clients if c == 16]
    bench.record(rows, ("onnxruntime", "uvicorn", "pandas", "azureml-ai-monitoring"), targets, labels=LABELS,
                 load_generator="wrk 4.1 (separate process, loopback, keep-alive, 2 threads)", kept=kept)


if __name__ == "__main__":
    main()
