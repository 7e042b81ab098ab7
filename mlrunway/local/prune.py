"""Pruning a local workspace by a retention policy: ``python -m mlrunway.local prune [--dry-run]``.

A run is what one DAG run submitted (:class:`~mlrunway.backend.naming.RunNames`): ``<prefix>-<key>-train`` and
``-sweep`` with their attempts (``-a2``...) and the sweep's trials (``<sweep>_trial_<i>``); a job submitted
outside a DAG is a run of its own, counted with the others outside a DAG. Each prefix keeps its last
``keep_runs`` runs (by their first job's creation); an older run goes whole: its job folders (code snapshots,
logs, outputs), its jobs' MLflow runs and artifacts, and its saved report. Each model keeps its newest
``keep_versions`` versions; an older version goes from the folder and from MLflow's registry, with its copy in
MLflow's artifact store. Captured requests (``modelDataCollector/``) go by the hour they were written, once
``capture_days`` have passed, and so do monitoring reports (each endpoint's ``latest`` stays).

Kept whatever the numbers say, each with the reason in the plan:

- a run with a job that has not ended (or whose state cannot be read: no evidence is never a pass);
- a model version that holds an alias, or ever held ``production`` or ``previous`` (``models/<name>/aliases.jsonl``,
  written as aliases move; a workspace from before keeps its current holders), a version a deployment of any
  endpoint serves, and the run that produced each of them;
- a kept run's model versions, so that a kept report's links all resolve.

A dry run lists what would go and the space it frees; a real one removes in an order that loses nothing when it
is cut short: a run's MLflow run before its job folder (the folder lists it for the next prune), a version's
MLflow mirror before its folder, under the model's lock (an interrupted one is mirrored again, not lost).
"""

from __future__ import annotations

import calendar
import json
import logging
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrunway.backend.naming import RunNames
from mlrunway.backend.retention import PROTECTED_ALIASES, Pruned, PrunePlan, RetentionPolicy
from mlrunway.errors import MlrunwayError, NotFound
from mlrunway.ledger.reports import ReportsFolder, size_of
from mlrunway.local import records
from mlrunway.local.registry import ALIAS_LOG
from mlrunway.local.workspace import Workspace
from mlrunway.locks import locked

log = logging.getLogger(__name__)

_RUN_JOB = re.compile(r"^(?P<prefix>.+)-(?P<key>[0-9a-f]{8})-(?:train|sweep|export|reference)(?:-a\d+)?$")
_TRIAL = re.compile(r"^(?P<sweep>.+)_trial_\d+$")
_CAPTURE_HOUR = re.compile(r"^\d{4}/\d{2}/\d{2}/\d{2}$")


@dataclass
class _Run:
    prefix: str
    key: str
    jobs: list[Path] = field(default_factory=list)
    started: float = float("inf")  # its first job's creation: a retried attempt does not make an old run new
    open_job: str | None = None

    @property
    def name(self) -> str:
        return f"{self.prefix}-{self.key}" if self.prefix else self.key

    @property
    def report(self) -> str:
        """Its report's folder in the reports folder (a DAG run's: its sweep's name, RunNames.sweep)."""
        return RunNames(self.prefix, self.key).sweep


def run_of(job_name: str) -> tuple[str, str]:
    """(prefix, run key) of a job: its DAG run's, or ("", its own name) for a job submitted outside a DAG."""
    trial = _TRIAL.match(job_name)
    stem = trial["sweep"] if trial else job_name
    found = _RUN_JOB.match(stem)
    return (found["prefix"], found["key"]) if found else ("", stem)


def _aliased(workspace: Workspace, name: str) -> dict[int, str]:
    """Versions of ``name`` that hold an alias now or ever held a protected one: why each is kept."""
    why: dict[int, str] = {}
    path = workspace.models / name / ALIAS_LOG
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if entry.get("alias") in PROTECTED_ALIASES:
                why[int(entry["version"])] = f"held the {entry['alias']} alias"
    from mlrunway.local import mlflow_registry
    from mlrunway.local.registry import LocalModels

    try:
        LocalModels(workspace).sync(name)  # a model MLflow does not mirror yet (a workspace from before) gets mirrored
        held = mlflow_registry.client(workspace).get_registered_model(name).aliases
    except Exception as exc:  # noqa: BLE001 - MLflow's errors vary; no reading of aliases prunes nothing
        raise MlrunwayError(f"model {name}: its aliases could not be read from MLflow ({exc}); nothing pruned: "
                            f"repair the store ({workspace.tracking_uri}) and prune again") from exc
    for alias, version in held.items():
        why[int(version)] = f"holds the {alias} alias"
    return why


def _runs(workspace: Workspace) -> dict[tuple[str, str], _Run]:
    from mlrunway.local.jobs import LocalJobs

    jobs = LocalJobs(workspace)
    runs: dict[tuple[str, str], _Run] = {}
    for folder in sorted(workspace.jobs.iterdir()) if workspace.jobs.is_dir() else []:
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        prefix, key = run_of(folder.name)
        run = runs.setdefault((prefix, key), _Run(prefix, key))
        run.jobs.append(folder)
        try:  # read as every reader reads a job (reconciled: a job whose supervisor died is ended first)
            info = jobs.get(folder.name)
        except NotFound:  # a submit under way, its folder not yet in place
            run.open_job = run.open_job or f"{folder.name} is being submitted"
            continue
        run.started = min(run.started, info.created or 0.0)
        if info.damaged or (info.error and info.error.startswith(f"job folder {folder}")):  # no evidence it ended
            run.open_job = run.open_job or f"{folder.name}'s state is unreadable"
        elif not info.status.is_terminal():
            run.open_job = run.open_job or f"{folder.name} is {info.status.value}"
    return runs


def _deployed(workspace: Workspace) -> dict[tuple[str, int], str]:
    served: dict[tuple[str, int], str] = {}
    for folder in sorted(workspace.endpoints.iterdir()) if workspace.endpoints.is_dir() else []:
        if not (folder / "endpoint.json").exists():
            continue
        try:
            state = records.read(folder / "endpoint.json", "restore it")
        except (OSError, records.DamagedRecord) as exc:  # what it serves is unknown: nothing may go
            raise MlrunwayError(f"endpoint {folder.name}: its state cannot be read ({exc}); nothing pruned: "
                                "restore endpoint.json or delete the endpoint, and prune again") from exc
        for deployment in state.get("deployments", {}).values():
            name, _, version = str(deployment.get("model", "")).rpartition(":")
            if name and version.isdigit():
                served[(name, int(version))] = f"deployment {folder.name}/{deployment['name']} serves it"
    return served


def plan(workspace: Workspace, policy: RetentionPolicy, reports: Path, *, now: float | None = None) -> PrunePlan:
    """What pruning ``workspace`` by ``policy`` removes, and what it keeps though the numbers pass it by: the
    runs, then the model versions, then the captures; the reports folder's part by its layout
    (:meth:`~mlrunway.ledger.reports.ReportsFolder.plan`), told which runs and versions go and which runs stay."""
    now = time.time() if now is None else now
    result = PrunePlan(policy)
    runs = _runs(workspace)
    keep_runs = _kept_runs(runs, policy)
    versions, reasons, newest = _versions(workspace, policy, _deployed(workspace))
    for version, why in reasons.items():  # the run that produced each protected version (an export's: its source's)
        if _source_model(versions.get(version, {})) in reasons:
            continue
        run_key = _run_of_version(versions, version)
        if run_key in runs and not keep_runs.get(run_key):
            keep_runs[run_key] = f"it produced {version[0]}:{version[1]} ({why})"
    result.kept.update({f"run {runs[held].name}": why for held, why in keep_runs.items() if why})
    gone_runs = _plan_runs(workspace, policy, runs, keep_runs, result)
    gone_versions = _plan_versions(workspace, policy, versions, reasons, newest, keep_runs, result)
    result.removed += _plan_captures(workspace, policy, now)
    result.removed += ReportsFolder(reports).plan(
        policy, keep={runs[k].report: why or "one of the last runs of its prefix" for k, why in keep_runs.items()},
        gone_runs=gone_runs, gone_versions=gone_versions, now=now)
    return result


def _kept_runs(runs: dict[tuple[str, str], _Run], policy: RetentionPolicy) -> dict[tuple[str, str], str]:
    """Each prefix's last ``keep_runs`` runs ("": the policy's numbers keep it) and every open run (why)."""
    keep_runs: dict[tuple[str, str], str] = {}
    by_prefix: dict[str, list[_Run]] = {}
    for run in runs.values():
        by_prefix.setdefault(run.prefix, []).append(run)
    for prefix_runs in by_prefix.values():
        prefix_runs.sort(key=lambda r: r.started, reverse=True)
        for run in prefix_runs[:policy.keep_runs]:
            keep_runs[(run.prefix, run.key)] = ""
    for run in runs.values():
        if run.open_job and (run.prefix, run.key) not in keep_runs:
            keep_runs[(run.prefix, run.key)] = f"a job has not ended ({run.open_job})"
    return keep_runs


def _versions(workspace: Workspace, policy: RetentionPolicy, served: dict[tuple[str, int], str]) -> \
        tuple[dict[tuple[str, int], dict[str, Any]], dict[tuple[str, int], str], set[tuple[str, int]]]:
    """Every model version's properties, why each protected one stays (an alias it holds or held, a damaged
    record, a deployment serving it, an export of it that stays), and each model's newest ``keep_versions``."""
    versions: dict[tuple[str, int], dict[str, Any]] = {}  # (model, version): its properties
    reasons: dict[tuple[str, int], str] = {}
    newest: set[tuple[str, int]] = set()
    for model in sorted(workspace.models.iterdir()) if workspace.models.is_dir() else []:
        numbers = sorted(int(p.name) for p in model.iterdir() if p.name.isdigit())
        for number, why in _aliased(workspace, model.name).items() if numbers else ():
            reasons[(model.name, number)] = why
        newest |= {(model.name, n) for n in numbers[-policy.keep_versions:]}
        for number in numbers:
            record = records.read_version(model / str(number), model.name, number)
            versions[(model.name, number)] = record.properties
            if record.damaged:  # what it is, and what came from it, cannot be known: it stays
                reasons[(model.name, number)] = f"its record is damaged ({record.error})"
            if (model.name, number) in served:
                reasons.setdefault((model.name, number), served[(model.name, number)])
    for (name, number), why in list(reasons.items()):  # an exported version's source stays with it
        source = _source_model(versions.get((name, number), {}))
        if source in versions and source not in reasons:
            reasons[source] = f"{name}:{number} was exported from it ({why})"
    return versions, reasons, newest


def _plan_runs(workspace: Workspace, policy: RetentionPolicy, runs: dict[tuple[str, str], _Run],
               keep_runs: dict[tuple[str, str], str], result: PrunePlan) -> dict[str, str]:
    """Each run not kept: its jobs and their MLflow runs into ``result``; return its report folder's name: why."""
    gone: dict[str, str] = {}
    for (prefix, key), run in sorted(runs.items()):
        if (prefix, key) in keep_runs:
            continue
        reason = f"older than the last {policy.keep_runs} runs of {prefix or 'jobs outside a DAG'}"
        for job in run.jobs:
            result.removed.append(Pruned("job", job.name, reason, size_of(job)))
            run_id = _run_id(job)
            if run_id:
                result.removed.append(Pruned("mlflow_run", run_id, f"job {job.name}'s; {reason}",
                                             size_of(workspace.root / "artifacts" / run_id)))
        if run.prefix:
            gone[run.report] = reason
    return gone


def _plan_versions(workspace: Workspace, policy: RetentionPolicy, versions: dict[tuple[str, int], dict[str, Any]],
                   reasons: dict[tuple[str, int], str], newest: set[tuple[str, int]],
                   keep_runs: dict[tuple[str, str], str], result: PrunePlan) -> tuple[tuple[str, int, str], ...]:
    """Each version past its model's newest ``keep_versions`` that nothing protects into ``result``; return them."""
    gone = []
    for name, number in sorted(versions):
        if (name, number) in newest:
            continue
        run_key = _run_of_version(versions, (name, number))
        why = reasons.get((name, number)) or (f"its run {'-'.join(run_key)} is kept" if run_key in keep_runs else "")
        if why:
            result.kept[f"model {name}:{number}"] = why
            continue
        reason = f"older than the newest {policy.keep_versions} versions of {name}"
        size = size_of(workspace.models / name / str(number)) + \
            size_of(workspace.root / "artifacts" / "model-registry" / name / str(number))
        result.removed.append(Pruned("model_version", f"{name}:{number}", reason, size))
        gone.append((name, number, reason))
    return tuple(gone)


def _plan_captures(workspace: Workspace, policy: RetentionPolicy, now: float) -> list[Pruned]:
    """The capture hours older than ``capture_days``."""
    cutoff = now - policy.capture_days * 86400
    captures = workspace.root / "modelDataCollector"
    return [Pruned("capture", str(hour.relative_to(captures)), f"captured over {policy.capture_days:g} days ago",
                   size_of(hour)) for hour in _capture_hours(captures)
            if _utc("/".join(hour.parts[-4:]), "%Y/%m/%d/%H") + 3600 <= cutoff]


def _source_model(props: dict[str, Any]) -> tuple[str, int] | None:
    name, _, number = str(props.get("source_model", "")).rpartition(":")
    return (name, int(number)) if name and number.isdigit() else None


def _run_of_version(versions: dict[tuple[str, int], dict[str, Any]], version: tuple[str, int]) -> tuple[str, str]:
    """The run that produced ``version``: its sweep's (or job's), or, for an exported version, its source's."""
    props = versions.get(version, {})
    source = _source_model(props)
    if source is not None and source != version:
        props = versions.get(source, {})
    job = props.get("sweep") or props.get("source_job")
    return run_of(str(job)) if job else ("", "")


def _utc(text: str, layout: str) -> float:
    return float(calendar.timegm(time.strptime(text, layout)))


def _run_id(job: Path) -> str | None:
    try:
        run_id = records.read(job / "status.json", "").get("mlflow_run_id")
    except (OSError, records.DamagedRecord):
        return None
    return str(run_id) if run_id else None


def _capture_hours(root: Path) -> list[Path]:
    """``<endpoint>/<deployment>/<collection>/yyyy/MM/dd/HH`` folders under ``root`` (the rolling rate's
    minute and day partitions are kept by their hour and day folders)."""
    found = []
    for day in sorted(root.glob("*/*/*/[0-9]*/[0-9]*/[0-9]*")) if root.is_dir() else []:
        for hour in sorted(day.iterdir()):
            if hour.is_dir() and _CAPTURE_HOUR.match("/".join(hour.parts[-4:])):
                found.append(hour)
    return found


def prune(workspace: Workspace, policy: RetentionPolicy, reports: Path, *, dry_run: bool = False,
          now: float | None = None) -> PrunePlan:
    """Plan, and unless ``dry_run`` remove, what ``policy`` lets go of."""
    result = plan(workspace, policy, reports, now=now)
    result.dry_run = dry_run
    if dry_run:
        return result
    from mlrunway.local import mlflow_registry, tracking

    run_ids = [item.name for item in result.removed if item.kind == "mlflow_run"]
    if run_ids:
        tracking.delete_runs(workspace, run_ids)
    for item in result.removed:
        if item.kind == "job":
            shutil.rmtree(workspace.jobs / item.name, ignore_errors=True)
        elif item.kind == "report":
            ReportsFolder(reports).remove(item)
        elif item.kind == "capture":
            shutil.rmtree(workspace.root / "modelDataCollector" / item.name, ignore_errors=True)
        elif item.kind == "model_version":
            name, _, number = item.name.rpartition(":")
            with locked(workspace.models / name / ".lock"):
                mlflow_registry.delete_version(workspace, name, int(number))
                shutil.rmtree(workspace.models / name / number, ignore_errors=True)
    _remove_empty(workspace.root / "modelDataCollector")
    log.info("Pruned %s: %s", workspace.root, result.summary())
    return result


def _remove_empty(root: Path) -> None:
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:
            continue
