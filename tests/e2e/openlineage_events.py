"""OpenLineage's events of a DAG run, written by the provider's own listener through the client's file transport,
and the graph they make: a dataset -> the task that read it; a task -> the dataset it made."""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

Node = tuple[str, str]  # ("dataset", "<namespace>|<name>") or ("job", "<namespace>|<name>")


def _clear_provider_caches() -> None:
    """The provider reads its configuration once per process (functools.cache): read it again."""
    from airflow.providers.openlineage import conf

    for value in vars(conf).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


@contextmanager
def file_transport(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The provider's listener on the task runner's listeners, emitting each event as one JSON line into ``path``
    (``[openlineage] transport``, as a deployment configures it). The session's other tests run without a
    transport, so the provider's plugin registered no listener: this one is added, then removed."""
    from airflow.listeners.listener import get_listener_manager as scheduler_listeners
    from airflow.providers.openlineage.plugins.listener import OpenLineageListener
    from airflow.sdk.listener import get_listener_manager

    manager = get_listener_manager()  # both made (their plugins loaded) before the transport is set, so the
    scheduler_listeners()  # provider's plugin stays as the session has it: without a listener of its own
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT",
                       json.dumps({"type": "file", "log_file_path": str(path), "append": True}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "True")  # no fork of the test's process
    _clear_provider_caches()
    ours = None
    if not any(isinstance(p, OpenLineageListener) for p in manager.pm.get_plugins()):
        ours = OpenLineageListener()
        manager.add_listener(ours)
    try:
        yield path
    finally:
        if ours is not None:
            manager.pm.unregister(ours)
        monkeypatch.delenv("AIRFLOW__OPENLINEAGE__TRANSPORT")
        _clear_provider_caches()


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def dataset(d: dict[str, Any]) -> Node:
    return ("dataset", f"{d['namespace']}|{d['name']}")


def graph(run_events: list[dict[str, Any]]) -> dict[Node, set[Node]]:
    """Directed edges from every task event (START and COMPLETE): each input -> the task -> each output."""
    edges: dict[Node, set[Node]] = defaultdict(set)
    for event in run_events:
        if "run" not in event or "job" not in event:
            continue
        job: Node = ("job", f"{event['job']['namespace']}|{event['job']['name']}")
        for d in event.get("inputs") or []:
            edges[dataset(d)].add(job)
        for d in event.get("outputs") or []:
            edges[job].add(dataset(d))
    return edges


def task(edges: dict[Node, set[Node]], task_id: str) -> Node:
    """The job node of a task (``<dag_id>.<task_id>`` in the provider's namespace)."""
    nodes = set(edges).union(*edges.values())
    (node,) = {n for n in nodes if n[0] == "job" and n[1].endswith(f".{task_id}")}
    return node


def components(edges: dict[Node, set[Node]]) -> list[set[Node]]:
    """The graph's connected parts, ignoring the edges' direction."""
    undirected: dict[Node, set[Node]] = defaultdict(set)
    for a, targets in edges.items():
        for b in targets:
            undirected[a].add(b)
            undirected[b].add(a)
    seen: set[Node] = set()
    parts = []
    for node in undirected:
        if node in seen:
            continue
        part, queue = {node}, deque([node])
        while queue:
            for nxt in undirected[queue.popleft()] - part:
                part.add(nxt)
                queue.append(nxt)
        seen |= part
        parts.append(part)
    return parts
