"""Per-deployment requests, errors and latencies of an endpoint, as Azure Monitor keeps them for a managed
deployment: what a staged rollout compares between the champion and the challenger.

Each server worker sums what each deployment served per second and appends what it counted to
``metrics/<pid>-<hour>.jsonl`` every :data:`FLUSH_S` (one short line per deployment and second with traffic; a
second still running is written in parts, each part its own line, and readers add the lines up); the control
plane sums every worker's lines over a window. A rollout's watch sees a request's outcome within about
``FLUSH_S`` of it. Latencies go into a log-scale histogram (bucket ``i`` holds (1.1^(i-1), 1.1^i] ms), so p99 over
many workers is read from their summed buckets, within 10%. :class:`Reader` reads each file once, incrementally.

An error is what a deployment is to blame for: a 5xx, a 408, or a 424 whose ``ms-azureml-model-error-statuscode``
is 500 or more. A client's own 400 (at the deployment, or as a 424 carrying 400 at the scoring URI) is not.

During a mirror window each worker also keeps every mirrored request's two answers, the champion's and the
shadow's, in ``shadow/<pid>-<hour>.jsonl`` (written with the counts; :func:`mirrored_answers` reads them): what a
rollout compares (:mod:`mlrunway.deploy.shadow`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mlrunway.backend.types import DeploymentMetrics, MirroredAnswer, deployment_error

METRICS_DIR = "metrics"
SHADOW_DIR = "shadow"
KEEP_ANSWER_BYTES = 16 * 1024  # a mirrored answer kept whole up to this size; past it, its digest
BUCKET_BASE = 1.1
KEEP_S = 24 * 3600.0
MAX_PENDING = 3600  # (second, deployment) entries kept in memory while the disk refuses them
FLUSH_S = 0.25  # how often a worker appends its counts
log = logging.getLogger(__name__)


def _bucket(seconds: float) -> int:
    return max(0, math.ceil(math.log(max(seconds * 1000, 1e-3)) / math.log(BUCKET_BASE)))


class Answered(Protocol):
    """What :meth:`Recorder.mirrored` needs of an answer: its status at the deployment, body and latency."""

    body: bytes
    ms: float

    @property
    def at_deployment(self) -> int: ...


@dataclass
class _Second:
    requests: int = 0
    errors: int = 0
    buckets: Counter[int] = field(default_factory=Counter)

    def line(self, second: int, deployment: str) -> str:
        return json.dumps({"t": second, "d": deployment, "n": self.requests, "e": self.errors,
                           "h": {str(b): c for b, c in self.buckets.items()}}, separators=(",", ":"))


class Recorder:
    """One worker's counts: ``record`` per request (a dict update), ``flush`` once a second from the event loop."""

    def __init__(self, endpoint_dir: Path) -> None:
        self.folder = endpoint_dir / METRICS_DIR
        self.pending: dict[tuple[int, str], _Second] = {}
        self.shadow_folder = endpoint_dir / SHADOW_DIR
        self.pairs: list[str] = []  # mirrored answers waiting to be written (:meth:`mirrored`)

    def record(self, deployment: str, status: int, model_status: str | None, seconds: float) -> None:
        entry = self.pending.get(key := (int(time.time()), deployment))
        if entry is None:
            entry = self.pending[key] = _Second()
        entry.requests += 1
        entry.errors += deployment_error(status, model_status)
        entry.buckets[_bucket(seconds)] += 1

    def mirrored(self, shadow: str, champion: str, answers: tuple[Answered, Answered]) -> None:
        """Keep a mirrored request's two answers (the champion's, the shadow's): written with the next flush, to
        ``shadow/<pid>-<hour>.jsonl``; an answer over :data:`KEEP_ANSWER_BYTES` is kept as its SHA-256."""
        row: dict[str, Any] = {"t": round(time.time(), 3), "d": shadow, "c": champion,
                               "s": [a.at_deployment for a in answers], "ms": [round(a.ms, 3) for a in answers]}
        for key, answer in zip("ab", answers, strict=True):
            if len(answer.body) <= KEEP_ANSWER_BYTES:
                row[key] = answer.body.decode("utf-8", "replace")
            else:
                row[key], row[f"{key}d"] = None, hashlib.sha256(answer.body).hexdigest()
        self.pairs.append(json.dumps(row, separators=(",", ":")))
        if len(self.pairs) > MAX_PENDING:  # the disk has refused them for a while: the oldest go
            del self.pairs[:len(self.pairs) - MAX_PENDING]

    def flush(self) -> None:
        """Append what was counted since the last flush, the second still running included (its later requests
        go into a new entry, a line of their own). An entry leaves memory only once it is written: when the disk
        refuses (full, read-only), it stays pending and is written with the next flush that succeeds, so a
        rollout judged after the disk came back sees every request. Raises the OSError; :meth:`run` logs it and
        goes on."""
        now = int(time.time())
        refused = None
        if self.pairs:  # written apart: a disk that refuses them must not hold back the counts
            pairs, self.pairs = self.pairs, []
            try:
                self.shadow_folder.mkdir(exist_ok=True)
                _append(self.shadow_folder / f"{os.getpid()}-{now // 3600}.jsonl", ("\n".join(pairs) + "\n").encode())
            except OSError as error:
                self.pairs[:0], refused = pairs, error
        if done := sorted(self.pending):
            lines = [self.pending[key].line(*key) for key in done]
            self.folder.mkdir(exist_ok=True)
            _append(self.folder / f"{os.getpid()}-{now // 3600}.jsonl", ("\n".join(lines) + "\n").encode())
            for key in done:
                del self.pending[key]
        if refused is not None:
            raise refused

    async def run(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(FLUSH_S)
            try:
                self.flush()
            except OSError as error:
                self._bound()
                if not failing:
                    log.warning("endpoint metrics could not be written to %s (%s): kept in memory until they can be",
                                self.folder, error)
                failing = True
            else:
                if failing:
                    log.warning("endpoint metrics written again to %s", self.folder)
                failing = False

    def _bound(self) -> None:
        """While the disk refuses, at most :data:`MAX_PENDING` seconds wait in memory; older ones are dropped, and
        the log says how many requests they held (a rollout then lacks them: the judge sees fewer requests, never
        a false zero for later ones)."""
        dropped = sum(self.pending.pop(key).requests
                      for key in sorted(self.pending)[:max(0, len(self.pending) - MAX_PENDING)])
        if dropped:
            log.warning("endpoint metrics: the counts of %d requests dropped from memory (the disk refused them "
                        "for over %d seconds)", dropped, MAX_PENDING)


def _append(path: Path, data: bytes) -> None:
    """Append ``data`` whole or not at all: on a failed write (a full disk) what part of it reached the file is
    cut off again, or the seconds in it would be counted twice once they are written again."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


class Reader:
    """A deployment's figures over any window, from the workers' files of one endpoint, each file read once: the
    bytes added since the last read are parsed and summed per (second, deployment). A file that shrank (a write
    cut short by a full disk is cut off again) or was replaced is read again from its start; one older than a
    day is removed. One per endpoint and process (a watch reads every quarter second); it keeps the last
    ``horizon_s`` in memory, and a window that starts earlier is read by a fresh reader of the whole day."""

    def __init__(self, endpoint_dir: Path, horizon_s: float = KEEP_S) -> None:
        self.folder, self.horizon_s = endpoint_dir / METRICS_DIR, horizon_s
        self.files: dict[Path, tuple[int, int, dict[tuple[int, str], _Second]]] = {}  # inode, offset, seconds
        self.lock = threading.Lock()

    def read(self, deployment: str, start: float, end: float) -> DeploymentMetrics:
        """The deployment's requests, errors and p99 latency over [start, end) (seconds since the epoch), summed
        over every worker that served it, including workers that have since exited."""
        if start < time.time() - self.horizon_s + 60:
            return Reader(self.folder.parent).read(deployment, start, end)
        total = _Second()
        with self.lock:
            self._update()
            for _inode, _offset, seconds in self.files.values():
                for (second, name), entry in seconds.items():
                    if name == deployment and start <= second < end:
                        total.requests += entry.requests
                        total.errors += entry.errors
                        total.buckets.update(entry.buckets)
        return DeploymentMetrics(deployment=deployment, start=start, end=end, requests=total.requests,
                                 errors=total.errors, p99_ms=_quantile(total.buckets, 0.99))

    def _update(self) -> None:
        present = sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else []
        for gone in set(self.files) - set(present):
            del self.files[gone]
        horizon = time.time() - self.horizon_s
        for path in present:
            try:
                status = path.stat()
                if status.st_mtime < time.time() - KEEP_S:
                    path.unlink()
                    self.files.pop(path, None)
                    continue
                inode, offset, seconds = self.files.get(path, (status.st_ino, 0, {}))
                if inode != status.st_ino or status.st_size < offset:
                    inode, offset, seconds = status.st_ino, 0, {}
                if status.st_size == offset:
                    self.files[path] = (inode, offset, seconds)
                    continue
                with path.open("rb") as file:
                    file.seek(offset)
                    data = file.read()
            except FileNotFoundError:
                self.files.pop(path, None)
                continue
            complete = data[:data.rfind(b"\n") + 1]  # a line still being written is read next time
            for line in complete.splitlines():
                try:
                    row = json.loads(line)
                except ValueError:  # a line a killed worker left half-written
                    continue
                if row["t"] < horizon:
                    continue
                entry = seconds.get(key := (row["t"], row["d"]))
                if entry is None:
                    entry = seconds[key] = _Second()
                entry.requests += row["n"]
                entry.errors += row["e"]
                entry.buckets.update({int(b): c for b, c in row["h"].items()})
            for key in [k for k in seconds if k[0] < horizon]:
                del seconds[key]
            self.files[path] = (inode, offset + len(complete), seconds)


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


def mirrored_answers(endpoint_dir: Path, deployment: str, start: float, end: float) -> list[MirroredAnswer]:
    """The requests mirrored to ``deployment`` whose two answers were both in by a time within [start, end),
    from every worker's ``shadow/`` files of those hours; files older than a day are removed."""
    folder = endpoint_dir / SHADOW_DIR
    if not folder.is_dir():
        return []
    hours = range(int(start) // 3600, int(end) // 3600 + 1)
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        try:
            if path.stat().st_mtime < time.time() - KEEP_S:
                path.unlink()
                continue
            if int(path.stem.rpartition("-")[2]) not in hours:
                continue
            data = path.read_bytes()
        except (FileNotFoundError, ValueError):
            continue
        for line in data[:data.rfind(b"\n") + 1].splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line a killed worker left half-written
                continue
            if row["d"] == deployment and start <= row["t"] < end:
                found.append(MirroredAnswer(
                    at=row["t"], deployment=deployment, champion=row["c"], champion_status=row["s"][0],
                    shadow_status=row["s"][1], champion_ms=row["ms"][0], shadow_ms=row["ms"][1],
                    champion_answer=row["a"], shadow_answer=row["b"], champion_digest=row.get("ad", ""),
                    shadow_digest=row.get("bd", "")))
    return sorted(found, key=lambda pair: pair.at)
