"""Endpoint throughput and latency: the local endpoint under wrk against the same model in-process.

    .venv/bin/python bench/endpoint.py [--duration 10] [--clients 1 16] [--workers 2]

Single-image requests ({"data": [one 1x8x8 image]}) over loopback from wrk (another process, keep-alive
connections, 0 errors required); the in-process limit calls the ONNX Runtime session directly from as many
threads as there are clients. Prints a table and records bench/results/endpoint.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_model(tmp: Path) -> tuple[Path, Path]:
    """Train train.py for 3 epochs in-process and export it; return (onnx model folder, data folder)."""
    import importlib.util

    from mlrunway.data import write_digits
    from mlrunway.onnx_export import export_onnx

    data = write_digits(tmp / "digits")
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
    spec = importlib.util.spec_from_file_location("train", REPO / "training" / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    train.main(["--data-dir", str(data), "--num-epochs", "3", "--output-dir", str(tmp / "trained")])
    import mlflow

    mlflow.end_run()  # close train.py's run now, not at exit when its store is gone
    export_onnx(tmp / "trained" / "model", tmp / "onnx", data_dir=data)
    return tmp / "onnx", data


def one_image(onnx_dir: Path, data: Path):
    from mlrunway.data.images import load_labeled

    signature = json.loads((onnx_dir / "signature.json").read_text())
    inputs, _ = load_labeled(data / "val", signature["classes"], signature["preprocessing"], limit=1)
    return inputs


def in_process(onnx_dir: Path, image, clients: int, duration: float) -> dict:
    """The limit: session.run on one preprocessed image from ``clients`` threads (ORT releases the GIL)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.perf_counter() + duration

    def loop(out: list[float]) -> None:
        while (start := time.perf_counter()) < stop:
            session.run(None, {"input": image})
            out.append(time.perf_counter() - start)

    threads = [threading.Thread(target=loop, args=(lat,)) for lat in latencies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = sorted(x for lat in latencies for x in lat)
    return {"rps": round(len(flat) / duration), "p50_ms": round(flat[len(flat) // 2] * 1000, 3),
            "p99_ms": round(flat[int(len(flat) * 0.99)] * 1000, 3), "errors": 0}


WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = io.open("{body}"):read("*a")
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
"""


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
    return round(float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit], 3)


def under_wrk(url: str, key: str, body: Path, clients: int, duration: float, tmp: Path) -> dict:
    script = tmp / "post.lua"
    script.write_text(WRK_SCRIPT.format(body=body, key=key))
    out = subprocess.run(["wrk", f"-t{min(clients, 2)}", f"-c{clients}", f"-d{duration:g}s", "--latency", "-s",
                          str(script), url], capture_output=True, text=True, check=True).stdout
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non_2xx.group(1)) if non_2xx else 0) + (sum(map(int, socket.groups())) if socket else 0)
    return {"rps": round(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))),
            "p50_ms": _ms(re.search(r"50%\s+(\S+)", out).group(1)), "p99_ms": _ms(re.search(r"99%\s+(\S+)", out).group(1)),
            "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed as the load generator: apt-get install wrk")
    from mlrunway.local.workspace import Workspace
    from mlrunway.serving.endpoints import LocalEndpoints

    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        onnx_dir, data = build_model(tmp)
        image = one_image(onnx_dir, data)
        body = tmp / "request.json"
        body.write_text(json.dumps({"data": image.tolist()}))
        endpoints = LocalEndpoints(Workspace.at(tmp / "ws"))
        state = endpoints.create_or_update("bench-ep", workers=args.workers)
        try:
            endpoints.create_or_update_deployment("bench-ep", "blue", model_dir=onnx_dir, code_dir=REPO / "training")
            endpoints.set_traffic("bench-ep", {"blue": 100})
            endpoints.invoke("bench-ep", request_file=body)  # warm every code path once
            rows = {}
            for clients in args.clients:
                under_wrk(state.scoring_uri, state.keys["primary"], body, clients, 2, tmp)  # warm-up
                rows[f"endpoint c={clients}"] = under_wrk(state.scoring_uri, state.keys["primary"], body, clients,
                                                          args.duration, tmp)
                rows[f"in-process c={clients}"] = in_process(onnx_dir, image, clients, args.duration)
        finally:
            endpoints.delete("bench-ep")
    print(f"{'':<18} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for label, r in rows.items():
        print(f"{label:<18} {r['rps']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['errors']:>7}")
    record = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "cores": os.cpu_count(),
              "machine": platform.machine(), "python": platform.python_version(),
              "versions": {p: version(p) for p in ("onnxruntime", "uvicorn", "starlette")},
              "args": vars(args), "load_generator": "wrk 4.1 (separate process, loopback, keep-alive)", "results": rows}
    out = REPO / "bench" / "results" / "endpoint.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"recorded in {out.relative_to(REPO)}")
    failed = {label: r["errors"] for label, r in rows.items() if r["errors"]}
    if failed:
        raise SystemExit(f"requests failed under load: {failed}")


if __name__ == "__main__":
    main()
