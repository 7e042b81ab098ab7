"""A deployment's data collector: Azure ML's JSON lines, written by the endpoint's workers off the request path.

Layout, Azure's (under the workspace rather than its blob store), kept when the endpoint is deleted::

    <workspace>/modelDataCollector/<endpoint>/<deployment>/<collection>/<yyyy>/<MM>/<dd>[/<HH>[/<mm>]]/<instance>.jsonl

with ``rolling_rate`` choosing the depth (day, hour, minute) and ``<instance>`` one worker process. Each line is
one record in Azure's shape: ``specversion``, ``id``, ``source`` (``/onlineEndpoints/<e>/deployments/<d>``),
``type`` (``azureml.inference.<collection>``), ``datacontenttype``, ``time``, ``data``, ``contentrange``,
``correlationid``, ``xrequestid``, and for a scoring script's collections ``modelversion`` (the model, as
``name:version``), ``collectdatatype`` and ``agent``.

Two ways in, as on Azure:

- **custom logging**: the scoring script's ``azureml.ai.monitoring.Collector(name=...).collect(df)``. The SDK's
  own machinery (its collectors, sampling, payloads and correlation contexts) runs unchanged; where Azure's SDK
  sends each payload to the data collector beside the container, this worker's queue takes it. Each deployment's
  collectors get that deployment's settings when its ``init()`` creates them (the SDK reads its config then), so
  deployments that share a worker collect apart. A collection the deployment does not enable, or a script
  with no data collector, gets the SDK's own refusal (``on_error``), as on Azure.
- **payload logging** (``request``, ``response``): the server keeps the request's body and the answer's.

The request path only appends to a queue (bounded: past :data:`QUEUE_LIMIT` waiting records a ``collect()`` is
refused as the SDK refuses when its queue is full, and payloads are dropped and counted); a thread of the worker
serializes and appends them every :data:`TICK_S`. A deployment's captures are capped (``capture_max_bytes``,
across its collections): past the cap its oldest files go first, never one still being written; records that
would not fit even then are dropped, and the deployment's log says how many.
"""

from __future__ import annotations

import atexit
import calendar
import collections
import contextlib
import importlib
import json
import logging
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrunway.backend.capture import DataCollector

CAPTURE_DIR = "modelDataCollector"
TICK_S = 0.25
QUEUE_LIMIT = 10_000
DEFAULT_MAX_BYTES = 1024 ** 3
YIELD_EVERY = 64  # records serialized between two chances for the serving thread to take the GIL
EVICT_TO = 0.9  # past the cap, the oldest files go until this share of it is used
PERIOD_S = {"day": 86400, "hour": 3600, "minute": 60}
FULL_QUEUE = "Too many requests lead to message queue is full, please reduce the number of requests."

log = logging.getLogger(__name__)


def capture_root(endpoint_dir: Path) -> Path:
    """Where an endpoint's deployments write (``<workspace>/modelDataCollector/<endpoint>``)."""
    return endpoint_dir.parent.parent / CAPTURE_DIR / endpoint_dir.name


@dataclass(frozen=True)
class Target:
    """One deployment version's collector: where and what it writes."""

    folder: Path
    source: str
    model: str
    settings: DataCollector
    max_bytes: int
    log: logging.Logger

    def path(self, collection: str, when: float, instance: str) -> Path:
        t = time.gmtime(when)
        parts = [f"{t.tm_year:04d}", f"{t.tm_mon:02d}", f"{t.tm_mday:02d}"]
        if self.settings.rolling_rate != "day":
            parts.append(f"{t.tm_hour:02d}")
        if self.settings.rolling_rate == "minute":
            parts.append(f"{t.tm_min:02d}")
        return self.folder.joinpath(collection, *parts, f"{instance}.jsonl")

    def sampled(self) -> bool:
        return self.settings.sampling_rate >= 1 or random.random() < self.settings.sampling_rate


def target(endpoint_dir: Path, name: str, model: str, data_collector: dict[str, Any] | None,
           max_bytes: int, logger: logging.Logger) -> Target | None:
    """The deployment's collector, or None when it collects nothing."""
    settings = DataCollector.parse(data_collector)
    if settings is None:
        return None
    return Target(capture_root(endpoint_dir) / name, f"/onlineEndpoints/{endpoint_dir.name}/deployments/{name}",
                  model, settings, max_bytes, logger)


_ISO: list[Any] = [-1, ""]  # the last second formatted, and its text (only the writer's thread formats)
_HEADS: dict[tuple[str, str], str] = {}


def _iso(when: float) -> str:
    second = int(when)
    if second != _ISO[0]:
        _ISO[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))]
    return str(_ISO[1])


def _record(target: Target, collection: str, when: float, data: str, size: int, tail: str) -> str:
    """One line: Azure's fields around ``data`` (already JSON text, written as it is); ``tail``: more members,
    already JSON. The fields that never change for a deployment's collection are rendered once."""
    head = _HEADS.get((target.source, collection))
    if head is None:
        head = _HEADS[(target.source, collection)] = json.dumps({
            "source": target.source, "type": f"azureml.inference.{collection}",
            "datacontenttype": "application/json"})[1:-1]
    return (f'{{"specversion": "1.0", "id": "{uuid.uuid4()}", {head}, "time": "{_iso(when)}", "data":{data}, '
            f'{tail}, "contentrange": "bytes 0-{max(size - 1, 0)}/{size}"}}\n')


def _json_text(body: bytes) -> tuple[str, int]:
    """A body as JSON text: itself when it is JSON, else a JSON string of it (a line must stay one JSON object)."""
    text = body.decode("utf-8", "replace")
    try:
        json.loads(text)
    except ValueError:
        return json.dumps(text), len(body)
    return text, len(body)


class Writer:
    """The worker's queue of records and the thread that appends them, every ``tick_s``, to their files."""

    def __init__(self, tick_s: float = TICK_S, limit: int = QUEUE_LIMIT) -> None:
        self.tick_s, self.limit = tick_s, limit
        self.pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self._instance = ("", 0)
        self.used: dict[Path, int] = {}  # per deployment folder: bytes on disk when last counted, plus written since
        self.dropped: collections.Counter[Target] = collections.Counter()
        self._flush_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._thread_pid = 0

    @property
    def instance(self) -> str:
        """This process's files' name: its PID and start, so a forked copy of the writer never shares a file."""
        if self._instance[1] != os.getpid():
            self._instance = (f"{os.getpid()}-{int(time.time())}", os.getpid())
        return self._instance[0]

    def put(self, item: tuple[Any, ...]) -> bool:
        """Queue ``(kind, target, when, ...)``; False when the queue is full."""
        if len(self.pending) >= self.limit:
            return False
        self.pending.append(item)
        if self._thread is None or self._thread_pid != os.getpid():  # none yet, or a forked copy's (no thread here)
            self._start()
        return True

    def payload(self, target: Target, body: bytes, status: int, answer: bytes) -> None:
        """A request's body and its answer (payload logging), when this request is sampled."""
        if target.sampled() and not self.put(("payload", target, time.time(), body, status, answer)):
            self.dropped[target] += 1

    def _start(self) -> None:
        with self._flush_lock:
            if self._thread is None or self._thread_pid != os.getpid():
                self._thread, self._thread_pid = threading.Thread(target=self._run, name="capture-writer",
                                                                  daemon=True), os.getpid()
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.tick_s)
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the writer never dies; the next tick tries again
                log.exception("capture writer: a flush failed")

    def flush(self) -> None:
        """Append what is queued to its files (also at the worker's shutdown)."""
        with self._flush_lock:
            lines: dict[Path, list[str]] = collections.defaultdict(list)
            owners: dict[Path, Target] = {}
            paths: dict[tuple[int, str, int], Path] = {}  # per deployment, collection and time period
            done = 0
            while self.pending:
                item = self.pending.popleft()
                done += 1
                if done % YIELD_EVERY == 0:
                    time.sleep(0)  # let the event loop's thread have the GIL: a backlog is not written in one go
                try:
                    for collection, line in self._lines(item):
                        target, when = item[1], item[2]
                        key = (id(target), collection, int(when // PERIOD_S[target.settings.rolling_rate]))
                        path = paths.get(key) or paths.setdefault(key, target.path(collection, when, self.instance))
                        lines[path].append(line)
                        owners[path] = target
                except Exception as exc:  # noqa: BLE001 - a frame that cannot be serialized is that record lost
                    item[1].log.warning("data collector: a record could not be written (%s: %s)",
                                        type(exc).__name__, exc)
            for path, chunk in lines.items():
                self._append(owners[path], path, "".join(chunk), len(chunk))
            self._report_drops()

    @staticmethod
    def _lines(item: tuple[Any, ...]) -> Iterator[tuple[str, str]]:
        kind, target, when = item[:3]
        if kind == "sdk":
            payload = item[3]
            data = payload.content()
            if not isinstance(data, str):  # the SDK's compact format (bytes of the frame's text)
                data = json.dumps(bytes(data).decode("utf-8", "replace"))
            quoted, collection = json.dumps(payload.correlation_id() or ""), payload.designation().lower()
            tail = json.dumps({"modelversion": target.model, "collectdatatype": payload.type(),
                               "agent": payload.agent()})[1:-1]
            yield collection, _record(target, collection, payload.time() or when, data, len(data),
                                      f'"correlationid": {quoted}, "xrequestid": {quoted}, {tail}')
            return
        body, status, answer = item[3:]
        correlation = str(uuid.uuid4())
        ids = f'"correlationid": "{correlation}", "xrequestid": "{correlation}"'
        if "request" in target.settings.enabled:
            text, size = _json_text(body)
            yield "request", _record(target, "request", when, text, size, f'"path": "/score", "method": "POST", {ids}')
        if "response" in target.settings.enabled:
            text, size = _json_text(answer)
            yield "response", _record(target, "response", when, text, size, f'"statuscode": {int(status)}, {ids}')

    def _append(self, target: Target, path: Path, text: str, count: int) -> None:
        size = len(text.encode())
        if not self._room(target, size):
            self.dropped[target] += count
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            target.log.warning("data collector: %d record(s) not written to %s: %s", count, path, exc)
            self.used.pop(target.folder, None)  # count again next time
            return
        self.used[target.folder] = self.used.get(target.folder, 0) + size

    def _room(self, target: Target, size: int) -> bool:
        """Whether ``size`` more bytes fit under the deployment's cap, its oldest files removed if need be."""
        folder = target.folder
        used = self.used.get(folder)
        if used is None:
            used = self.used[folder] = sum(p.stat().st_size for p in _files(folder))
        if used + size <= target.max_bytes:
            return True
        used = self.used[folder] = _evict(target, int(target.max_bytes * EVICT_TO) - size)
        return used + size <= target.max_bytes

    def _report_drops(self) -> None:
        for dropped_target, count in self.dropped.items():
            dropped_target.log.warning("data collector: %d record(s) dropped (queue full, or over the capture cap "
                                       "of %d bytes with nothing older to remove)", count, dropped_target.max_bytes)
        self.dropped.clear()


def _files(folder: Path) -> list[Path]:
    """A deployment's capture files, oldest period first (the time folders sort as dates)."""
    if not folder.exists():
        return []
    return sorted(folder.rglob("*.jsonl"), key=lambda p: (p.relative_to(folder).parts[1:], p.name))


def _evict(target: Target, goal: int) -> int:
    """Remove the deployment's oldest files until at most ``goal`` bytes remain; never a file written in the last
    few seconds (a worker may still be appending to it). Return the bytes left."""
    files = _files(target.folder)
    sizes = {p: p.stat().st_size for p in files}
    used, removed, recent = sum(sizes.values()), 0, time.time() - 10 * TICK_S
    for path in files:
        if used <= goal:
            break
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < recent:
                path.unlink()
                used -= sizes[path]
                removed += 1
    if removed:
        target.log.warning("data collector: over the capture cap of %d bytes; removed the %d oldest file(s)",
                           target.max_bytes, removed)
    return used


WRITER = Writer()


@atexit.register
def _flush_at_exit() -> None:
    """What was queued after the worker's last flush: a scoring script's own exit handlers may still collect (a
    script that batches its rows flushes them so, as under Azure's server, whose workers exit as Python does)."""
    WRITER.flush()


# -- azureml-ai-monitoring's Collector, pointed at this worker -------------------------------------------------------
class _SdkConfig:
    """What the SDK's collectors ask of its config (``MdcConfig``'s methods), for one deployment version; ``None``:
    a deployment that collects nothing."""

    def __init__(self, token: str = "", target: Target | None = None) -> None:
        self.token, self.target = token, target

    def is_debug(self) -> bool:
        return False

    def enabled(self) -> bool:
        return self.target is not None and bool(self.target.settings.custom)

    def collection_enabled(self, name: str) -> bool:
        return self.target is not None and str(name).lower() in self.target.settings.custom

    def collection_sample_rate_percentage(self, name: str) -> float:
        return 100.0 if self.target is None else self.target.settings.sampling_rate * 100

    def model_version(self) -> str:
        return self.token

    def compact_format(self) -> bool:
        return False


class _SdkQueue:
    """The SDK's payload queue: a payload goes to :data:`WRITER`, to its deployment's files."""

    def enqueue(self, payload: Any) -> tuple[bool, str]:
        found = _TARGETS.get(payload.model_version())
        if found is None:
            return False, "no deployment of this worker collects this"
        return (True, "accepted") if WRITER.put(("sdk", found, time.time(), payload)) else (False, FULL_QUEUE)


_OFF = _SdkConfig()
_TARGETS: dict[str, Target] = {}
_installed = False


def _install_sdk() -> bool:
    """Point azureml-ai-monitoring (when installed) at this worker: its config and queue are module globals the
    collectors read (``get_config``, ``get_queue``); it is marked initialized, so it starts no sender of its own."""
    global _installed
    if _installed:
        return True
    try:
        importlib.import_module("azureml.ai.monitoring")
    except ImportError:
        return False
    sys.modules["azureml.ai.monitoring.init"].sdk_ready = True  # type: ignore[attr-defined]
    sys.modules["azureml.ai.monitoring.config.config"].mdc_config = _OFF  # type: ignore[attr-defined]
    sys.modules["azureml.ai.monitoring.queue.queue"].mdc_queue = _SdkQueue()  # type: ignore[attr-defined]
    _installed = True
    return True


@contextlib.contextmanager
def collecting(found: Target | None, name: str, version: int) -> Iterator[None]:
    """While a deployment's score.py is imported and its ``init()`` runs (under the worker's init lock): the SDK's
    collectors it creates collect into ``found``'s custom collections."""
    if found is None or not found.settings.custom or not _install_sdk():
        yield
        return
    token = f"{found.source}/v{version}"
    _TARGETS[token] = found
    config = sys.modules["azureml.ai.monitoring.config.config"]
    config.mdc_config = _SdkConfig(token, found)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        config.mdc_config = _OFF  # type: ignore[attr-defined]


# -- reading back ---------------------------------------------------------------------------------------------------
def read(root: Path, deployment: str, collection: str, start: float, end: float) -> list[dict[str, Any]]:
    """The records of ``collection`` timed in [start, end), oldest first. A line cut short (a worker killed while
    appending) is skipped."""
    folder = root / deployment / collection
    records: list[tuple[float, dict[str, Any]]] = []
    for path in _files(folder.parent):
        parts = path.relative_to(folder.parent).parts
        if parts[0] != collection or not _overlaps(parts[1:-1], start, end):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                    when = float(calendar.timegm(time.strptime(record["time"], "%Y-%m-%dT%H:%M:%SZ")))
                except (ValueError, KeyError, TypeError):
                    continue
                if start <= when < end:
                    records.append((when, record))
    records.sort(key=lambda pair: pair[0])
    return [record for _, record in records]


def _overlaps(period: tuple[str, ...], start: float, end: float) -> bool:
    """Whether a period folder (yyyy/MM/dd[/HH[/mm]]) may hold records of [start, end): a record's time is when
    its data was collected, which may be a little before the period its writer filed it under."""
    try:
        numbers = [int(p) for p in period] + [0] * (5 - len(period))
        begin = calendar.timegm((numbers[0], numbers[1], numbers[2], numbers[3], numbers[4], 0, 0, 0, 0))
    except (ValueError, IndexError):
        return False
    length = {3: PERIOD_S["day"], 4: PERIOD_S["hour"], 5: PERIOD_S["minute"]}.get(len(period), PERIOD_S["day"])
    return begin - 60 < end and begin + length + 60 > start
