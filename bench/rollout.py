"""A stable endpoint's rollout on the local backend with the default windows: how long each stage takes, and what
a client sending steady load through it sees. Two rollouts of a better model over a fair one: first with a
scoring script that fails a third of single-image requests (rolled back at its first step by the window's watch,
as the WindowTrigger watches it), then as it is (promoted: mirror off, steps 10, 50, 100, 30 s each). Targets
(issue 34): the faulty one back to 0% within 3 s of its first failed client request, with at most 10 failed
client requests at 40 requests a second.

    .venv/bin/python bench/rollout.py [--window-s 30] [--rate 40] [--repeats 3] [--backend ray]

``--backend ray`` runs the same on the Ray backend (recorded as bench/results/rollout_ray.json): the endpoint served
by a Ray job on the worker node of tests/ray_cluster.py's cluster (two nodes and an MLflow server on this machine,
stopped with the run), its lease and per-second metrics files on the cluster's storage, the client on the worker
node's scoring port like any client of the cluster.

About 12 minutes with the defaults (each repeat: a fresh endpoint, then both rollouts, 2 minutes). Each rollout is
checked against its label: the faulty one must end ``rolled_back`` with every failed client request the
challenger's, the fixed one ``promoted`` with no failed request; a run where either does not is refused, not
recorded. Prints a table and records bench/results/rollout.json.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from _common import REPO, Bench, Target, build_model, harness_args, table

from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import DeploymentSettings
from mlrunway.deploy import stable
from mlrunway.deploy.blue import promote_blue
from mlrunway.deploy.gate import GateSettings
from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.local.backend import LocalBackend
from tests.production.test_stable_endpoint_local import FAULTY, perturbed

ENDPOINT = "bench-prod"
# What each rollout must end as, and whether a client may see a failure (only the challenger's, when it fails).
EXPECTED = {"roll back a faulty one": ("rolled_back", True), "promote a better model": ("promoted", False)}
ONE_IMAGE = json.dumps({"data": [[[[0.0] * 8] * 8]]}).encode()


class Client(threading.Thread):
    """Steady load on the scoring URI over one keep-alive connection: ``rate`` requests a second."""

    def __init__(self, uri: str, key: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.gap = urlparse(uri), key, 1 / rate
        self.answers: list[tuple[float, int, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection(self.url.hostname or "127.0.0.1", self.url.port, timeout=10)
        while not self.stop.is_set():
            connection.request("POST", self.url.path, ONE_IMAGE, {"Authorization": f"Bearer {self.key}",
                                                                  "Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            self.answers.append((time.time(), response.status, response.getheader("azureml-model-deployment", "")))
            time.sleep(self.gap)


def rollout(backend: Backend, endpoint: str, settings: DeploymentSettings, data: Path, policy: RolloutPolicy,
            holder: str) -> tuple[dict, list[tuple[str, float]]]:
    """One run's deploy step by step (as the deploy task does it, without Airflow's deferrals); the stages' times."""
    stages, started = [], time.monotonic()

    def mark(stage: str) -> None:
        nonlocal started
        stages.append((stage, time.monotonic() - started))
        started = time.monotonic()

    r = stable.begin(backend, endpoint, holder, settings, policy, 3600)
    while not backend.endpoints.get_deployment(endpoint, r.slot).provisioning_state.is_terminal():
        time.sleep(0.2)
    mark(f"provision {r.slot}")
    evaluation = stable.evaluation_set(backend, r.model, settings.code_dir, data, None)
    better = stable.judge_challenger(backend, r, evaluation, GateSettings())
    mark(f"gate ({r.gate['samples']} images, both deployments)")
    if not better:
        return stable.conclude(backend, r, "held", "not better"), stages
    wait = stable.next_phase(backend, r)
    while True:
        watched = stable.watch_window(backend, r, time.time() + wait)  # as the WindowTrigger watches it
        rolled_back_at = time.time() if watched else None
        after = stable.after_window(backend, r, watched=watched)
        mark(f"window at {r.windows[-1]['phase']}" + (" (the watch rolled back)" if watched else "")
             if r.windows else "window extended")
        if after.decision:
            result = stable.conclude(backend, r, after.decision, after.reason)
            return {**result, "rolled_back_at": rolled_back_at}, stages
        wait = after.wait_s


def champion(backend: Backend, endpoint: str, data: Path) -> None:
    """A new endpoint serving the fair model (digits:1) as blue at 100%, as a first run leaves it."""
    first = stable.begin(backend, endpoint, "run-1", DeploymentSettings(
        model="digits:1", code_dir=str(REPO / "training")), RolloutPolicy(), 3600)
    while not backend.endpoints.get_deployment(endpoint, "blue").provisioning_state.is_terminal():
        time.sleep(0.2)
    promote_blue(backend, endpoint, "digits", 1, data)
    stable.conclude(backend, first, "created", "first")
    stable.clean_up(backend, endpoint, "run-1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window-s", type=float, default=RolloutPolicy().window_s)
    parser.add_argument("--rate", type=float, default=40.0, help="client requests a second")
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    bench = Bench("rollout" if args.backend == "local" else "rollout_ray", args)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as running:
        tmp = Path(scratch)
        _, onnx, data = build_model(tmp)
        backend = LocalBackend.at(tmp / "ws") if args.backend == "local" else ray_backend(running, tmp)
        for noise in (0.6, 0.0):
            backend.models.register("digits", perturbed(onnx, tmp / f"noise-{noise}", noise))
        faulty = shutil.copytree(REPO / "training", tmp / "faulty")
        (faulty / "faulty_score.py").write_text(FAULTY)
        policy = RolloutPolicy(window_s=args.window_s)
        for repeat in range(args.repeats):
            endpoint = f"{ENDPOINT}-{repeat}"
            try:
                champion(backend, endpoint, data)
                uri, key = backend.endpoints.get(endpoint).scoring_uri, backend.endpoints.get_keys(endpoint)["primary"]
                for name, settings in (
                        ("roll back a faulty one", DeploymentSettings(model="digits:2", code_dir=str(faulty),
                                                                      scoring_script="faulty_score.py")),
                        ("promote a better model", DeploymentSettings(model="digits:2",
                                                                      code_dir=str(REPO / "training")))):
                    client = Client(uri, key, args.rate)
                    client.start()
                    began, began_at = time.monotonic(), time.time()
                    holder = f"run-{repeat}-{len(rows) + 2}"
                    result, stages = rollout(backend, endpoint, settings, data, policy, holder)
                    total = time.monotonic() - began
                    time.sleep(2)
                    client.stop.set()
                    client.join()
                    failed = [(status, slot) for _, status, slot in client.answers if status != 200]
                    first_failure = min((t for t, status, _ in client.answers if status != 200), default=None)
                    back = result.get("rolled_back_at") or (began_at + total)
                    row = {"repeat": repeat, "rollout": name, "decision": result["decision"],
                           "total_s": round(total, 1),
                           "rollback_after_first_failure_s": round(back - first_failure, 2) if first_failure else None,
                           "stages": "; ".join(f"{stage} {seconds:.1f} s" for stage, seconds in stages),
                           "requests": len(client.answers), "failed": len(failed),
                           "failed_outside_challenger": sum(slot != result["deployment"] for _, slot in failed)}
                    rows.append(row)
                    print(f"{name}: {result['decision']} in {total:.1f} s: {row['stages']}", flush=True)
                    check(row, result)
                    bench.add(f"{name}: total s", total, "s")
                    bench.add(f"{name}: failed client requests", len(failed), "requests")
                    if row["rollback_after_first_failure_s"] is not None:
                        bench.add(f"{name}: rollback s after the first failed request",
                                  row["rollback_after_first_failure_s"], "s")
                    bench.add(f"{name}: client requests", len(client.answers), "requests")
                    stable.clean_up(backend, endpoint, holder)  # the loser's slot, and the lease
            finally:
                backend.endpoints.delete(endpoint)
    print(table(rows, [("repeat", "repeat"), ("rollout", "rollout"), ("decision", "decision"), ("total_s", "total s"),
                       ("rollback_after_first_failure_s", "rollback after 1st failure s"),
                       ("requests", "client requests"), ("failed", "failed"),
                       ("failed_outside_challenger", "failed outside the challenger")]))
    for row in rows:
        print(f"  {row['rollout']}: {row['stages']}")
    bench.record(rows, ("onnxruntime", "uvicorn") + (("ray",) if args.backend == "ray" else ()), [
        Target("roll back a faulty one: rollback s after the first failed request", "<=", 3.0,
               "a failing challenger back to 0% within 3 s of its first failed request"),
        Target("roll back a faulty one: failed client requests", "<=", 10,
               f"at most 10 failed client requests at {args.rate:g} requests a second"),
    ], expected={k: v[0] for k, v in EXPECTED.items()})


def ray_backend(running: contextlib.ExitStack, tmp: Path) -> Backend:
    """A Ray backend over tests/ray_cluster.py's cluster, stopped with the run (its worker node: 2 CPUs)."""
    from mlrunway.ray.backend import RayBackend
    from tests.ray_cluster import ray_cluster

    cluster = running.enter_context(ray_cluster(tmp / "cluster", worker_cpus=2))
    return RayBackend.from_connection({
        "address": cluster.address, "storage": str(cluster.storage), "tracking_uri": cluster.tracking_uri,
        "namespace": "bench", "profiles": {"cpu": {"num_cpus": 1}}}, cluster.token)


def check(row: dict, result: dict) -> None:
    """The rollout ended as its label says, and no client saw a failure it should not have: else nothing is
    recorded (this run measured something other than what its row would claim)."""
    decision, may_fail = EXPECTED[row["rollout"]]
    wrong = []
    if row["decision"] != decision:
        wrong.append(f"ended {row['decision']} ({result.get('reason')}), not {decision}")
    if row["failed_outside_challenger"]:
        wrong.append(f"{row['failed_outside_challenger']} failed requests were not the challenger's")
    if row["failed"] and not may_fail:
        wrong.append(f"{row['failed']} client requests failed")
    if wrong:
        raise SystemExit(f"{row['rollout']} (repeat {row['repeat']}): {'; '.join(wrong)}: not recorded")


if __name__ == "__main__":
    main()
