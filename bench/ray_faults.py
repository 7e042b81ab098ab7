"""What an endpoint on the Ray backend goes through when parts of its cluster go away, and how long until it answers
again: measured on tests/ray_cluster.py's cluster (this machine: a head offering no CPU, worker nodes, an MLflow
server, token auth on, loopback).

    .venv/bin/python bench/ray_faults.py [--repeats 3]

About 3 minutes a repeat. The endpoint (the example model as ``blue`` at 100%) runs with a profile only two nodes
of the bench's own offer (a custom resource), so its server has somewhere to go. A client asks the endpoint for a
score every 0.2 s, through the scoring URI ``get`` reports (read again after a failed request), as the tests'
steady client does. In turn:

- **server's node lost**: the raylet of the node the server runs on killed (SIGKILL, as a machine's loss). Ray marks
  the node dead and starts the server's actor again on the other node, where the server runs again with the same
  keys, deployments and traffic; measured from the kill until a scoring request is answered again. A fresh node is
  then added, so that each repeat starts with two.
- **head restarted**: every process of the head killed and the head started again on its ports (no GCS fault
  tolerance: a new cluster), each worker node whose raylet then ends started again, as Kubernetes restarts a pod or
  Compose a service. The cluster has forgotten every job, the endpoint's server with them: the endpoint reads Failed
  naming its lost server job, until ``create_or_update`` (what the next deploy run calls first) submits a new one,
  on the same state (keys, deployments, traffic); measured: until the Jobs API answers, until every node is alive,
  and from ``create_or_update`` until a scoring request is answered, and the whole from the kill.

A fault whose outcome is not what the backend promises (an answer from another model, other keys or traffic, a
server job resubmitted after a node's loss) stops the run: nothing is recorded. Records
bench/results/ray_faults.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from _common import REPO, Bench, build_model, harness_args, table

from mlrunway.backend.types import DeploymentSettings, EndpointSettings, ProvisioningState
from mlrunway.errors import Unavailable
from mlrunway.ray.backend import RayBackend
from tests.ray_cluster import RayCluster, ray_cluster

ENDPOINT = "faults"
REQUEST = json.dumps({"data": [[[[0.0] * 8] * 8]]}).encode()
MEASURES = {
    "node lost: answered again": "server's node lost: kill to answered again (s)",
    "head: served without it": "head restarted: kill to the old server's last answer (s)",
    "head: jobs api": "head restarted: kill to the Jobs API answering (s)",
    "head: nodes alive": "head restarted: kill to every node alive (s)",
    "head: restarted server answers": "head restarted: create_or_update to answered (s)",
    "head: answered again": "head restarted: kill to answered again (s)",
}


class Untrue(SystemExit):
    """What the backend did is not what it promises: the run measures nothing, and is not recorded."""


class Prober(threading.Thread):
    """A client scoring every 0.2 s: when each answer came, and whether it was a 200 from the expected model."""

    def __init__(self, backend: RayBackend) -> None:
        super().__init__(daemon=True)
        self.backend, self.stop, self.answered = backend, threading.Event(), 0.0
        self.target: tuple[str, str] | None = None

    def run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self.target = self.target or (self.backend.endpoints.get(ENDPOINT).scoring_uri,
                                              self.backend.endpoints.get_keys(ENDPOINT)["primary"])
                request = urllib.request.Request(self.target[0], data=REQUEST, method="POST", headers={
                    "Authorization": f"Bearer {self.target[1]}", "Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=5) as response:
                    response.read()
                    self.answered = time.monotonic()
            except (OSError, ValueError, urllib.error.HTTPError):
                self.target = None

    def answers_after(self, moment: float, what: str, timeout_s: float = 300) -> float:
        """Seconds from ``moment`` to the first answer after it."""
        while self.answered <= moment:
            if time.monotonic() - moment > timeout_s:
                raise Untrue(f"no answer within {timeout_s:g} s: {what}")
            time.sleep(0.05)
        return self.answered - moment


def until(predicate: Callable[[], bool], what: str, timeout_s: float = 300) -> None:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise Untrue(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.2)


def servers(backend: RayBackend) -> list[str]:
    return [job.name for job in backend.endpoints.serving.list(f"{ENDPOINT}-") if "-server-" in job.name]


def node_lost(cluster: RayCluster, backend: RayBackend, prober: Prober, repeat: int) -> dict[str, float]:
    before, where = servers(backend), backend.endpoints.root / ENDPOINT / "server.json"
    served_by = psutil.Process(json.loads(where.read_text())["pid"])
    raylet = next(p for p in served_by.parents() if p.name() == "raylet")
    raylet.kill()
    killed = time.monotonic()
    # The old server may answer for a moment (its worker notices the raylet's end): the answer that counts comes
    # after the server started again elsewhere has said where it serves.
    until(lambda: json.loads(where.read_text())["pid"] != served_by.pid, "the server started on another node")
    prober.answers_after(time.monotonic(), "the server's node lost")
    answered = prober.answered - killed
    if servers(backend) != before:
        raise Untrue(f"a server job was submitted again ({servers(backend)}, before {before}): the node's loss was "
                     "not handled by Ray starting its actor again")
    if psutil.pid_exists(served_by.pid) and psutil.Process(served_by.pid).status() != psutil.STATUS_ZOMBIE:
        raise Untrue(f"the server on the lost node (pid {served_by.pid}) is still running")
    cluster.add_node(f"ray-serve-{repeat}", 1, {"serve": 1.0})  # two nodes offer the profile again
    return {"node lost: answered again": answered}


def head_restarted(cluster: RayCluster, backend: RayBackend, prober: Prober, repeat: int) -> dict[str, float]:
    times = cluster.restart_head()
    killed = times["killed"]
    until(lambda: backend.endpoints.get(ENDPOINT).provisioning_state is ProvisioningState.FAILED,
          "the endpoint reads Failed once its server job is lost with the head")
    served_on = prober.answered - killed  # the server, on its worker node, answered without a head until then
    restarting = time.monotonic()
    backend.endpoints.begin_create_or_update(ENDPOINT, EndpointSettings(workers=1), compute="serve")
    restarted = prober.answers_after(restarting, "the server started again by create_or_update")
    return {"head: served without it": served_on, "head: jobs api": times["api"] - killed,
            "head: nodes alive": times["alive"] - killed, "head: restarted server answers": restarted,
            "head: answered again": prober.answered - killed}


FAULTS: dict[str, Callable[[RayCluster, RayBackend, Prober, int], dict[str, float]]] = {
    "server's node lost": node_lost, "head restarted": head_restarted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness_args(parser, repeats=3)
    args = parser.parse_args()
    bench = Bench("ray_faults", args)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        _, onnx, _ = build_model(tmp)
        with ray_cluster(tmp / "cluster", worker_cpus=1) as cluster:
            for name in ("ray-serve-a", "ray-serve-b"):
                cluster.add_node(name, 1, {"serve": 1.0})
            backend = RayBackend.from_connection({
                "address": cluster.address, "storage": str(cluster.storage), "tracking_uri": cluster.tracking_uri,
                "namespace": "bench", "profiles": {"cpu": {"num_cpus": 1},
                                                   "serve": {"num_cpus": 0.5, "resources": {"serve": 0.5}}}},
                cluster.token)
            endpoints = backend.endpoints
            endpoints.create_or_update(ENDPOINT, EndpointSettings(workers=1), compute="serve")
            model = backend.models.register("digits", onnx)
            endpoints.create_or_update_deployment(ENDPOINT, "blue", DeploymentSettings(
                model=f"digits:{model.version}", code_dir=str(REPO / "training")), timeout_s=300)
            endpoints.set_traffic(ENDPOINT, {"blue": 100})
            expected, keys = endpoints.invoke(ENDPOINT, payload=json.loads(REQUEST)), endpoints.get_keys(ENDPOINT)
            prober = Prober(backend)
            prober.start()
            try:
                for repeat in range(args.repeats):
                    for fault, measure in FAULTS.items():
                        prober.answers_after(time.monotonic(), "the endpoint before the fault", 60)
                        measured = measure(cluster, backend, prober, repeat)
                        if endpoints.invoke(ENDPOINT, payload=json.loads(REQUEST)) != expected or \
                                endpoints.get_keys(ENDPOINT) != keys or endpoints.get(ENDPOINT).traffic != {"blue": 100}:
                            raise Untrue(f"after {fault}: another answer, other keys or other traffic")
                        rows.append({"repeat": repeat, "fault": fault, **measured})
                        for key, value in measured.items():
                            bench.add(MEASURES[key], value, "s")
                        print(table(rows[-1:], [("repeat", "repeat"), ("fault", "fault"),
                                                *[(k, f"{k} (s)") for k in measured]]), flush=True)
            finally:
                prober.stop.set()
                with contextlib.suppress(Unavailable):  # a run stopped with the head down: the cluster goes anyway
                    endpoints.delete(ENDPOINT)
    bench.record(rows, ("ray", "uvicorn", "mlflow"), faults=list(FAULTS), measures=MEASURES)


if __name__ == "__main__":
    main()
