"""A backend's reports folder (``Backend.reports``), its layout named once: every writer and reader of a report
finds its place here, and so does pruning, on every backend.

    <reports>/<prefix>-<run key>-sweep/     a run's sweep report (report.html, curves.png, report.json) and run.json
    <reports>/model-cards/<model>/<version>/ a model version's card (card.md, card.html, card.json)
    <reports>/monitor/<endpoint>/           an endpoint's monitoring reports (<UTC time>.json/.html, latest.*)
    <reports>/monitor/<endpoint>/reference/<model>-<version>/   the reference rows its monitor made
    <reports>/batch_scoring/<model>-<version>.json               a batch scoring's result

A run's folder holds ``run.json`` (``dag_id``, ``run_id``, ``created``): pruning keeps each DAG's newest runs' reports
by it; a run folder without one (written before it existed) goes by age.
"""

from __future__ import annotations

import calendar
import json
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrunway.backend.naming import base_name
from mlrunway.backend.retention import Pruned, PrunePlan, RetentionPolicy

__all__ = ["BATCH", "CARDS", "MONITOR", "REFERENCE", "RUN_FILE", "ReportsFolder", "size_of"]

RUN_FILE = "run.json"
CARDS, MONITOR, BATCH, REFERENCE = "model-cards", "monitor", "batch_scoring", "reference"
_RUN_FOLDER = re.compile(r"^.+-[0-9a-f]{8}-sweep$")  # <prefix>-<run key>-sweep (RunNames.sweep)
_MONITOR_STAMP = re.compile(r"^(\d{8}T\d{6}Z)\.(json|html)$")


def _name(model: str) -> str:
    """``name:version`` as a folder's or file's name."""
    return model.replace(":", "-")


@dataclass(frozen=True)
class ReportsFolder:
    """Where each report of a backend's reports folder ``root`` lives."""

    root: Path

    def sweep(self, sweep: str) -> Path:
        """The folder of the run whose sweep is ``sweep`` (any attempt's name)."""
        return self.root / base_name(sweep)

    def card(self, model: str, version: int | str) -> Path:
        return self.root / CARDS / model / str(version)

    def monitoring(self, endpoint: str = "") -> Path:
        """An endpoint's monitoring reports (all endpoints' with no name)."""
        return self.root / MONITOR / endpoint if endpoint else self.root / MONITOR

    def reference(self, endpoint: str, model: str) -> Path:
        """The reference rows an endpoint's monitor made of ``model`` (``name:version``)."""
        return self.monitoring(endpoint) / REFERENCE / _name(model)

    def batch(self, model: str) -> Path:
        """A batch scoring's result with ``model`` (``name:version``)."""
        return self.root / BATCH / f"{_name(model)}.json"

    def mark_run(self, sweep: str, dag_id: str, run_id: str, now: float | None = None) -> Path:
        """Write the run's ``run.json`` (once: a retried task keeps the first one's time); return its folder."""
        folder = self.sweep(sweep)
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / RUN_FILE).is_file():
            (folder / RUN_FILE).write_text(json.dumps({"dag_id": dag_id, "run_id": run_id,
                                                       "created": time.time() if now is None else now}))
        return folder

    def plan(self, policy: RetentionPolicy, *, keep: Mapping[str, str] | None = None,
             gone_runs: Mapping[str, str] | None = None, gone_versions: tuple[tuple[str, int, str], ...] = (),
             now: float | None = None) -> list[Pruned]:
        """What pruning by ``policy`` removes of this folder: the run reports of each DAG's runs older than its
        newest ``keep_runs`` (a folder without ``run.json``: older than ``capture_days``), but those ``keep`` names
        (run folder: why, a backend's own reasons: a run still open, one that produced a protected version); the
        reports of the runs in ``gone_runs`` (run folder: why: runs the backend itself removes); the card and
        references of each version in ``gone_versions`` (``(model, version, why)``, versions the backend itself
        removes); the monitoring reports older than ``capture_days`` (``latest.*`` stays)."""
        keep, gone_runs = keep or {}, gone_runs or {}
        now = time.time() if now is None else now
        cutoff = now - policy.capture_days * 86400
        removed: list[Pruned] = []
        by_dag: dict[str, list[tuple[float, Path]]] = {}
        for folder in self._runs():
            if folder.name in gone_runs:
                removed.append(self._pruned(folder, gone_runs[folder.name]))
                continue
            recorded = _run_record(folder)
            if recorded is None:  # written before run.json: by its age
                if folder.stat().st_mtime < cutoff and folder.name not in keep:
                    removed.append(self._pruned(folder, f"a run report without {RUN_FILE}, over "
                                                        f"{policy.capture_days:g} days old"))
                continue
            by_dag.setdefault(str(recorded.get("dag_id", "")), []).append((float(recorded.get("created", 0)), folder))
        for dag_id, runs in sorted(by_dag.items()):
            runs.sort(key=lambda run: run[0], reverse=True)
            for _, folder in runs[policy.keep_runs:]:
                if folder.name not in keep:
                    removed.append(self._pruned(folder, f"older than the last {policy.keep_runs} runs of {dag_id}"))
        for model, version, why in gone_versions:
            card = self.card(model, version)
            if card.is_dir():
                removed.append(self._pruned(card, why))
            for reference in sorted(self.monitoring().glob(f"*/{REFERENCE}/{_name(f'{model}:{version}')}")):
                removed.append(self._pruned(reference, why))
        for page in sorted(self.monitoring().glob("*/*")) if self.monitoring().is_dir() else []:
            found = _MONITOR_STAMP.match(page.name)
            if found and _utc(found[1]) < cutoff:
                removed.append(self._pruned(page, f"a monitoring report over {policy.capture_days:g} days old"))
        return removed

    def prune(self, policy: RetentionPolicy, *, dry_run: bool = False, now: float | None = None) -> PrunePlan:
        """Plan by ``policy`` alone (no backend's reasons: a backend whose workspace keeps itself, as Azure ML's
        does), and unless ``dry_run`` remove."""
        plan = PrunePlan(policy, self.plan(policy, now=now), dry_run=dry_run)
        for item in [] if dry_run else plan.removed:
            self.remove(item)
        return plan

    def remove(self, item: Pruned) -> None:
        """Remove what :meth:`plan` listed (``item.name`` is relative to the folder)."""
        target = self.root / item.name
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)

    def _runs(self) -> list[Path]:
        return sorted(p for p in self.root.iterdir() if p.is_dir() and _RUN_FOLDER.match(p.name)) \
            if self.root.is_dir() else []

    def _pruned(self, path: Path, reason: str) -> Pruned:
        return Pruned("report", str(path.relative_to(self.root)), reason, size_of(path))


def _run_record(folder: Path) -> dict[str, Any] | None:
    try:
        recorded = json.loads((folder / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def _utc(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")))


def size_of(path: Path) -> int:
    """The bytes a file or folder holds (links counted as themselves, not followed)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir())
