"""Named jobs on a Ray cluster, through its Jobs API: the job's name (behind the connection's namespace) is Ray's
``submission_id``, so the operators' re-attach by name finds the same Ray job after a retry or a restart.

Every job has a record on the shared storage, ``<storage>/<namespace>/jobs/<name>/``: ``job.json`` (what was
submitted, written before the submit), ``outputs/`` (the job's ``./outputs`` and its named outputs),
``started.json`` and ``outcome.json`` (written by the job's entry, :mod:`mlrunway.ray.entry`), ``cancel.json`` (why
it was canceled; the first reason stands). So a job the cluster no longer knows (its head restarted without GCS
fault tolerance) reads its recorded outcome, or Failed "lost with the head", never NotFound (which would make a
retry submit it again).
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.protocol import Jobs, Models
from mlrunway.backend.snapshot import check_size, snapshot_files
from mlrunway.backend.types import JobInfo, JobStatus, SweepResult, Usage
from mlrunway.errors import NotFound, SpecError, Unavailable
from mlrunway.locks import locked
from mlrunway.ray import closure, distribution, entry
from mlrunway.ray.client import PACKAGE_LIMIT, JobsApi, RayApiError, zip_folder
from mlrunway.ray.connection import RayConnection
from mlrunway.ray.preflight import check_connection
from mlrunway.ray.tracking import Tracking
from mlrunway.specs.command import resolve_command
from mlrunway.specs.job import CommandJobSpec, Input
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep import record as sweep_record

__all__ = ["RAY_STATUS", "RayJobs", "write_record"]

# Ray's job statuses, as every backend reports them.
RAY_STATUS = {"PENDING": JobStatus.QUEUED, "RUNNING": JobStatus.RUNNING, "SUCCEEDED": JobStatus.COMPLETED,
              "FAILED": JobStatus.FAILED, "STOPPED": JobStatus.CANCELED}
SWEEP_TIMEOUT_MARGIN_S = 120.0  # the controller ends a sweep at its timeout; the job's own limit is a net behind it
MAX_CONTROLLERS = 20  # a sweep's controller resubmitted more often than this is left Failed: something kills it
TOKEN_FILE = ".token"  # <storage>/<namespace>/.token, mode 0600: the controller's way to the Jobs API
CONTROLLER = "mlrunway.ray.sweep_controller"
MODEL_URI = "models:/"  # a registered version as a job's input (ModelVersion.path)
CANCEL_WAIT_S = 60.0  # a stopped job is terminal within seconds (Ray's stop: SIGTERM, SIGKILL 3 s later)
LOG_TAIL = 20  # lines of a failed job's log in its error


def _write(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(data, sort_keys=True))
    os.replace(temporary, path)


def write_record(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole (aside, then renamed into place)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text)
    os.replace(temporary, path)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"damaged": f"{path} cannot be read; restore it or cancel the job"}
    return data if isinstance(data, dict) else {"damaged": f"{path} is not a record; restore it or cancel the job"}


class RayJobs(Jobs):
    """The jobs one Airflow (one namespace) runs on one Ray cluster."""

    wait_poll_s = 1.0

    def __init__(self, connection: RayConnection, api: JobsApi | None = None, *, models: Models | None = None,
                 folder: str = "jobs") -> None:
        self.connection = connection
        self.folder = folder  # "jobs": the team's; "serving": the endpoints' servers and provisionings
        self.models = models  # where a ``models:/<name>/<version>`` input is downloaded from
        self.api = api or JobsApi(connection.address, connection.token)
        self.tracking = Tracking(connection.tracking_uri)
        self.root = Path(connection.storage) / connection.namespace

    # -- where things are ----------------------------------------------------------------------------
    def record(self, name: str) -> Path:
        return self.root / self.folder / name

    def submission_id(self, name: str) -> str:
        """Ray's id of job ``name``: the namespace, then the name (Ray's ids are cluster-wide); the endpoints' jobs
        have ``serving.`` before the name."""
        prefix = "" if self.folder == "jobs" else f"{self.folder}."
        return f"{self.connection.namespace}.{prefix}{name}"

    # -- submit ----------------------------------------------------------------------------------------
    def validate(self, spec: CommandJobSpec) -> None:
        """What ``submit`` would refuse, before any job: an unknown profile or environment, a distribution the cluster
        cannot run or its nodes could never place (:mod:`mlrunway.ray.distribution`), a missing code folder or one
        over Ray's package limit, a missing input; and, once per connection, that the cluster, the storage and the
        tracking server answer (:mod:`mlrunway.ray.preflight`)."""
        check_connection(self.connection)
        profile_name, profile = self.connection.profile(spec.compute)
        self.connection.environment(spec.environment)
        launch = distribution.plan(spec, profile_name, profile, "validate")
        if launch is not None and not self.connection.autoscaling:
            why = distribution.fits(launch, self.api.nodes())
            if why is not None:
                raise check.fail("command_job.instance_count" if spec.instance_count > 1 else "command_job.compute",
                                 f"the cluster could never place this job: {why}",
                                 "lower instance_count or process_count_per_instance, name a smaller compute "
                                 "profile, or add nodes (a cluster that adds nodes on demand: set the connection's "
                                 "autoscaling to true)")
        code = _folder("command_job.code", spec.code)
        check_size("command_job.code", code, snapshot_files(code, exclude=[self.connection.storage]),
                   max_mb=PACKAGE_LIMIT / 2**20)
        for name, value in spec.inputs.items():
            if isinstance(value, Input) and value.path.startswith(MODEL_URI):
                model, _, version = value.path.removeprefix(MODEL_URI).partition("/")
                try:
                    if self.models is None:
                        raise NotFound("this backend has no registry to read models from")
                    self.models.get(model, version or None)
                except NotFound as exc:
                    raise check.fail(f"command_job.inputs.{name}", f"{value.path!r}: {exc}",
                                     "name a registered model's version") from None
            elif isinstance(value, Input):
                path = Path(value.path).expanduser()
                if not (path.is_dir() if value.type == "uri_folder" else path.is_file()):
                    raise check.fail(f"command_job.inputs.{name}", f"{value.type} {value.path!r} does not exist",
                                     "pass an existing path (on the shared storage, or one mlrunway copies there)")

    def submit(self, name: str, spec: CommandJobSpec, *, parent_run_id: str | None = None) -> JobInfo:
        """Submit ``spec`` as job ``name``, or return the job already under that name."""
        check.job_name("job.name", name)
        with contextlib.suppress(NotFound):
            return self.get(name)
        self.validate(spec)
        return self._submit(name, "command", spec, parent_run_id)

    def request_cancel(self, name: str, reason: str) -> None:
        """Ask Ray to stop the job, without waiting; the first reason given stands."""
        record = self.record(name)
        if not (record / "cancel.json").exists():
            _write(record / "cancel.json", {"reason": reason, "at": time.time()})
        with contextlib.suppress(NotFound):
            self.api.stop(self._job(name)["submission_id"])

    def lost(self, name: str) -> bool:
        """Whether the job ended Failed without its entry recording an outcome (its node or the head died), and
        was not canceled: not a failure of its own."""
        info = self.get(name)
        outcome = _read(self.record(name) / "outcome.json") or {}
        return info.status is JobStatus.FAILED and (bool(outcome.get("lost")) or "exit_code" not in outcome) \
            and not (self.record(name) / "cancel.json").exists()

    def submit_internal(self, name: str, spec: CommandJobSpec, *, py_modules: list[str],
                        kept: bool = False) -> JobInfo:
        """Submit mlrunway's own job ``name`` (an endpoint's server or provisioning: its code is ``py_modules``),
        with its profile's resources and no MLflow run; or return the job already under that name. A ``kept`` job
        (an endpoint's server) is run again on another node when its node is lost
        (:func:`mlrunway.ray.distribution.kept`)."""
        check.job_name("job.name", name)
        with contextlib.suppress(NotFound):
            return self.get(name)
        return self._submit(name, "serving", spec, None, py_modules=py_modules, tracked=False, kept=kept)

    def _submit(self, name: str, kind: str, spec: CommandJobSpec, parent_run_id: str | None,
                extra: dict[str, Any] | None = None, *, py_modules: list[str] | None = None,
                resources: dict[str, Any] | None = None, files: dict[str, dict[str, Any]] | None = None,
                tracked: bool = True, kept: bool = False) -> JobInfo:
        record = self.record(name)
        profile_name, profile = self.connection.profile(spec.compute)
        environment = self.connection.environment(spec.environment)
        inputs = {key: replace(value, path=self.staged(value)) if isinstance(value, Input) else value
                  for key, value in spec.inputs.items()}
        outputs = {out: record / "outputs" / out for out in spec.outputs}
        argv = resolve_command(spec.command, inputs, outputs, python=None)
        code = _folder("command_job.code", spec.code)
        experiment_id, run_id = self.tracking.start_run(name, spec.experiment_name, parent_run_id) if tracked \
            else (None, None)
        job = {"name": name, "kind": kind, "submission_id": self.submission_id(name), "spec": spec.to_dict(),
               "argv": argv, "profile": profile_name, "created": time.time(), "experiment_id": experiment_id,
               "run_id": run_id, **(extra or {})}
        timeout = "-" if spec.timeout is None else f"{spec.timeout:g}"
        env_vars = {**(environment.env_vars if environment else {}), **spec.environment_variables,
                    "MLFLOW_TRACKING_URI": self.connection.tracking_uri}
        if run_id is not None:
            env_vars |= {"MLFLOW_RUN_ID": run_id, "MLFLOW_EXPERIMENT_ID": str(experiment_id)}
        launch = distribution.kept(profile, job["submission_id"]) if kept \
            else distribution.plan(spec, profile_name, profile, job["submission_id"])
        shipped = {entry.NAME: Path(entry.__file__).read_bytes()}
        if launch is not None:  # its ranks hold the resources; the driver (the entry) asks for none
            resources, files = {"entrypoint_num_cpus": 0}, {**(files or {}), distribution.LAUNCH: launch}
            job["processes"] = distribution.processes(spec)
            # A package of its own (the plan names the job): Ray shares a working_dir between jobs of the same
            # content, and a distributed job's driver and actors setting it up again deleted it under another job
            # starting from it ("can't open file '_mlrunway_entry.py'", seen on 2.60).
            shipped |= {entry.RANKS: Path(entry.__file__).with_name("ranks.py").read_bytes(),
                        f"_mlrunway_{distribution.LAUNCH}": json.dumps(launch, sort_keys=True).encode()}
        package = zip_folder(code, snapshot_files(code, exclude=[self.connection.storage]), extra=shipped)
        runtime_env = {**(environment.runtime_env() if environment else {}), "working_dir": self.api.upload(package),
                       "env_vars": env_vars, **({"py_modules": py_modules} if py_modules else {})}
        job["body"] = {"entrypoint": shlex.join(["python", entry.NAME, str(record), timeout, "--", *argv]),
                       "runtime_env": runtime_env,
                       "metadata": {"mlrunway.job": name, "mlrunway.kind": kind,
                                    "mlrunway.namespace": self.connection.namespace},
                       **(profile.entrypoint() if resources is None else resources)}
        if not self._claim(record, job, files or {}):  # another submitter took the name first: its job
            return self.get(name)
        for folder in outputs.values():
            folder.mkdir(parents=True, exist_ok=True)
        self._post(record, job)
        return self.get(name)

    def _post(self, record: Path, job: dict[str, Any]) -> None:
        """Submit the recorded job to Ray under its current submission id."""
        try:
            self.api.submit({**job["body"], "submission_id": job["submission_id"]})
        except RayApiError as exc:
            if "already exists" not in str(exc):  # a submit cut short after Ray took it is that job
                _write(record / "outcome.json", {"status": "Failed", "ended": time.time(), "exit_code": None,
                                                 "error": f"the cluster refused the job: {exc}"})
                raise
        _write(record / "submitted.json", {"at": time.time(), "submission_id": job["submission_id"]})

    def _claim(self, record: Path, job: dict[str, Any], files: dict[str, dict[str, Any]]) -> bool:
        """Write the record (and ``files`` beside it) aside and rename it into place: the name is taken once."""
        record.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=record.parent, prefix=f".{record.name}."))
        try:
            (staging / "outputs").mkdir()
            for file_name, data in files.items():
                _write(staging / file_name, data)
            _write(staging / "job.json", job)
            try:
                staging.rename(record)
            except OSError:
                return False
            return True
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def staged(self, value: Input) -> str:
        """An input's path where every node sees it: itself when on the shared storage, else a copy under
        ``<namespace>/inputs/`` keyed by its path and content's stamp (the same input is copied once); a registered
        model's version (``models:/<name>/<version>``), its files downloaded there once (versions are immutable)."""
        if value.path.startswith(MODEL_URI):
            return self._model_files(value)
        path = Path(value.path).expanduser().resolve()
        storage = Path(self.connection.storage).resolve()
        if path == storage or storage in path.parents:
            return str(path)
        stat = [(str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns)
                for p in sorted(path.rglob("*")) if p.is_file()] if path.is_dir() else \
            [(path.name, path.stat().st_size, path.stat().st_mtime_ns)]
        key = hashlib.sha256(json.dumps([str(path), stat]).encode()).hexdigest()[:16]
        target = self.root / "inputs" / key / path.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = target.with_name(f".{path.name}.{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            (shutil.copytree if path.is_dir() else shutil.copy2)(path, staging)
            os.replace(staging, target)
        return str(target)

    def _model_files(self, value: Input) -> str:
        model, _, version = value.path.removeprefix(MODEL_URI).partition("/")
        assert self.models is not None  # validate refused a models:/ input without a registry
        found = self.models.get(model, version or None)
        target = self.root / "inputs" / "models" / found.name / str(found.version)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{found.version}."))
            try:
                self.models.download(found.name, found.version, staging)
                os.replace(staging, target)
            except OSError:  # another submitter put it there first
                shutil.rmtree(staging, ignore_errors=True)
        if value.type == "uri_file":
            files = [p for p in target.rglob("*") if p.is_file()]
            if len(files) == 1:
                return str(files[0])
        return str(target)

    def submit_sweep(self, name: str, sweep: SweepSpec, *, poll_s: float = 1.0) -> JobInfo:
        """Start a sweep: a Ray job asking for no resources whose driver is mlrunway's controller
        (:mod:`mlrunway.ray.sweep_controller`), shipped as the ``py_modules`` of its import closure; its trials are
        Ray jobs of their own."""
        check.job_name("sweep.name", name)
        with contextlib.suppress(NotFound):
            return self.get(name)
        self.validate(sweep.trial)
        inputs = {key: replace(value, path=self.staged(value)) if isinstance(value, Input) else value
                  for key, value in sweep.trial.inputs.items()}
        sweep = replace(sweep, trial=replace(sweep.trial, code=str(_folder("sweep.trial.code", sweep.trial.code)),
                                             inputs=inputs))
        self._leave_token()
        base, files = closure.package()
        modules = self.api.upload(zip_folder(base, files))
        net = sweep.limits.timeout + SWEEP_TIMEOUT_MARGIN_S if sweep.limits.timeout else None
        empty = self.root / "controller-code"
        empty.mkdir(parents=True, exist_ok=True)
        controller = CommandJobSpec(code=str(empty), command=shlex.join(["python", "-m", CONTROLLER,
                                                                          str(self.record(name))]),
                                    experiment_name=sweep.trial.experiment_name, timeout=net)
        info = self._submit(name, "sweep", controller, None, {"sweep": sweep.to_dict(), "poll_s": poll_s,
                                                                "controllers": [self.submission_id(name)]},
                            py_modules=[modules], resources={"entrypoint_num_cpus": 0},
                            files={"connection.json": self.connection.fields()})
        return info

    def _leave_token(self) -> None:
        """The token where the controller reads it (mode 0600 on the storage), never in a job's environment."""
        if not self.connection.token:
            return
        path = self.root / TOKEN_FILE
        self.root.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != self.connection.token:
            temporary = path.with_name(f".{TOKEN_FILE}.{os.getpid()}")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(self.connection.token)
            os.replace(temporary, path)

    def recover(self, name: str) -> JobInfo:
        """A sweep whose controller ended without its final record and was not canceled (its node died, the head
        restarted, someone stopped its Ray job) is resubmitted under a new id (``<sweep>.c<k>``: Ray refuses an id
        it still holds); the new controller takes the sweep on from its record. Any other job: ``get``."""
        info = self.get(name)
        job = self._job(name)
        record = self.record(name)
        if job.get("kind") != "sweep" or not info.status.is_terminal() or (record / "cancel.json").exists():
            return info
        outcome = _read(record / "outcome.json") or {}
        if outcome.get("timed_out") or (outcome.get("status") in ("Completed", "Failed")
                                        and outcome.get("exit_code") is not None):
            return info  # the controller's own end, or its job's time limit
        with locked(record / ".recover.lock"):  # two waiters (a trigger, a retry) resubmit it once
            job = self._job(name)
            if not (record / "outcome.json").exists() and job.get("recovered_from") is not None \
                    and not self.get(name).status.is_terminal():
                return self.get(name)  # the other waiter resubmitted it
            controllers = list(job.get("controllers", [job["submission_id"]]))
            if len(controllers) > MAX_CONTROLLERS:
                return info
            job = {**job, "submission_id": f"{self.submission_id(name)}.c{len(controllers)}",
                   "controllers": [*controllers, f"{self.submission_id(name)}.c{len(controllers)}"],
                   "recovered_from": info.error}
            for stale in ("outcome.json", "started.json", "submitted.json", "run_closed"):
                (record / stale).unlink(missing_ok=True)
            _write(record / "job.json", job)
            self._post(record, job)
        return self.get(name)

    # -- read --------------------------------------------------------------------------------------------
    def _job(self, name: str) -> dict[str, Any]:
        job = _read(self.record(name) / "job.json")
        if job is None:
            raise NotFound(f"job {name!r} does not exist in namespace {self.connection.namespace!r} of "
                           f"{self.connection.storage}")
        return job

    def get(self, name: str) -> JobInfo:
        job = self._job(name)
        if "damaged" in job:
            return JobInfo(name=name, kind="command", status=JobStatus.FAILED, error=job["damaged"], damaged=True)
        record = self.record(name)
        outcome = _read(record / "outcome.json")
        started = _read(record / "started.json") or {}
        details: dict[str, Any] = {}
        if outcome is None:
            try:
                details = self.api.job(job["submission_id"])
            except NotFound:
                outcome = self._lost(job, record)
        status, error, exit_code, ended, timed_out = self._status(job, record, outcome, details)
        if status.is_terminal():
            self._close_run(job, record, status)
        properties = {"submission_id": job["submission_id"], "profile": job.get("profile")}
        if status in (JobStatus.QUEUED, JobStatus.RUNNING) and "processes" in job and not started:
            status = JobStatus.QUEUED  # its driver waits for the cluster to place its ranks
            properties["waiting"] = "for the cluster to place its process" if job["processes"] == 1 else \
                f"for the cluster to place its {job['processes']} processes, all at once"
        return JobInfo(
            name=name, kind=job["kind"], status=status, exit_code=exit_code, error=error, timed_out=timed_out,
            outputs=str(record / "outputs"), mlflow_run_id=job.get("run_id"), created=job.get("created"),
            # a distributed job starts once placed (its driver's start is not its ranks')
            started=started.get("started") or (None if "processes" in job else _seconds(details.get("start_time"))),
            ended=ended or _seconds(details.get("end_time")), properties=properties)

    def _lost(self, job: dict[str, Any], record: Path) -> dict[str, Any]:
        """The outcome of a job the cluster does not know."""
        if not (record / "submitted.json").exists():
            if time.time() - float(job.get("created", 0)) < 60:  # its submit may be under way
                return {"status": "Queued"}
            error = "its submit was cut short before the cluster took it; a retry submits a new attempt"
        else:
            error = (f"lost with the head: the cluster no longer knows Ray job {job['submission_id']} (its head "
                     "restarted, or the job was deleted) and the job recorded no outcome")
        outcome = {"status": "Failed", "exit_code": None, "ended": time.time(), "error": error, "lost": True}
        _write(record / "outcome.json", outcome)
        return outcome

    def _status(self, job: dict[str, Any], record: Path, outcome: dict[str, Any] | None,
                details: dict[str, Any]) -> tuple[JobStatus, str | None, int | None, float | None, bool]:
        reason = (_read(record / "cancel.json") or {}).get("reason")
        if outcome is not None:
            status = JobStatus(outcome.get("status", "Failed"))
            error = outcome.get("error")
            if status is JobStatus.CANCELED and reason and not outcome.get("timed_out"):
                error = reason
            elif status is JobStatus.FAILED and outcome.get("exit_code") is not None:
                error = f"{error}: {self._tail(job)}"
            return status, error, outcome.get("exit_code"), outcome.get("ended"), bool(outcome.get("timed_out"))
        status = RAY_STATUS.get(str(details.get("status")), JobStatus.FAILED)
        error = None
        if status is JobStatus.CANCELED:
            error = reason or "stopped on the cluster"
        elif status is JobStatus.FAILED:  # before its entry ran (a runtime environment that failed) or killed
            error = f"{details.get('message') or 'failed on the cluster'}: {self._tail(job)}"
        return status, error, details.get("driver_exit_code"), None, False

    def _tail(self, job: dict[str, Any]) -> str:
        try:
            lines = list(self.logs(job["name"]))
        except (Unavailable, RayApiError):
            return "its log cannot be read"
        return "\n".join(lines[-LOG_TAIL:])

    def _close_run(self, job: dict[str, Any], record: Path, status: JobStatus) -> None:
        """End the job's MLflow run where its entry did not (killed, or never started), once."""
        marker = record / "run_closed"
        if marker.exists() or not job.get("run_id"):
            return
        try:
            self.tracking.end_run(job["run_id"], status.value)
        except Unavailable:
            return  # the next read
        marker.touch()

    def list(self, prefix: str = "") -> builtins.list[JobInfo]:
        folder = self.root / self.folder
        if not folder.is_dir():
            return []
        return [self.get(p.name) for p in sorted(folder.iterdir())
                if p.name.startswith(prefix) and not p.name.startswith(".") and (p / "job.json").exists()]

    def cancel(self, name: str, reason: str = "canceled by user") -> JobInfo:
        """Stop the Ray job and wait (up to CANCEL_WAIT_S) until it has ended as recorded and as Ray has it (its
        entrypoint's processes gone); a sweep's trials too. A job already ended is left as it is."""
        info = self.get(name)
        job = self._job(name)
        if not (info.status.is_terminal() and self._ray_ended(job)):
            record = self.record(name)
            if not info.status.is_terminal() and not (record / "cancel.json").exists():
                _write(record / "cancel.json", {"reason": reason, "at": time.time()})
            deadline = time.monotonic() + CANCEL_WAIT_S
            while True:
                with contextlib.suppress(NotFound):
                    self.api.stop(job["submission_id"])
                info = self.get(name)
                if (info.status.is_terminal() and self._ray_ended(job)) or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
        if job.get("kind") == "sweep":  # its controller cancels its trials, unless Ray killed it first
            for trial in self.list(f"{name}_trial_"):
                self.cancel(trial.name, reason)
        return info

    def _ray_ended(self, job: dict[str, Any]) -> bool:
        """Whether Ray holds the job ended (or no longer knows it)."""
        try:
            return str(self.api.job(job["submission_id"]).get("status")) in ("SUCCEEDED", "FAILED", "STOPPED")
        except NotFound:
            return True

    def logs(self, name: str) -> Iterator[str]:
        """What the job printed so far: its entry's copy on the storage (which outlives the head), else Ray's log
        (a job whose entry never ran: its runtime environment failed)."""
        job = self._job(name)
        kept = self.record(name) / entry.LOG
        if kept.exists():
            with open(kept, encoding="utf-8", errors="replace") as handle:
                yield from (line.rstrip("\n") for line in handle)
            return
        try:
            yield from self.api.logs(job["submission_id"]).splitlines()
        except NotFound:  # lost with the head: its log went with it
            return

    # -- tracking ----------------------------------------------------------------------------------------
    def _run(self, name: str) -> str | None:
        return self._job(name).get("run_id")

    def metrics(self, name: str) -> dict[str, float]:
        run_id = self._run(name)
        return self.tracking.latest_metrics(run_id) if run_id else {}

    def metric_history(self, name: str, metric: str) -> tuple[float, ...]:
        run_id = self._run(name)
        return tuple(self.tracking.metric_history(run_id, metric)) if run_id else ()

    def params(self, name: str) -> dict[str, Any]:
        run_id = self._run(name)
        return self.tracking.params(run_id) if run_id else {}

    def log_metrics(self, name: str, metrics: dict[str, float]) -> None:
        run_id = self._run(name)
        if not run_id:
            raise NotFound(f"job {name}: has no MLflow run to log metrics on")
        self.tracking.log_metrics(run_id, metrics)

    def tracking_uri(self) -> str:
        return self.connection.tracking_uri

    def log_artifacts(self, name: str, folder: str | Path, artifact_path: str) -> None:
        run_id = self._run(name)
        if not run_id:
            raise NotFound(f"job {name}: has no MLflow run to keep artifacts in")
        self.tracking.log_artifacts(run_id, str(folder), artifact_path)

    def sweep_result(self, name: str) -> SweepResult:
        """The sweep's record so far, from its controller's ``sweep.json`` (empty until its first write)."""
        info = self.get(name)
        job = self._job(name)
        if job.get("kind") != "sweep":
            raise SpecError(f"job {name}: is a {job.get('kind')} job, not a sweep; pass a sweep job's name")
        spec = SweepSpec.from_dict(job["sweep"])
        data = _read(self.record(name) / "outputs" / sweep_record.FILE)
        if data is not None and "damaged" in data:  # not "Completed with no trials": what it ran is unknown
            return SweepResult(name=name, status=JobStatus.FAILED, objective=spec.objective, error=data["damaged"],
                               damaged=True)
        return sweep_record.result(name, info.status, spec, data, info.error)

    # -- usage (Metered) -----------------------------------------------------------------------------------
    def usage(self, name: str) -> Usage | None:
        """Its start and end (a distributed job's: from its placement), on its profile (the rate card's key), held
        once per process (``instances``: a distributed job's ranks each hold the profile)."""
        info = self.get(name)
        if info.started is None:
            return None
        return Usage(started=info.started, ended=info.ended, size=info.properties.get("profile"),
                     instances=int(self._job(name).get("processes", 1)))

    def trial_usage(self, name: str) -> dict[str, Usage]:
        return {trial.name: usage for trial in self.list(f"{name}_trial_")
                if (usage := self.usage(trial.name)) is not None}

    def planned_usage(self, spec: CommandJobSpec) -> Usage:
        return Usage(size=self.connection.profile(spec.compute)[0], instances=distribution.processes(spec))

    def wait(self, name: str, *, timeout: float | None = None, poll_s: float | None = None,
             on_poll: Callable[[JobInfo], None] | None = None, outage_s: float = 0.0,
             backend: str = "ray") -> JobInfo:
        return super().wait(name, timeout=timeout, poll_s=poll_s, on_poll=on_poll, outage_s=outage_s, backend=backend)


def _folder(field: str, path: str) -> Path:
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise check.fail(field, f"folder {path!r} does not exist", "pass the folder that holds the training script")
    return folder


def _seconds(milliseconds: Any) -> float | None:
    return milliseconds / 1000.0 if isinstance(milliseconds, (int, float)) and milliseconds else None
