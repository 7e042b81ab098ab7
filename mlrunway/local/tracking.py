"""The workspace's MLflow tracking store: every job is one MLflow run, sweep trials nested under the sweep's.

The store is SQLite (MLflow 3's file store is in maintenance mode). It is created once under a lock and put
in WAL mode, so concurrent trials write metrics without 'database is locked' errors or lost rows.

A sweep's controller and every job's supervisor create, read and end runs here without importing MLflow (about 2 s
of a process's start, in front of every trial): plain SQL on the store, for the one schema revision it was checked
against (:data:`SCHEMA_REVISION`; tests hold each statement to what MLflow's own client writes and reads). A store
that does not exist yet, or is at any other revision, goes through MLflow.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mlrunway.local.workspace import Workspace
from mlrunway.locks import locked
from mlrunway.tracking_names import RUN_STATUS, run_tags

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

SCHEMA_REVISION = "dc11669786a5"  # the store's alembic revision under the pinned MLflow; the SQL below is for it
KEPT_CONNECTIONS = 4  # per thread: the stores it used last
_kept = threading.local()


@functools.cache
def client(workspace: Workspace) -> MlflowClient:
    """An MlflowClient on the workspace store (one per process), creating the store the first time."""
    from mlflow.tracking import MlflowClient

    db = workspace.root / "mlflow.db"
    with locked(workspace.root / ".mlflow.lock"):
        if not db.exists():
            _new_store(db)
        tracking = MlflowClient(workspace.tracking_uri)
        tracking.search_experiments(max_results=1)  # migrates a store an older MLflow made
    return tracking


def _new_store(db: Path) -> None:
    """A new workspace's store, in WAL mode: a copy of an empty store that MLflow created and migrated once per
    machine and MLflow version, under the system's temporary folder (MLflow's migrations take 2 to 4 s of CPU; a
    copy, milliseconds). The copy is the empty store as MLflow makes it, but for its Default experiment's artifact
    location: the workspace's ``artifacts/``, where a fresh store's names the working directory; mlrunway's runs
    go to experiments of their own."""
    from mlflow.tracking import MlflowClient

    template = _template()
    if not template.is_file():
        building = template.with_name(f"{template.name}.{os.getpid()}.{threading.get_ident()}.new")
        MlflowClient(f"sqlite:///{building}").search_experiments(max_results=1)
        os.replace(building, template)  # whole or not at all, whoever of several processes gets there first
    _copy(template, db)


def _template() -> Path:
    import tempfile
    from importlib.metadata import version

    return Path(tempfile.gettempdir()) / f"mlrunway-empty-mlflow-{version('mlflow')}.db"


def _copy(template: Path, db: Path) -> None:
    """The empty store as the workspace's, its Default experiment's artifacts under the workspace's ``artifacts/``
    (in the template they name the folder it happened to be made from)."""
    staging = db.with_name(f".{db.name}.new")
    shutil.copyfile(template, staging)
    with contextlib.closing(sqlite3.connect(staging)) as conn, conn:
        conn.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                     ((db.parent / "artifacts").as_uri(),))
    _enable_wal(staging)
    os.replace(staging, db)


def _enable_wal(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def start_run(workspace: Workspace, job_name: str, experiment: str, parent_run_id: str | None) -> tuple[str, str]:
    """Create the job's run, and its experiment if there is none; return (experiment_id, run_id). Plain SQL
    when the store is at :data:`SCHEMA_REVISION`; else MLflow (which creates the store)."""
    tags = run_tags(job_name, parent_run_id)
    _new_store_quickly(workspace)
    quick = _start_run_quickly(workspace, job_name, experiment, tags)
    if quick is not None:
        return quick
    tracking = client(workspace)
    with locked(workspace.root / ".mlflow.lock"):
        found = tracking.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else tracking.create_experiment(
            experiment, artifact_location=artifact_root(workspace).as_uri())
    run = tracking.create_run(experiment_id, tags=tags, run_name=job_name)
    return experiment_id, run.info.run_id


def _new_store_quickly(workspace: Workspace) -> None:
    """A new workspace's store copied from the machine's empty one where it exists, without importing MLflow: the
    first jobs of a new workspace, started together, each imported MLflow to create it (seconds of CPU each;
    ten trivial jobs took 22 s to start on 2 cores)."""
    db = workspace.root / "mlflow.db"
    if db.exists():
        return
    template = _template()
    if not template.is_file():
        return
    with locked(workspace.root / ".mlflow.lock"):
        if not db.exists():
            _copy(template, db)


@contextlib.contextmanager
def _store(workspace: Workspace) -> Iterator[sqlite3.Connection | None]:
    """A connection to the store when it exists at :data:`SCHEMA_REVISION` (one transaction, committed on exit),
    else None. Kept open for the next call from this thread (a sweep's controller reads each running trial's
    metric several times a second; opening a connection parses MLflow's schema each time): by the file's
    identity, so a store deleted and created again gets a new one, and by process, so none crosses a fork."""
    db = workspace.root / "mlflow.db"
    try:
        st = os.stat(db)
    except FileNotFoundError:
        yield None
        return
    key = (str(db), st.st_dev, st.st_ino, os.getpid())
    kept: OrderedDict[tuple[str, int, int, int], sqlite3.Connection] = _kept.__dict__.setdefault("conns", OrderedDict())
    conn = kept.pop(key, None)
    if conn is None:
        conn = sqlite3.connect(db, timeout=30)
        try:
            revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.Error:  # created but not yet migrated
            revision = None
        if revision is None or revision[0] != SCHEMA_REVISION:
            conn.close()
            yield None
            return
    kept[key] = conn
    while len(kept) > KEPT_CONNECTIONS:
        kept.popitem(last=False)[1].close()
    with conn:
        yield conn


def artifact_root(workspace: Workspace) -> Path:
    """The artifact location of the workspace's experiments: MLflow's artifact store, runs' artifacts and the
    registry's copies of model versions."""
    return workspace.root / "artifacts"


def _start_run_quickly(workspace: Workspace, job_name: str, experiment: str,
                       tags: dict[str, str]) -> tuple[str, str] | None:
    """The rows ``MlflowClient.create_run`` writes (``SqlAlchemyStore.create_run``: the run, RUNNING, user
    "unknown", source UNKNOWN, artifacts under the experiment's location; its tags), and the experiment's as
    ``create_experiment`` writes it when there is none; None where MLflow must (a deleted experiment: it says so)."""
    with _store(workspace) as conn:
        if conn is None:
            return None
        now = int(time.time() * 1000)
        conn.execute("INSERT OR IGNORE INTO experiments (name, artifact_location, lifecycle_stage, creation_time, "
                     "last_update_time, workspace) VALUES (?, ?, 'active', ?, ?, 'default')",
                     (experiment, artifact_root(workspace).as_uri(), now, now))
        found = conn.execute("SELECT experiment_id, artifact_location FROM experiments WHERE name = ? AND "
                             "workspace = 'default' AND lifecycle_stage = 'active'", (experiment,)).fetchone()
        if found is None:
            return None
        experiment_id, location = found
        import uuid  # here: a supervisor that only ends its run does not pay its import

        run_id = uuid.uuid4().hex
        conn.execute("INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, "
                     "start_time, end_time, source_version, lifecycle_stage, artifact_uri, experiment_id, "
                     "deleted_time) VALUES (?, ?, 'UNKNOWN', '', '', 'unknown', 'RUNNING', ?, NULL, '', 'active', ?, "
                     "?, NULL)", (run_id, job_name, now,
                                  f"{location.rstrip('/')}/{run_id}/artifacts", experiment_id))
        conn.executemany("INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?)",
                         [(key, value, run_id) for key, value in tags.items()])
    return str(experiment_id), run_id


def resume_run(workspace: Workspace, run_id: str) -> tuple[str, str]:
    """Mark a recovered job's run RUNNING again; return (experiment_id, run_id)."""
    tracking = client(workspace)
    tracking.update_run(run_id, status="RUNNING")
    return tracking.get_run(run_id).info.experiment_id, run_id


def end_run(workspace: Workspace, run_id: str, status: str) -> None:
    """Close the run with the MLflow status matching the job's, overriding what the script's atexit set."""
    client(workspace).set_terminated(run_id, RUN_STATUS.get(status, "FAILED"))


def end_run_quickly(workspace: Workspace, run_id: str, status: str) -> None:
    """:func:`end_run` without importing MLflow (seconds of a job's supervisor, at the end of every trial): the
    one row ``MlflowClient.set_terminated`` updates in the SQLite store (``runs.status`` and ``end_time``, in
    MLflow's schema since 1.x; a test holds it to what MlflowClient then reads). Raises when no run matched."""
    with contextlib.closing(sqlite3.connect(workspace.root / "mlflow.db", timeout=30)) as conn, conn:
        changed = conn.execute("UPDATE runs SET status = ?, end_time = ? WHERE run_uuid = ?",
                               (RUN_STATUS.get(status, "FAILED"), int(time.time() * 1000), run_id)).rowcount
    if changed != 1:
        raise LookupError(f"MLflow run {run_id} is not in {workspace.root / 'mlflow.db'}")


def log_artifacts(workspace: Workspace, run_id: str, folder: Path, artifact_path: str) -> None:
    """Copy ``folder``'s files under ``artifact_path`` among the run's artifacts, as ``MlflowClient.log_artifacts``
    does for a run whose artifacts are local files (``LocalArtifactRepository``: a copy into the run's
    ``artifact_uri``); through MLflow for any other store or location."""
    with _store(workspace) as conn:
        found = None if conn is None else conn.execute("SELECT artifact_uri FROM runs WHERE run_uuid = ?",
                                                       (run_id,)).fetchone()
    if found is not None and found[0].startswith("file://"):
        from urllib.parse import unquote, urlparse

        target = Path(unquote(urlparse(found[0]).path)) / artifact_path
        shutil.copytree(folder, target, dirs_exist_ok=True)
        return
    client(workspace).log_artifacts(run_id, str(folder), artifact_path)


def log_metrics(workspace: Workspace, run_id: str, metrics: dict[str, float]) -> None:
    """Log ``metrics`` on the run (an ended run too: what is known of it once it ended, e.g. its cost)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    client(workspace).log_batch(run_id, metrics=[Metric(key, float(value), now, 0) for key, value in metrics.items()])


def metric_history(workspace: Workspace, run_id: str, key: str) -> list[float]:
    """Values of ``key`` in logging order (step, then time), as ``MlflowClient.get_metric_history`` reads them."""
    return metric_histories(workspace, [run_id], key)[run_id]


def metric_histories(workspace: Workspace, run_ids: Collection[str], key: str) -> dict[str, list[float]]:
    """:func:`metric_history` of each run, in one query (a sweep's controller reads every running trial's at
    each wake)."""
    histories: dict[str, list[float]] = {run_id: [] for run_id in run_ids}
    with _store(workspace) as conn:
        if conn is not None:
            marks = ", ".join("?" * len(histories))
            rows = conn.execute(f"SELECT run_uuid, value, is_nan FROM metrics WHERE run_uuid IN ({marks}) AND key = ? "
                                "ORDER BY run_uuid, step, timestamp", (*histories, key))
            for run_id, value, is_nan in rows:
                histories[run_id].append(math.nan if is_nan else float(value))
            return histories
    for run_id in histories:
        metrics = client(workspace).get_metric_history(run_id, key)
        histories[run_id] = [m.value for m in sorted(metrics, key=lambda m: (m.step, m.timestamp))]
    return histories


def latest_metrics(workspace: Workspace, run_id: str) -> dict[str, float]:
    """Each metric's latest value (highest step, then time), as ``MlflowClient.get_run(...).data.metrics``."""
    with _store(workspace) as conn:
        if conn is not None:
            rows = conn.execute("SELECT key, value, is_nan FROM latest_metrics WHERE run_uuid = ?", (run_id,))
            return {key: math.nan if is_nan else float(value) for key, value, is_nan in rows}
    return dict(client(workspace).get_run(run_id).data.metrics)


def run_of_job(workspace: Workspace, job_name: str) -> str | None:
    """The MLflow run of job ``job_name`` (the run tagged ``mlrunway.job``, the newest when a retry made two); None
    when there is none or no store yet. Plain SQL at :data:`SCHEMA_REVISION`, else MLflow's ``search_runs``."""
    if not (workspace.root / "mlflow.db").exists():
        return None
    with _store(workspace) as conn:
        if conn is not None:
            found = conn.execute("SELECT tags.run_uuid FROM tags JOIN runs ON runs.run_uuid = tags.run_uuid WHERE "
                                 "tags.key = 'mlrunway.job' AND tags.value = ? ORDER BY runs.start_time DESC LIMIT 1",
                                 (job_name,)).fetchone()
            return str(found[0]) if found else None
    tracking = client(workspace)
    experiments = [e.experiment_id for e in tracking.search_experiments()]
    runs = tracking.search_runs(experiments, f"tags.`mlrunway.job` = '{job_name}'", max_results=1,
                                order_by=["attributes.start_time DESC"]) if experiments else []
    return runs[0].info.run_id if runs else None


def delete_runs(workspace: Workspace, run_ids: Collection[str]) -> None:
    """Remove runs for good, as ``mlflow gc`` does (``delete_run``, then the store's ``_hard_delete_run``: the
    run's rows, metrics, params and tags), and their artifacts where they are the workspace's files. A run already
    gone is skipped."""
    from mlflow.exceptions import MlflowException

    tracking = client(workspace)
    store = tracking._tracking_client.store
    root = artifact_root(workspace).resolve()
    for run_id in run_ids:
        try:
            run = tracking.get_run(run_id)
        except MlflowException:
            continue
        if run.info.lifecycle_stage != "deleted":
            tracking.delete_run(run_id)
        store._hard_delete_run(run_id)
        uri = run.info.artifact_uri or ""
        if uri.startswith("file://"):
            from urllib.parse import unquote, urlparse

            folder = Path(unquote(urlparse(uri).path)).parent  # <location>/<run_id>/artifacts
            if folder.name == run_id and root in folder.resolve().parents:
                shutil.rmtree(folder, ignore_errors=True)
