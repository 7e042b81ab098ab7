"""A scripted, in-memory backend for tests, shipped like httpx's ``MockTransport``.

It satisfies :class:`~mlrunway.backend.protocol.Backend` and starts no process: a test scripts what each job
goes through and what the endpoint answers, runs the real operators or core functions over it, and reads back
what was asked of it::

    fake = FakeBackend.named("t")                      # an Airflow connection of type mlrunway_fake, extra {"name": "t"}
    fake.jobs.script("run-train", JobStatus.RUNNING, JobStatus.COMPLETED)   # one status per get(), the last stays
    fake.jobs.set_trials("run-sweep", [TrialInfo(...), ...])
    fake.jobs.outages["run-train"] = 2                 # its next two reads bring no news (Unavailable)
    fake.endpoints.scorer = lambda payload, deployment: '{"predictions": [...]}'

Models are real files under a scratch folder, so export and download behave as on the other backends.
"""

from __future__ import annotations

import builtins
import json
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from mlrunway import check
from mlrunway.backend.protocol import Backend, Capabilities, Endpoints, Jobs, Metered, Models, Priced, Rollout
from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import (
    DeploymentInfo,
    DeploymentMetrics,
    DeploymentSettings,
    EndpointInfo,
    EndpointSettings,
    JobInfo,
    JobStatus,
    ModelVersion,
    ProvisioningState,
    SweepResult,
    TrialInfo,
    Usage,
)
from mlrunway.errors import EndpointError, NotFound, SpecError, Unavailable
from mlrunway.specs.job import ROLE_TAG, CommandJobSpec
from mlrunway.specs.sweep import SweepSpec

__all__ = ["FakeBackend"]


class FakeBackend:
    """:param root: scratch folder for job outputs and model files (a new temporary one by default)."""

    kind = "fake"
    capabilities = Capabilities(poll_interval_s=0.1, metrics_lag_s=0.0)
    endpoint_salt = ""  # its endpoints are its own
    _named: ClassVar[dict[str, FakeBackend]] = {}

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="mlrunway-fake-"))
        if root is None:  # a scratch folder of its own goes with it (or at exit), not left in /tmp
            weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
        self.jobs = FakeJobs(self)
        self.models = FakeModels(self)
        self.endpoints = FakeEndpoints()
        self.rate_card = RateCard()  # what a test prices its scripted usages with

    def rates_for(self, sizes: Iterable[str]) -> RateCard:
        return self.rate_card

    @classmethod
    def named(cls, name: str) -> FakeBackend:
        """The process's fake called ``name``: what a test scripts, the operators' connection finds."""
        return cls._named.setdefault(name, cls())

    @classmethod
    def forget(cls, name: str) -> None:
        cls._named.pop(name, None)

    @classmethod
    def from_connection(cls, fields: dict[str, Any], secret: str | None = None) -> FakeBackend:
        """An ``mlrunway_fake`` connection: its extra ``name`` picks the fake (``default`` without)."""
        return cls.named(str(fields.get("name") or "default"))

    def job_outputs(self, job_name: str) -> str:
        return str(self.root / "jobs" / job_name / "outputs")

    def named_output(self, job_name: str, output: str) -> str:
        return str(Path(self.job_outputs(job_name)) / output)

    def output_folder(self, base: str, path: str) -> AbstractContextManager[Path]:
        return nullcontext(Path(base, path))

    @property
    def reports(self) -> Path:
        return self.root / "reports"


@dataclass
class _Job:
    info: JobInfo
    spec: CommandJobSpec | SweepSpec
    script: list[JobStatus]


class FakeJobs(Jobs):
    """Jobs that walk through scripted statuses, one per ``get``; unscripted ones complete at once. They keep
    no artifacts (not :class:`~mlrunway.backend.protocol.Artifacts`)."""

    wait_poll_s = 0.0

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend
        self.scripts: dict[str, tuple[list[JobStatus], str | None]] = {}
        self.records: dict[str, _Job] = {}
        self.trials: dict[str, list[TrialInfo]] = {}
        self.best: dict[str, str] = {}
        self.logged: dict[str, dict[str, tuple[float, ...]]] = {}
        self.canceled: list[tuple[str, str]] = []
        self.computes: set[str] | None = None  # the workspace's computes, when a test scripts them
        self.usages: dict[str, Usage] = {}  # what each job ran on and how long, when a test scripts it (Metered)
        self.ran: dict[str, tuple[float, float | None]] = {}  # when reads saw each job start and end
        self.validated: list[CommandJobSpec] = []
        self.outages: dict[str, int] = {}  # how many of a job's next reads bring no news (Unavailable), by its name
        # What a command job leaves in its outputs (path -> text): by default a model as the contract asks.
        # (bytes for a binary file, e.g. an inputs .npy).
        self.output_files: dict[str, str | bytes] = {
            "model/signature.json": json.dumps({"file": "model.pt2", "inputs": [
                {"name": "input", "dtype": "float32", "shape": [None, 1, 8, 8]}]}),
            "model/model.pt2": "a torch.export program"}
        # What an export job (tagged mlrunway.role: export) leaves as its parity.json: a passed gate by default; a
        # test sets a refusal ({"passed": False, "error": "ParityError", "message": ...}). Its onnx output is the
        # model input's files with an ONNX signature: no torch runs here.
        self.export_verdict: dict[str, Any] = {"passed": True, "report": {
            "max_abs_diff": 1e-6, "top1_agreement": 1.0, "samples": 8, "inputs": "random inputs", "atol": 1e-5,
            "rtol": 1e-4, "min_top1_agreement": 1.0, "tolerance_used": 0.01}}

    # -- scripting ---------------------------------------------------------------------------------
    def script(self, name: str, *statuses: JobStatus, error: str | None = None) -> None:
        """Job ``name`` (when submitted) reads each status in turn, then stays at the last; ``error`` goes with
        a Failed or Canceled one."""
        self.scripts[name] = (list(statuses), error)

    def set_trials(self, sweep: str, trials: Iterable[TrialInfo], best: str | None = None) -> None:
        """The trials sweep ``sweep`` reports, and the best one it names (as Azure's ``best_child_run_id``);
        each trial is also a job with those metrics."""
        self.trials[sweep] = list(trials)
        if best is not None:
            self.best[sweep] = best
        for trial in self.trials[sweep]:
            self.logged[trial.name] = {**{k: (v,) for k, v in trial.metrics.items()}}

    # -- the protocol ------------------------------------------------------------------------------
    def validate(self, spec: CommandJobSpec) -> None:
        """Refuse a local input path that does not exist, as every backend does, and a compute that is not in
        ``computes`` (when a test scripts the workspace's computes); keep each spec checked in ``validated``."""
        self.validated.append(spec)
        for key, value in spec.inputs.items():
            path = getattr(value, "path", "")
            if path and "://" not in path and not Path(path).exists():
                raise check.fail(f"command_job.inputs.{key}", f"{path!r} does not exist here", "pass an existing path")
        if spec.compute and self.computes is not None and spec.compute not in self.computes:
            raise check.fail("command_job.compute", f"{spec.compute!r} is not a compute of the fake workspace",
                             f"use one of {sorted(self.computes)}")

    def submit(self, name: str, spec: CommandJobSpec) -> JobInfo:
        return self._create(name, "command", spec)

    def submit_sweep(self, name: str, sweep: SweepSpec) -> JobInfo:
        return self._create(name, "sweep", sweep)

    def _create(self, name: str, kind: str, spec: CommandJobSpec | SweepSpec) -> JobInfo:
        check.job_name("job.name", name)
        if name in self.records:
            return self.get(name)
        statuses, error = self.scripts.get(name, ([JobStatus.COMPLETED], None))
        outputs = Path(self.backend.job_outputs(name))
        outputs.mkdir(parents=True, exist_ok=True)
        for relative, text in (self.output_files.items() if kind == "command" else ()):
            (outputs / relative).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                (outputs / relative).write_bytes(text)
            else:
                (outputs / relative).write_text(text)
        if isinstance(spec, CommandJobSpec) and spec.tags.get(ROLE_TAG) == "export":
            self._exported(name, spec)
        if isinstance(spec, CommandJobSpec) and spec.tags.get(ROLE_TAG) == "reference":
            self._referenced(name, spec)
        info = JobInfo(name=name, kind=kind, status=JobStatus.QUEUED, outputs=self.backend.job_outputs(name),
                       error=error)
        self.records[name] = _Job(info, spec, list(statuses))
        return info

    def _exported(self, name: str, spec: CommandJobSpec) -> None:
        """What the export job leaves: its ``onnx`` output and ``report/parity.json`` (:attr:`export_verdict`)."""
        model = spec.inputs["model"]
        onnx = Path(self.backend.named_output(name, "onnx"))
        if self.export_verdict.get("passed"):
            shutil.copytree(Path(getattr(model, "path", str(model))), onnx, dirs_exist_ok=True)
            signature = json.loads((onnx / "signature.json").read_text()) if (onnx / "signature.json").is_file() else {}
            (onnx / "signature.json").write_text(json.dumps({**signature, "format": "onnx", "file": "model.onnx"}))
            (onnx / "model.onnx").write_text("an ONNX model")
        report = Path(self.backend.named_output(name, "report"))
        report.mkdir(parents=True, exist_ok=True)
        signature = json.loads((onnx / "signature.json").read_text()) if (onnx / "signature.json").is_file() else {}
        (report / "parity.json").write_text(json.dumps({"format": 1, "key": _echoed_key(spec), "signature": signature,
                                                        **self.export_verdict}))

    def _referenced(self, name: str, spec: CommandJobSpec) -> None:
        """What the smoke test's reference job leaves in ``answer/answer.json``: the endpoints' scorer's answer to the
        request (as score.py on the same model would give), or its error."""
        request = json.loads(Path(getattr(spec.inputs["request"], "path", "")).read_text())
        try:
            answer: dict[str, Any] = {"status": 200, "body": self.backend.endpoints.scorer(request, None)}
        except Exception as exc:  # noqa: BLE001 - what the scorer raised is the job's error, as score.py's would be
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        folder = Path(self.backend.named_output(name, "answer"))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "answer.json").write_text(json.dumps({"key": _echoed_key(spec), **answer}))

    def get(self, name: str) -> JobInfo:
        if name not in self.records:
            raise NotFound(f"job {name!r} does not exist in the fake backend")
        if self.outages.get(name):
            self.outages[name] -= 1
            raise Unavailable(f"job {name}: the fake service did not answer (a scripted outage)")
        job = self.records[name]
        if job.script:
            status = job.script.pop(0) if len(job.script) > 1 else job.script[0]
            job.info = replace(job.info, status=status)
        if job.info.status is not JobStatus.QUEUED:  # when a read first saw it run, and end (Metered's default)
            started, ended = self.ran.get(name, (time.time(), None))
            self.ran[name] = (started, ended or (time.time() if job.info.status.is_terminal() else None))
        return job.info

    def spec(self, name: str) -> CommandJobSpec | SweepSpec:
        """What job ``name`` was submitted with."""
        return self.records[name].spec

    def list(self, prefix: str = "") -> builtins.list[JobInfo]:
        return [self.get(n) for n in sorted(self.records) if n.startswith(prefix)]

    def cancel(self, name: str, reason: str = "canceled by user") -> JobInfo:
        info = self.get(name)
        if not info.status.is_terminal():
            self.canceled.append((name, reason))
            self.records[name].script = [JobStatus.CANCELED]
            self.records[name].info = replace(info, status=JobStatus.CANCELED, error=reason)
        return self.records[name].info

    def logs(self, name: str) -> builtins.list[str]:
        self.get(name)
        return [f"{name}: {key}={values[-1]}" for key, values in sorted(self.logged.get(name, {}).items())]

    def metrics(self, name: str) -> dict[str, float]:
        return {key: values[-1] for key, values in self.logged.get(name, {}).items() if values}

    def metric_history(self, name: str, metric: str) -> tuple[float, ...]:
        return self.logged.get(name, {}).get(metric, ())

    def params(self, name: str) -> dict[str, Any]:
        return next((dict(t.params) for ts in self.trials.values() for t in ts if t.name == name), {})

    def usage(self, name: str) -> Usage | None:
        """What a test scripted; else this machine, from the read that first saw the job run to the one that saw
        it end (None: it never started)."""
        if name in self.usages:
            return self.usages[name]
        started, ended = self.ran.get(name, (None, None))
        return None if started is None else Usage(started=started, ended=ended)

    def trial_usage(self, name: str) -> dict[str, Usage]:
        return {t.name: self.usages[t.name] for t in self.trials.get(name, ()) if t.name in self.usages}

    def planned_usage(self, spec: CommandJobSpec) -> Usage:
        return Usage()  # this machine, as a test prices its scripted usages

    def sweep_result(self, name: str) -> SweepResult:
        info = self.get(name)
        spec = self.records[name].spec
        if not isinstance(spec, SweepSpec):
            raise SpecError(f"job {name}: is a command job, not a sweep; pass a sweep job's name")
        return SweepResult(name=name, status=info.status, objective=spec.objective,
                           trials=tuple(self.trials.get(name, ())), best_trial=self.best.get(name), error=info.error)


class FakeModels(Models):
    """A registry of copied files under the fake's scratch folder."""

    def __init__(self, backend: FakeBackend) -> None:
        self.root = backend.root / "models"
        self.versions: dict[str, list[ModelVersion]] = {}

    def register(self, name: str, path: str | Path, *, base: str | Path | None = None, format: str = "custom",
                 tags: dict[str, str] | None = None, properties: dict[str, Any] | None = None,
                 description: str = "") -> ModelVersion:
        source = Path(base, path) if base is not None else Path(path)
        if not source.exists():
            raise check.fail("model.path", f"{source} does not exist", "pass the model's file or folder")
        version = len(self.versions.get(name, [])) + 1
        target = self.root / name / str(version) / source.name
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        model = ModelVersion(name=name, version=version, path=str(target), format=format, tags=dict(tags or {}),
                             properties=json.loads(json.dumps(properties or {})), description=description)
        self.versions.setdefault(name, []).append(model)
        return model

    def get(self, name: str, version: int | str | None = None) -> ModelVersion:
        versions = self.versions.get(name, [])
        live = [m for m in versions if not m.archived]  # "latest" is the newest version not archived (Azure's)
        if version in (None, "latest") and live:
            return live[-1]
        for model in versions:
            if str(model.version) == str(version):
                return model
        raise NotFound(f"model {name}:{version} does not exist in the fake backend")

    def list(self, name: str | None = None) -> builtins.list[ModelVersion]:
        return [m for n, vs in sorted(self.versions.items()) if name in (None, n) for m in vs]

    def download(self, name: str, version: int | str | None, dest: str | Path) -> Path:
        model, dest = self.get(name, version), Path(dest)
        source = Path(model.path)
        if source.is_dir():
            shutil.copytree(source, dest, dirs_exist_ok=True)
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / source.name)
        return dest

    def archive(self, name: str, version: int) -> ModelVersion:
        return self._replace(self.get(name, version), archived=True)

    def update_tags(self, name: str, version: int, tags: dict[str, str | None]) -> ModelVersion:
        model = self.get(name, version)
        merged = {k: v for k, v in {**model.tags, **tags}.items() if v is not None}
        return self._replace(model, tags=merged)

    def _replace(self, model: ModelVersion, **changes: Any) -> ModelVersion:
        new = replace(model, **changes)
        self.versions[model.name] = [new if m is model else m for m in self.versions[model.name]]
        return new


@dataclass
class _Endpoint:
    info: EndpointInfo
    deployments: dict[str, DeploymentInfo] = field(default_factory=dict)
    settings: dict[str, DeploymentSettings] = field(default_factory=dict)


class FakeEndpoints(Endpoints):
    """Endpoints in memory. ``provisioning[name]`` scripts a deployment's states (one per read, the last stays;
    Succeeded at once without); ``scorer(payload, deployment)`` answers every invoke; ``metrics(deployment,
    start, end)`` answers ``deployment_metrics`` (no traffic without); ``traffic_log`` holds every traffic change."""

    provision_poll_s = 0.0

    def __init__(self) -> None:
        self.endpoints: dict[str, _Endpoint] = {}
        self.provisioning: dict[str, list[ProvisioningState]] = {}
        self.invocations: list[tuple[str, str | None, Any]] = []
        self.scorer: Callable[[Any, str | None], str] = _no_scorer
        self.metrics: Callable[[str, float, float], DeploymentMetrics] = (
            lambda d, start, end: DeploymentMetrics(deployment=d, start=start, end=end, requests=0, errors=0,
                                                    p99_ms=None))
        self.traffic_log: list[tuple[dict[str, int], dict[str, int]]] = []
        self.leases: dict[str, tuple[str, float]] = {}

    def begin_create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo:
        return self.create_or_update(name, settings)

    def create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo:
        check.endpoint_name(name)
        if name not in self.endpoints:
            self.endpoints[name] = _Endpoint(EndpointInfo(
                name=name, scoring_uri=f"https://{name}.fake/score", traffic={},
                provisioning_state=ProvisioningState.SUCCEEDED))
        return self.get(name)

    def _endpoint(self, name: str) -> _Endpoint:
        if name not in self.endpoints:
            raise NotFound(f"endpoint {name} does not exist in the fake backend")
        return self.endpoints[name]

    def get(self, name: str) -> EndpointInfo:
        return self._endpoint(name).info

    def get_keys(self, name: str) -> dict[str, str]:
        self._endpoint(name)
        return {"primary": f"{name}-primary", "secondary": f"{name}-secondary"}

    def delete(self, name: str) -> bool:
        return self.endpoints.pop(name, None) is not None

    def begin_create_or_update_deployment(self, endpoint: str, name: str,
                                          settings: DeploymentSettings) -> DeploymentInfo:
        check.endpoint_name(name, "deployment.name")
        record = self._endpoint(endpoint)
        record.settings[name] = settings
        record.deployments[name] = DeploymentInfo(endpoint=endpoint, name=name, model=settings.model,
                                                  provisioning_state=ProvisioningState.CREATING)
        return self.get_deployment(endpoint, name)

    def get_deployment(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo:
        record = self._endpoint(endpoint)
        if name not in record.deployments:
            raise NotFound(f"deployment {name} of endpoint {endpoint} does not exist")
        info = record.deployments[name]
        if not info.provisioning_state.is_terminal():
            script = self.provisioning.get(name) or [ProvisioningState.SUCCEEDED]
            state = script.pop(0) if len(script) > 1 else script[0]
            error = f"deployment {endpoint}/{name} {state.value.lower()}" if state is ProvisioningState.FAILED else None
            info = record.deployments[name] = replace(info, provisioning_state=state, error=error)
        return info

    def list_deployments(self, endpoint: str) -> builtins.list[DeploymentInfo]:
        return [self.get_deployment(endpoint, n) for n in sorted(self._endpoint(endpoint).deployments)]

    def delete_deployment(self, endpoint: str, name: str) -> bool:
        record = self._endpoint(endpoint)
        if record.info.traffic.get(name):
            raise check.fail(f"endpoint.traffic.{name}", f"deployment {name} still has traffic", "set it to 0 first")
        record.info = replace(record.info, traffic={k: v for k, v in record.info.traffic.items() if k != name},
                              mirror_traffic={k: v for k, v in record.info.mirror_traffic.items() if k != name})
        return record.deployments.pop(name, None) is not None

    def set_traffic(self, endpoint: str, traffic: dict[str, int],
                    mirror_traffic: dict[str, int] | None = None) -> EndpointInfo:
        record = self._endpoint(endpoint)
        mirror = dict(record.info.mirror_traffic if mirror_traffic is None else mirror_traffic)
        check.traffic(dict(traffic), mirror, record.deployments)
        record.info = replace(record.info, traffic=dict(traffic), mirror_traffic=mirror)
        self.traffic_log.append((dict(traffic), mirror))
        return record.info

    def deployment_metrics(self, endpoint: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
        self._endpoint(endpoint)
        return self.metrics(deployment, start, end)

    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        current = self.leases.get(endpoint)
        if current and current[0] != holder and current[1] > time.time():
            return current[0]
        self.leases[endpoint] = (holder, time.time() + ttl_s)
        return None

    def release(self, endpoint: str, holder: str) -> None:
        if self.leases.get(endpoint, ("",))[0] == holder:
            del self.leases[endpoint]

    def get_logs(self, endpoint: str, deployment: str, lines: int = 100) -> str:
        return f"(the fake backend keeps no log of {endpoint}/{deployment})"

    def invoke(self, endpoint: str, request_file: str | Path | None = None, *, payload: Any = None,
               deployment: str | None = None) -> str:
        record = self._endpoint(endpoint)
        if payload is None and request_file is not None:
            payload = json.loads(Path(request_file).read_text())
        target = deployment or max(record.info.traffic, key=lambda n: record.info.traffic[n], default=None)
        if target is None or target not in record.deployments:
            raise EndpointError(f"endpoint {endpoint}: HTTP 404: no deployment {target or 'has traffic'}")
        self.invocations.append((endpoint, target, payload))
        return self.scorer(payload, target)


def _echoed_key(spec: CommandJobSpec) -> str:
    """The ``--key`` an export or reference job echoes into its answer, as their runners do."""
    found = re.search(r"--key (\S+)", spec.command)
    return found.group(1) if found else ""


def _no_scorer(payload: Any, deployment: str | None) -> str:
    raise EndpointError("the fake endpoint has no scorer: set fake.endpoints.scorer in the test")


def _satisfies_protocol(backend: FakeBackend) -> tuple[Backend, Rollout, Metered, Priced]:
    """mypy proves here that FakeBackend is a ``Backend`` whose endpoints are ``Rollout``, whose jobs are
    ``Metered`` and that prices them (``Priced``): a mismatch fails ``make test``."""
    return backend, backend.endpoints, backend.jobs, backend
