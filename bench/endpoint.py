"""Endpoint throughput and latency: the local endpoint against the same scoring work with nothing around it, Azure's
own scoring server, a plain FastAPI app, and the same model in-process.

    .venv/bin/python bench/endpoint.py [--duration 5] [--clients 1 16 64] [--repeats 5] [--servers ...]

About 13 minutes with the defaults (9 servers x 3 client counts x 5 repeats x 5 s, plus warm-ups). Every server
runs the same ONNX model with 2 workers on 127.0.0.1 and takes the same single-image request
(``{"data": [one 1x8x8 image]}``) from wrk (another process, keep-alive connections):

- **mlrunway**: the local online endpoint (key auth, traffic routing, limits, metrics) running training/score.py;
- **httptools**, **h11**: the endpoint's same app and folder on uvicorn's own HTTP protocols, without the limits
  (bench/peers/unguarded.py), to price the limits;
- **bare**: bench/peers/bare_app.py's ``scoring``, score.py's ``run()`` called inline by a bare ASGI app under
  uvicorn (httptools): the same scoring work with nothing around it (no auth, routing, limits or thread);
- **ceiling**: bare_app.py's ``ceiling``, which reads the body and answers a constant: what HTTP costs here;
- **azureml**: Azure ML's scoring server (``azmlinfsrv``) running the same score.py **as shipped**: gunicorn's
  sync workers (no keep-alive: a connection per request), its access log on stdout. In a virtualenv of its own
  (``--peer-venv``, created on first use): it pins an OpenTelemetry that conflicts with azure-ai-ml;
- **azureml-tuned**: the same server **tuned as its documentation allows**: ``WORKER_PRELOAD=true`` (its own
  setting) and gunicorn's own ``GUNICORN_CMD_ARGS`` (the server defers to gunicorn's configuration for what its
  command line leaves out): gthread workers with 4 threads each, which keep connections alive;
- **fastapi**: bench/peers/fastapi_app.py, what a user would write over the same model;
- **in-process**: ONNX Runtime called directly from as many threads as there are clients (the limit);
- **ray** (only when named, and then recorded as ``endpoint_ray``): the same endpoint on the Ray backend, its server
  a Ray job on the worker node of tests/ray_cluster.py's cluster (two nodes and an MLflow server on this machine),
  scored through its node's address like any client of the cluster.

Every server is started at once and warmed up; then, at each client count, every server is measured once per
repeat, the servers' order rotated each repeat, so a drift of the host falls on all of them alike. Ratios (the
endpoint over the bare app, over Azure's server; the limits' cost) are taken within each repeat. Any failed
request (non-2xx, socket error) refuses the run: these are figures of servers that answer every request. Prints
the figures and records bench/results/endpoint.json.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import REPO, Bench, Target, build_model, harness_args, interleaved, table, validation_images

PEER_PACKAGES = ["azureml-inference-server-http==1.5.1", "onnxruntime==1.31.1", "numpy<3", "pillow"]
AZUREML_TUNED = {"WORKER_PRELOAD": "true", "GUNICORN_CMD_ARGS": "--worker-class gthread --threads 4 --keep-alive 5"}
LABELS = {
    "mlrunway": "mlrunway endpoint",
    "httptools": "the endpoint on uvicorn's httptools, no limits",
    "h11": "the endpoint on uvicorn's h11, no limits",
    "bare": "bare scoring (the same run(), inline)",
    "ceiling": "HTTP ceiling",
    "azureml": "azureml-inference-server-http 1.5.1, as shipped",
    "azureml-tuned": "azureml-inference-server-http 1.5.1, tuned",
    "fastapi": "FastAPI + uvicorn",
    "in-process": "in-process ONNX Runtime (the limit)",
    "ray": "the endpoint served by a Ray job (the tests' 2-node cluster, this machine)",
}
# The default run: every server but Ray's; "--servers mlrunway ray bare" records bench/results/endpoint_ray.json.
DEFAULT_SERVERS = [server for server in LABELS if server != "ray"]


def in_process(onnx_dir: Path, image: Any, clients: int, duration: float) -> dict[str, Any]:
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
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return round(float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit], 3)


def under_wrk(url: str, key: str, body: Path, clients: int, duration: int, tmp: Path) -> dict[str, Any]:
    script = tmp / "post.lua"
    script.write_text(WRK_SCRIPT.format(body=body, key=key))
    out = subprocess.run(["wrk", f"-t{min(clients, 2)}", f"-c{clients}", f"-d{duration}s", "--latency", "-s",
                          str(script), url], capture_output=True, text=True, check=True).stdout
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non_2xx.group(1)) if non_2xx else 0) + (sum(map(int, socket.groups())) if socket else 0)
    return {"rps": round(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))),  # type: ignore[union-attr]
            "p50_ms": _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),  # type: ignore[union-attr]
            "p99_ms": _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),  # type: ignore[union-attr]
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


def start(command: list[str | Path], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def start_azureml(server: Path, onnx_dir: Path, workers: int, log: Path,
                  tuned: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = start([server, "--entry_script", REPO / "training" / "score.py", "--model_dir", onnx_dir, "--port", str(port),
                  "--health_port", str(free_port()), "--worker_count", str(workers)], log,
                 {"AZUREML_MODEL_DIR": str(onnx_dir), "WORKER_COUNT": str(workers), **tuned})
    return proc, f"http://127.0.0.1:{port}/score"


def start_peer(factory: str, onnx_dir: Path, workers: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A peer app of bench/peers under uvicorn (httptools, as the endpoint)."""
    port = free_port()
    proc = start([sys.executable, "-m", "uvicorn", "--factory", factory, "--app-dir", REPO / "bench" / "peers",
                  "--workers", str(workers), "--port", str(port), "--http", "httptools", "--log-level", "warning",
                  "--no-access-log"], log, {"MODEL_DIR": str(onnx_dir)})
    return proc, f"http://127.0.0.1:{port}/score"


def start_unguarded(endpoint_dir: Path, protocol: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = start([sys.executable, REPO / "bench" / "peers" / "unguarded.py", endpoint_dir, protocol, str(port)], log)
    return proc, f"http://127.0.0.1:{port}/score"


def ray_endpoint(running: contextlib.ExitStack, tmp: Path, onnx_dir: Path, workers: int) -> tuple[str, str]:
    """The same endpoint on the Ray backend, on tests/ray_cluster.py's cluster (stopped with the run): its scoring
    URI and key."""
    sys.path.insert(0, str(REPO))
    from mlrunway.backend.types import DeploymentSettings, EndpointSettings
    from mlrunway.ray.backend import RayBackend
    from tests.ray_cluster import ray_cluster

    cluster = running.enter_context(ray_cluster(tmp / "cluster", worker_cpus=2))
    backend = RayBackend.from_connection({
        "address": cluster.address, "storage": str(cluster.storage), "tracking_uri": cluster.tracking_uri,
        "namespace": "bench", "profiles": {"cpu": {"num_cpus": 1}}}, cluster.token)
    running.callback(backend.endpoints.delete, "bench-ray")
    model = backend.models.register("digits", onnx_dir)
    backend.endpoints.create_or_update("bench-ray", EndpointSettings(workers=workers))
    backend.endpoints.create_or_update_deployment("bench-ray", "blue", DeploymentSettings(
        model=f"digits:{model.version}", code_dir=str(REPO / "training")), timeout_s=300)
    backend.endpoints.set_traffic("bench-ray", {"blue": 100})
    return backend.endpoints.get("bench-ray").scoring_uri, backend.endpoints.get_keys("bench-ray")["primary"]


def stop(proc: subprocess.Popen[bytes]) -> None:
    from mlrunway.local.processes import terminate_group

    terminate_group(proc.pid, [proc], 10)


def ratios(bench: Bench, measured: dict[str, dict[str, Any]], clients: int) -> None:
    """The ratios of one repeat at one client count, each from the same repeat's cells."""
    rps = {server: m["rps"] for server, m in measured.items()}
    if "mlrunway" not in rps:
        return
    if "bare" in rps:
        bench.add(f"mlrunway / bare scoring, req/s at {clients}", rps["mlrunway"] / rps["bare"], "fraction")
        bench.add(f"mlrunway / bare scoring, p99 at {clients}",
                  measured["mlrunway"]["p99_ms"] / measured["bare"]["p99_ms"], "ratio")
    if "ray" in rps:
        bench.add(f"ray / mlrunway, req/s at {clients}", rps["ray"] / rps["mlrunway"], "fraction")
        bench.add(f"ray / mlrunway, p99 at {clients}", measured["ray"]["p99_ms"] / measured["mlrunway"]["p99_ms"],
                  "ratio")
    for peer in ("azureml", "azureml-tuned"):
        if peer in rps:
            bench.add(f"mlrunway / {peer}, req/s at {clients}", rps["mlrunway"] / rps[peer], "ratio")
    if "httptools" in rps:
        bench.add(f"the limits' cost in req/s at {clients}", 1 - rps["mlrunway"] / rps["httptools"], "fraction")
        bench.add(f"the limits' cost in p99 ms at {clients}",
                  measured["mlrunway"]["p99_ms"] - measured["httptools"]["p99_ms"], "ms")


def targets(args: argparse.Namespace) -> list[Target]:
    """Issue 31's: at least 85% of the bare app's req/s at 16 and 64 clients with a p99 at most 1.5x the bare app's
    (each ratio within a repeat), p99 under 20 ms at 16, at least 3x Azure's scoring server (as shipped, and tuned)
    at 16."""
    found = []
    servers, clients = set(args.servers), set(args.clients)
    for count in (16, 64):
        if {"mlrunway", "bare"} <= servers and count in clients:
            found.append(Target(f"mlrunway / bare scoring, req/s at {count}", ">=", 0.85,
                                f"at least 85% of the bare app's req/s at {count} clients"))
            found.append(Target(f"mlrunway / bare scoring, p99 at {count}", "<=", 1.5,
                                f"a p99 at most 1.5x the bare app's at {count} clients"))
    if {"mlrunway", "ray"} <= servers and 64 in clients:  # issue 81's
        found.append(Target("ray / mlrunway, req/s at 64", ">=", 0.5,
                            "the Ray endpoint at least 50% of the local endpoint's req/s at 64 clients"))
        found.append(Target("ray / mlrunway, p99 at 64", "<=", 2.0,
                            "the Ray endpoint's p99 at most 2x the local endpoint's at 64 clients"))
    if "mlrunway" in servers and 16 in clients:
        found.append(Target("mlrunway p99 ms at 16", "<=", 20.0, "p99 under 20 ms at 16 clients"))
        for peer in ("azureml", "azureml-tuned"):
            if peer in servers:
                found.append(Target(f"mlrunway / {peer}, req/s at 16", ">=", 3.0,
                                    f"at least 3x {LABELS[peer]} at 16 clients"))
    return found


COLUMNS = [("repeat", "repeat"), ("server", "server"), ("clients", "clients"), ("rps", "req/s"), ("p50_ms", "p50 ms"),
           ("p99_ms", "p99 ms"), ("errors", "errors")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per cell (wrk takes whole seconds)")
    parser.add_argument("--warm-up", type=int, default=2, help="seconds of load on each server before measuring")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--peer-venv", type=Path, default=REPO / ".bench" / "azureml-venv")
    parser.add_argument("--servers", nargs="+", default=DEFAULT_SERVERS, choices=list(LABELS))
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed as the load generator: apt-get install wrk")
    bench = Bench("endpoint_ray" if "ray" in args.servers else "endpoint", args)
    from mlrunway.backend.types import DeploymentSettings, EndpointSettings
    from mlrunway.local.registry import LocalModels
    from mlrunway.local.serving.endpoints import LocalEndpoints
    from mlrunway.local.workspace import Workspace

    azureml = args.peer_venv / "bin" / "azmlinfsrv"
    if {"azureml", "azureml-tuned"} & set(args.servers):
        peer_venv(args.peer_venv)
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as running:
        tmp = Path(scratch)
        _, onnx_dir, data = build_model(tmp)
        image = validation_images(onnx_dir, data, limit=1)
        body = tmp / "request.json"
        body.write_text(json.dumps({"data": image.tolist()}))
        servers: dict[str, tuple[str, str]] = {}  # server -> (url, key)
        workspace = Workspace.at(tmp / "ws")
        endpoint_dir = workspace.endpoints / "bench-ep"
        if {"mlrunway", "httptools", "h11"} & set(args.servers):
            endpoints = LocalEndpoints(workspace)
            model = LocalModels(workspace).register("digits", onnx_dir)
            running.callback(endpoints.delete, "bench-ep")
            endpoints.create_or_update("bench-ep", EndpointSettings(workers=args.workers))
            endpoints.create_or_update_deployment("bench-ep", "blue", DeploymentSettings(
                model=f"digits:{model.version}", code_dir=str(REPO / "training")))
            endpoints.set_traffic("bench-ep", {"blue": 100})
            state = endpoints.state("bench-ep")
            if "mlrunway" in args.servers:
                servers["mlrunway"] = (state.scoring_uri, state.keys["primary"])
        if "ray" in args.servers:
            servers["ray"] = ray_endpoint(running, tmp, onnx_dir, args.workers)
        starters: dict[str, Callable[[], tuple[subprocess.Popen[bytes], str]]] = {
            "httptools": lambda: start_unguarded(endpoint_dir, "httptools", tmp / "httptools.log"),
            "h11": lambda: start_unguarded(endpoint_dir, "h11", tmp / "h11.log"),
            "bare": lambda: start_peer("bare_app:scoring", onnx_dir, args.workers, tmp / "bare.log"),
            "ceiling": lambda: start_peer("bare_app:ceiling", onnx_dir, args.workers, tmp / "ceiling.log"),
            "azureml": lambda: start_azureml(azureml, onnx_dir, args.workers, tmp / "azureml.log", {}),
            "azureml-tuned": lambda: start_azureml(azureml, onnx_dir, args.workers, tmp / "azureml-tuned.log",
                                                   AZUREML_TUNED),
            "fastapi": lambda: start_peer("fastapi_app:create_app", onnx_dir, args.workers, tmp / "fastapi.log"),
        }
        for server, starter in starters.items():
            if server in args.servers:
                proc, url = starter()
                running.callback(stop, proc)
                servers[server] = (url, servers["mlrunway"][1] if server in ("httptools", "h11") else "unused")
        for url, key in servers.values():
            wait_answers(url, body.read_bytes(), key)
        measured_servers = [s for s in args.servers if s in servers or s == "in-process"]
        for clients in args.clients:
            for url, key in servers.values():
                under_wrk(url, key, body, clients, args.warm_up, tmp)
            for repeat, order in interleaved(measured_servers, args.repeats):
                measured: dict[str, dict[str, Any]] = {}
                for server in order:
                    if server == "in-process":
                        cell = in_process(onnx_dir, image, clients, args.duration)
                    else:
                        cell = under_wrk(*servers[server], body, clients, args.duration, tmp)
                    measured[server] = cell
                    rows.append({"repeat": repeat, "server": server, "clients": clients, **cell})
                    print(table(rows[-1:], COLUMNS), flush=True)
                    if cell["errors"]:
                        failed.append(f"{server} at {clients} clients, repeat {repeat}: {cell['errors']} errors")
                    bench.add(f"{server} req/s at {clients}", cell["rps"], "req/s")
                    bench.add(f"{server} p99 ms at {clients}", cell["p99_ms"], "ms")
                ratios(bench, measured, clients)
    if failed:
        raise SystemExit(f"requests failed under load, so this run is not recorded: {failed}")
    bench.record(rows, ("onnxruntime", "uvicorn", "httptools", "fastapi"), targets(args), labels=LABELS,
                 load_generator="wrk 4.1 (separate process, loopback, keep-alive, 2 threads)",
                 azureml_tuned=AZUREML_TUNED)


if __name__ == "__main__":
    main()
