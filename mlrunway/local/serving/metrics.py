"""Per-deployment requests, errors and latencies of a local endpoint, as Azure Monitor keeps them for a managed
deployment: what a staged rollout compares between the champion and the challenger.

Each server worker sums what each deployment served per second and appends the complete seconds to
``metrics/<pid>-<hour>.jsonl`` once a second (one short line per deployment and second with traffic); the
control plane sums every worker's lines over a window. Latencies go into a log-scale histogram (bucket ``i``
holds (1.1^(i-1), 1.1^i] ms), so p99 over many workers is read from their summed buckets, within 10%.

An error is what a deployment is to blame for: a 5xx, a 408, or a 424 whose ``ms-azureml-model-error-statuscode``
is 500 or more. A client's own 400 (at the deployment, or as a 424 carrying 400 at the scoring URI) is not.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mlrunway.backend.types import DeploymentMetrics, deployment_error

METRICS_DIR = "metrics"
BUCKET_BASE = 1.1
KEEP_S = 24 * 3600.0


def _bucket(seconds: float) -> int:
    return max(0, math.ceil(math.log(max(seconds * 1000, 1e-3)) / math.log(BUCKET_BASE)))


@dataclass
class _Second:
    requests: int = 0
    errors: int = 0
    buckets: Counter[int] = field(default_factory=Counter)


class Recorder:
    """One worker's counts: ``record`` per request (a dict update), ``flush`` once a second from the event loop."""

    def __init__(self, endpoint_dir: Path) -> None:
        self.folder = endpoint_dir / METRICS_DIR
        self.pending: dict[tuple[int, str], _Second] = {}

    def record(self, deployment: str, status: int, model_status: str | None, seconds: float) -> None:
        entry = self.pending.get(key := (int(time.time()), deployment))
        if entry is None:
            entry = self.pending[key] = _Second()
        entry.requests += 1
        entry.errors += deployment_error(status, model_status)
        entry.buckets[_bucket(seconds)] += 1

    def flush(self, everything: bool = False) -> None:
        """Append the seconds that have ended (all of them when the worker stops)."""
        now = int(time.time())
        done = [key for key in self.pending if everything or key[0] < now]
        if not done:
            return
        self.folder.mkdir(exist_ok=True)
        lines = []
        for key in sorted(done):
            entry = self.pending.pop(key)
            lines.append(json.dumps({"t": key[0], "d": key[1], "n": entry.requests, "e": entry.errors,
                                     "h": {str(b): c for b, c in entry.buckets.items()}}, separators=(",", ":")))
        with open(self.folder / f"{os.getpid()}-{now // 3600}.jsonl", "a") as out:
            out.write("\n".join(lines) + "\n")

    async def run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.flush()


def read(endpoint_dir: Path, deployment: str, start: float, end: float) -> DeploymentMetrics:
    """The deployment's requests, errors and p99 latency over [start, end) (seconds since the epoch), summed over
    every worker that served it, including workers that have since exited. Files older than a day are removed."""
    requests = errors = 0
    buckets: Counter[int] = Counter()
    folder = endpoint_dir / METRICS_DIR
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        try:
            if path.stat().st_mtime < time.time() - KEEP_S:
                path.unlink()
                continue
            text = path.read_text()
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line a killed worker left half-written
                continue
            if row["d"] == deployment and start <= row["t"] < end:
                requests += row["n"]
                errors += row["e"]
                buckets.update({int(b): c for b, c in row["h"].items()})
    return DeploymentMetrics(deployment=deployment, start=start, end=end, requests=requests, errors=errors,
                             p99_ms=_quantile(buckets, 0.99))


def _quantile(buckets: Counter[int], q: float) -> float | None:
    total = sum(buckets.values())
    if not total:
        return None
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= q * total:
            return round(BUCKET_BASE ** bucket, 3)
    return None  # unreachable: the last bucket reaches the total
