"""Endpoint throughput and latency: the local endpoint against Azure's own scoring server, a plain FastAPI app,
and the same model in-process.

    .venv/bin/python bench/endpoint.py [--duration 10] [--clients 1 16 64] [--workers 2]

Every server runs the same ONNX model with 2 workers on 127.0.0.1 and takes the same single-image request
(``{"data": [one 1x8x8 image]}``) from wrk (another process, keep-alive connections, 0 errors required):

- **mlrunway**: the local online endpoint (key auth, traffic routing, limits) running training/score.py;
- **azureml-inference-server-http**: Azure ML's scoring server (``azmlinfsrv``) running the same score.py, in
  a virtualenv of its own (``--peer-venv``, created on first use: it pins an OpenTelemetry that conflicts with
  azure-ai-ml, so it never enters the project's environment);
- **fastapi**: bench/peers/fastapi_app.py, what a user would write over the same model;
- **bare scoring**: bench/peers/bare_app.py's ``scoring``, score.py's ``run()`` called inline by a bare ASGI app
  under uvicorn: the same scoring work with nothing around it (no auth, routing, limits or thread);
- **HTTP ceiling**: bare_app.py's ``ceiling``, which reads the body and answers a constant;
- **mlrunway, <protocol>**: the endpoint on another of uvicorn's HTTP protocols (``--protocols httptools h11``:
  uvicorn's own, without the limits), to measure what the limits cost;
- **in-process**: ONNX Runtime called directly from as many threads as there are clients (the limit).

Prints a table and records bench/results/endpoint.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from _common import REPO, build_model, record, table, validation_images

from mlrunway.local.serving.server import HTTP_PROTOCOL_ENV

PEER_PACKAGES = ["azureml-inference-server-http==1.5.1", "onnxruntime==1.31.1", "numpy<3", "pillow"]


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
            "p50_ms": _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),
            "p99_ms": _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),
            "errors": errors}


def peer_venv(folder: Path) -> Path:
    """Azure's scoring server in its own virtualenv (created once); return its ``azmlinfsrv``."""
    server = folder / "bin" / "azmlinfsrv"
    if not server.exists():
        print(f"creating {folder} with {' '.join(PEER_PACKAGES)} (once)")
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        subprocess.run([folder / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *PEER_PACKAGES], check=True)
    return server


def free_port() -> int:
    from mlrunway.local.processes import free_port as pick

    return pick()


def wait_answers(url: str, body: bytes, key: str, timeout_s: float = 120.0) -> None:
    """Until a scoring request succeeds (the server started and its init() ran)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                                      "Authorization": f"Bearer {key}"})
            with urllib.request.urlopen(request, timeout=5) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.HTTPError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not answer within {timeout_s:g} s")
        time.sleep(0.5)


def start_azureml(server: Path, onnx_dir: Path, workers: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "AZUREML_MODEL_DIR": str(onnx_dir), "WORKER_COUNT": str(workers)}
    proc = subprocess.Popen([server, "--entry_script", str(REPO / "training" / "score.py"), "--model_dir", str(onnx_dir),
                             "--port", str(port), "--health_port", str(free_port()), "--worker_count", str(workers)],
                            env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}/score"


def start_peer(factory: str, onnx_dir: Path, workers: int, log: Path) -> tuple[subprocess.Popen, str]:
    """A peer app of bench/peers under uvicorn (httptools, as the endpoint)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", factory, "--app-dir",
                             str(REPO / "bench" / "peers"), "--workers", str(workers), "--port", str(port),
                             "--http", "httptools", "--log-level", "warning", "--no-access-log"],
                            env={**os.environ, "MODEL_DIR": str(onnx_dir)},
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}/score"


def start_endpoint(endpoints: Any, name: str, model: str, workers: int, protocol: str | None) -> tuple[str, str]:
    """A local endpoint serving ``model`` as blue at 100%, on uvicorn's ``protocol`` (None: ours, guarded)."""
    from mlrunway.backend.types import DeploymentSettings, EndpointSettings

    previous = os.environ.get(HTTP_PROTOCOL_ENV)
    os.environ[HTTP_PROTOCOL_ENV] = protocol or ""
    try:
        endpoints.create_or_update(name, EndpointSettings(workers=workers))
    finally:
        os.environ.pop(HTTP_PROTOCOL_ENV) if previous is None else os.environ.update({HTTP_PROTOCOL_ENV: previous})
    endpoints.create_or_update_deployment(name, "blue", DeploymentSettings(model=model, code_dir=str(REPO / "training")))
    endpoints.set_traffic(name, {"blue": 100})
    state = endpoints.state(name)
    return state.scoring_uri, state.keys["primary"]


def stop(proc: subprocess.Popen) -> None:
    from mlrunway.local.processes import terminate_group

    terminate_group(proc.pid, [proc], 10)


COLUMNS = [("server", "server"), ("clients", "clients"), ("rps", "req/s"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"),
           ("errors", "errors")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--peer-venv", type=Path, default=REPO / ".bench" / "azureml-venv")
    parser.add_argument("--servers", nargs="+", default=["mlrunway", "bare", "ceiling", "azureml", "fastapi", "in-process"])
    parser.add_argument("--protocols", nargs="*", default=["httptools", "h11"],
                        help="uvicorn's own HTTP protocols to run the endpoint on as well, without its limits")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed as the load generator: apt-get install wrk")
    from mlrunway.local.registry import LocalModels
    from mlrunway.local.serving.endpoints import LocalEndpoints
    from mlrunway.local.workspace import Workspace

    azureml = peer_venv(args.peer_venv) if "azureml" in args.servers else None
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as running:
        tmp = Path(scratch)
        _, onnx_dir, data = build_model(tmp)
        image = validation_images(onnx_dir, data, limit=1)
        body = tmp / "request.json"
        body.write_text(json.dumps({"data": image.tolist()}))
        # All servers up at once (an idle one costs nothing), then each client count on each in turn: the
        # machine's drift over the run then falls on every server alike.
        servers: dict[str, tuple[str, str]] = {}
        if "mlrunway" in args.servers:
            workspace = Workspace.at(tmp / "ws")
            endpoints = LocalEndpoints(workspace)
            model = LocalModels(workspace).register("digits", onnx_dir)
            for protocol in [None, *args.protocols]:
                name = f"bench-{protocol or 'ep'}"
                running.callback(endpoints.delete, name)
                label = "mlrunway" if protocol is None else f"mlrunway, uvicorn {protocol} (no limits)"
                servers[label] = start_endpoint(endpoints, name, f"digits:{model.version}", args.workers, protocol)
        peers = (("bare scoring", "bare", lambda: start_peer("bare_app:scoring", onnx_dir, args.workers, tmp / "bare.log")),
                 ("HTTP ceiling", "ceiling", lambda: start_peer("bare_app:ceiling", onnx_dir, args.workers,
                                                                tmp / "ceiling.log")),
                 ("azureml-inference-server-http", "azureml",
                  lambda: start_azureml(azureml, onnx_dir, args.workers, tmp / "azureml.log")),
                 ("fastapi", "fastapi",
                  lambda: start_peer("fastapi_app:create_app", onnx_dir, args.workers, tmp / "fastapi.log")))
        for label, key, start in peers:
            if key in args.servers:
                proc, url = start()
                running.callback(stop, proc)
                servers[label] = (url, "unused")
        for url, key in servers.values():
            wait_answers(url, body.read_bytes(), key)
        for clients in args.clients:
            for label, (url, key) in servers.items():
                under_wrk(url, key, body, clients, 2, tmp)  # warm-up
                rows.append({"server": label, "clients": clients, **under_wrk(url, key, body, clients, args.duration, tmp)})
                print(table(rows[-1:], COLUMNS), flush=True)
            if "in-process" in args.servers:
                rows.append({"server": "in-process ORT", "clients": clients,
                             **in_process(onnx_dir, image, clients, args.duration)})
    print(table(rows, COLUMNS))
    record("endpoint", args, rows, ("onnxruntime", "uvicorn", "httptools", "fastapi"),
           load_generator="wrk 4.1 (separate process, loopback, keep-alive, 2 threads)")
    failed = {f"{r['server']} c={r['clients']}": r["errors"] for r in rows if r["errors"]}
    if failed:
        raise SystemExit(f"requests failed under load: {failed}")


if __name__ == "__main__":
    main()
