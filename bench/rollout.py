"""A stable endpoint's rollout on the local backend with the default windows: how long each stage takes, and what
a client sending steady load through it sees. Two rollouts of a better model over a fair one: first with a
scoring script that fails a third of single-image requests (rolled back at its first step), then as it is
(promoted: mirror off, steps 10, 50, 100, 30 s each).

    .venv/bin/python bench/rollout.py [--window-s 30] [--rate 40]

Prints a table and records bench/results/rollout.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from _common import REPO, build_model, record, table

from mlrunway.backend.types import DeploymentSettings
from mlrunway.local.backend import LocalBackend
from mlrunway.pipeline import promote_blue
from mlrunway.production import stable
from mlrunway.production.rollout import RolloutPolicy
from tests.production.test_stable_endpoint_local import FAULTY, perturbed

ENDPOINT = "bench-prod"
ONE_IMAGE = json.dumps({"data": [[[[0.0] * 8] * 8]]}).encode()


class Client(threading.Thread):
    """Steady load on the scoring URI over one keep-alive connection: ``rate`` requests a second."""

    def __init__(self, uri: str, key: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.gap = urlparse(uri), key, 1 / rate
        self.answers: list[tuple[float, int, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=10)
        while not self.stop.is_set():
            connection.request("POST", self.url.path, ONE_IMAGE, {"Authorization": f"Bearer {self.key}",
                                                                  "Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            self.answers.append((time.time(), response.status, response.getheader("azureml-model-deployment", "")))
            time.sleep(self.gap)


def rollout(backend: LocalBackend, settings: DeploymentSettings, data: Path, policy: RolloutPolicy,
            holder: str) -> tuple[dict, list[tuple[str, float]]]:
    """One run's deploy step by step (as the deploy task does it, without Airflow's deferrals); the stages' times."""
    stages, started = [], time.monotonic()

    def mark(stage: str) -> None:
        nonlocal started
        stages.append((stage, time.monotonic() - started))
        started = time.monotonic()

    r = stable.begin(backend, ENDPOINT, holder, settings, policy, 3600)
    while not backend.endpoints.get_deployment(ENDPOINT, r.slot).provisioning_state.is_terminal():
        time.sleep(0.2)
    mark(f"provision {r.slot}")
    better = stable.judge_challenger(backend, r, stable.evaluation_set(backend, r.model, settings.code_dir, data,
                                                                       None), 0)
    mark(f"gate ({r.gate['samples']} images, both deployments)")
    if not better:
        return stable.conclude(backend, r, "held", "not better"), stages
    while True:
        window = stable.next_phase(backend, r)
        time.sleep(window)
        verdict = stable.check_window(backend, r)
        mark(f"window at {r.windows[-1]['phase']}")
        if not verdict.ok:
            return stable.conclude(backend, r, "rolled_back", verdict.reason), stages
        if stable.done(r):
            return stable.conclude(backend, r, "promoted", "every window within bounds"), stages


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window-s", type=float, default=RolloutPolicy().window_s)
    parser.add_argument("--rate", type=float, default=40.0, help="client requests a second")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        _, onnx, data = build_model(tmp)
        backend = LocalBackend.at(tmp / "ws")
        for noise in (0.6, 0.0):
            backend.models.register("digits", perturbed(onnx, tmp / f"noise-{noise}", noise))
        faulty = shutil.copytree(REPO / "training", tmp / "faulty")
        (faulty / "faulty_score.py").write_text(FAULTY)
        try:
            first = stable.begin(backend, ENDPOINT, "run-1", DeploymentSettings(
                model="digits:1", code_dir=str(REPO / "training")), RolloutPolicy(), 3600)
            while not backend.endpoints.get_deployment(ENDPOINT, "blue").provisioning_state.is_terminal():
                time.sleep(0.2)
            promote_blue(backend, ENDPOINT, "digits", 1, data)
            stable.conclude(backend, first, "created", "first")
            stable.clean_up(backend, ENDPOINT, "run-1")
            state = backend.endpoints.state(ENDPOINT)
            policy = RolloutPolicy(window_s=args.window_s)
            for name, settings in (
                    ("roll back a faulty one", DeploymentSettings(model="digits:2", code_dir=str(faulty),
                                                                  scoring_script="faulty_score.py")),
                    ("promote a better model", DeploymentSettings(model="digits:2", code_dir=str(REPO / "training")))):
                client = Client(state.scoring_uri, state.keys["primary"], args.rate)
                client.start()
                began = time.monotonic()
                holder = f"run-{len(rows) + 2}"
                result, stages = rollout(backend, settings, data, policy, holder)
                total = time.monotonic() - began
                time.sleep(2)
                client.stop.set()
                client.join()
                failed = [(status, slot) for _, status, slot in client.answers if status != 200]
                rows.append({"rollout": name, "decision": result["decision"], "total_s": round(total, 1),
                             "stages": "; ".join(f"{stage} {seconds:.1f} s" for stage, seconds in stages),
                             "requests": len(client.answers), "failed": len(failed),
                             "failed_outside_challenger": sum(slot != result["deployment"] for _, slot in failed)})
                print(f"{name}: {result['decision']} in {total:.1f} s: {rows[-1]['stages']}", flush=True)
                stable.clean_up(backend, ENDPOINT, holder)  # the loser's slot, and the lease
        finally:
            backend.endpoints.delete(ENDPOINT)
    print(table(rows, [("rollout", "rollout"), ("decision", "decision"), ("total_s", "total s"),
                       ("requests", "client requests"), ("failed", "failed"),
                       ("failed_outside_challenger", "failed outside the challenger")]))
    for row in rows:
        print(f"  {row['rollout']}: {row['stages']}")
    record("rollout", args, rows, ("onnxruntime", "uvicorn"))


if __name__ == "__main__":
    sys.exit(main())
