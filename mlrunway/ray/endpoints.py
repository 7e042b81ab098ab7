"""Online endpoints on a Ray cluster, as ``ml_client.online_endpoints`` makes them: the control plane, on the Airflow
side (it imports no ``ray``).

An endpoint's state is a folder of the shared storage, ``<storage>/<namespace>/endpoints/<name>/``, laid out as the
local endpoint's (``endpoint.json`` with its keys, mode 0600, and its generation counter; each deployment version's
copy of its code under ``deployments/<name>/v<k>/``; the scoring logs), so any Airflow worker finds it and nothing of
it lives in the process that deployed it. Its server is a long-running Ray job (:mod:`mlrunway.ray.server`) asking
for the endpoint's profile, so it runs on a worker node: the backend-neutral scoring app behind the local server's
guard. A deployment is provisioned by a Ray job of its own (:mod:`mlrunway.ray.provision`: score.py imported and
``init()`` run on the cluster, never on the Airflow worker); only one whose ``init()`` returns joins, and it reads
Succeeded once the endpoint's server answers a scoring request with it. A traffic change is written to the state the
server's workers read on each request, so it is in effect when ``set_traffic`` returns.

Both kinds of job are records of the Ray jobs service under ``<namespace>/serving/`` (submission ids
``<namespace>.serving.<name>``), apart from the team's jobs; their code is mlrunway's, shipped as the ``py_modules``
of its import closure (:mod:`mlrunway.ray.closure`).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import shlex
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.protocol import Endpoints
from mlrunway.backend.types import (
    DeploymentInfo,
    DeploymentMetrics,
    DeploymentSettings,
    EndpointInfo,
    EndpointSettings,
    JobStatus,
    MirroredAnswer,
    ProvisioningState,
    Usage,
)
from mlrunway.errors import EndpointError, NotFound
from mlrunway.locks import locked
from mlrunway.ray import closure, lease
from mlrunway.ray.client import zip_folder
from mlrunway.ray.connection import RayConnection
from mlrunway.ray.jobs import MODEL_URI, RayJobs
from mlrunway.serving import capture, client, metrics
from mlrunway.serving.state import STATE_FILE, DeploymentState, EndpointState, check_limits, new_key, write_json
from mlrunway.specs.job import CommandJobSpec, Input

__all__ = ["RayEndpoints"]

SERVER = "mlrunway.ray.server"
PROVISION = "mlrunway.ray.provision"
SERVER_FILE = "server.json"  # mlrunway.ray.server's: where the server serves
RECORD = "provision.json"  # mlrunway.ray.provision's: deployments/<name>/provision.json
DEPLOYMENT_FILE = "deployment.json"  # deployments/<name>/v<version>/: what the provisioning job loads
RAY_FILE = "ray.json"  # the endpoint's server jobs: {"server": <job>, "servers": <count>, "profile": <name>}
# Its jobs are named <endpoint>-<the first 8 characters of its state's token>-server-<k> and -<deployment>-v<k>.
SERVER_ENV = "MLRUNWAY_SERVER_JOB"  # the server job's name, which it writes into server.json
START_TIMEOUT_S = 180.0  # a server job's start: the runtime environment, then uvicorn


class RayEndpoints(Endpoints):
    """The endpoints of one namespace of a Ray cluster."""

    provision_poll_s = 0.5

    def __init__(self, connection: RayConnection, jobs: RayJobs) -> None:
        self.connection = connection
        self.jobs = jobs  # the team's jobs: registered models are staged on the storage through it
        self.serving = RayJobs(connection, jobs.api, models=jobs.models, folder="serving")
        self.root = Path(connection.storage) / connection.namespace / "endpoints"
        self._readers: dict[str, metrics.Reader] = {}  # per endpoint: its metrics, read incrementally

    def _dir(self, name: str) -> Path:
        return self.root / check.endpoint_name(name)

    def _state(self, name: str) -> EndpointState:
        folder = self._dir(name)
        if not (folder / STATE_FILE).exists():
            raise NotFound(f"endpoint {name!r} does not exist in namespace {self.connection.namespace!r} of "
                           f"{self.connection.storage}")
        return EndpointState.load(folder)

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        with contextlib.suppress(FileNotFoundError, ValueError):
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                return data
        return {}

    # -- endpoints ---------------------------------------------------------------------------------
    def begin_create_or_update(self, name: str, settings: EndpointSettings | None = None, *,
                               request_timeout_ms: int = 5000, max_concurrent_requests_per_worker: int = 64,
                               compute: str | None = None, **limits: Any) -> EndpointInfo:
        """Create the endpoint (new keys) and submit its server, or update a live one's settings (the same keys,
        deployments and traffic) and start its server again if it is no longer running. ``compute`` names the
        profile the server runs with (default: the connection's); ``limits`` are the server's, as the local
        endpoint's (:func:`mlrunway.serving.state.check_limits`), set when the endpoint is created."""
        settings = settings or EndpointSettings()
        check_limits(limits)
        check.positive_int("endpoint.workers", settings.workers, maximum=64)
        check.positive_int("endpoint.request_timeout_ms", request_timeout_ms, maximum=180_000)
        profile = self.connection.profile(compute, "endpoint.compute")[0]
        folder = self._dir(name)
        folder.mkdir(parents=True, exist_ok=True)
        with locked(folder / ".state.lock"):
            if (folder / STATE_FILE).exists():
                state = replace(EndpointState.load(folder), request_timeout_ms=request_timeout_ms,
                                max_concurrent_requests_per_worker=max_concurrent_requests_per_worker)
            else:
                state = EndpointState(name=name, keys={"primary": new_key(), "secondary": new_key()},
                                      workers=settings.workers, host="", request_timeout_ms=request_timeout_ms,
                                      max_concurrent_requests_per_worker=max_concurrent_requests_per_worker, **limits)
            state.save(folder)
            if not self._server_running(folder):
                self._start_server(folder, profile)
        return self.get(name)

    def create_or_update(self, name: str, settings: EndpointSettings | None = None,
                         **options: Any) -> EndpointInfo:
        """As ``begin_create_or_update`` (its ``options`` too), then wait until its server answers (at most
        START_TIMEOUT_S)."""
        self.begin_create_or_update(name, settings, **options)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (info := self.get(name)).provisioning_state is not ProvisioningState.SUCCEEDED:
            if info.provisioning_state is ProvisioningState.FAILED or time.monotonic() > deadline:
                raise EndpointError(f"endpoint {name}: its server did not start: {info.error or 'still starting'}")
            time.sleep(self.provision_poll_s)
        return info

    def _server_running(self, folder: Path) -> bool:
        job = self._read(folder / RAY_FILE).get("server")
        with contextlib.suppress(NotFound):
            return job is not None and not self.serving.get(job).status.is_terminal()
        return False

    def _start_server(self, folder: Path, profile: str) -> None:
        """Submit a new server job (``<endpoint>-<token>-server-<k>``): a server that ended is never resubmitted
        under its name (Ray refuses an id it holds)."""
        known = self._read(folder / RAY_FILE)
        job = f"{self._prefix(folder)}server-{int(known.get('servers', 0)) + 1}"
        (folder / SERVER_FILE).unlink(missing_ok=True)
        write_json(folder / RAY_FILE, {**known, "server": job, "servers": int(known.get("servers", 0)) + 1,
                                       "profile": profile})
        self._submit(job, [SERVER, str(folder)], profile, {SERVER_ENV: job}, kept=True)

    @staticmethod
    def _prefix(folder: Path) -> str:
        """What the names of this endpoint's jobs start with: its name and its incarnation (the token its state was
        made with), so an endpoint deleted and made again never meets its predecessor's job ids (Ray refuses an id
        it holds), and a delete stops no other endpoint's jobs (``ep`` beside ``ep-2``)."""
        return f"{folder.name}-{EndpointState.load(folder).token[:8]}-"

    def _submit(self, job: str, argv: builtins.list[str], profile: str, env: dict[str, str] | None = None, *,
                kept: bool = False) -> None:
        """A Ray job of mlrunway's own code (the closure of the server and the provisioning), with ``profile``;
        ``kept``: run again on another node when its node is lost (the server)."""
        empty = Path(self.connection.storage) / self.connection.namespace / "controller-code"
        empty.mkdir(parents=True, exist_ok=True)
        spec = CommandJobSpec(code=str(empty), command=shlex.join(["python", "-m", *argv]), compute=profile,
                              experiment_name="endpoints", environment_variables=env or {})
        base, files = closure.package((SERVER, PROVISION))
        modules = self.serving.api.upload(zip_folder(base, files))
        self.serving.submit_internal(job, spec, py_modules=[modules], kept=kept)

    def get(self, name: str) -> EndpointInfo:
        """The endpoint now: Succeeded once its server answers where it recorded it serves; Failed, with the server
        job's error, once that job ended."""
        folder = self._dir(name)
        state = self._state(name)
        status, error = self._server_status(folder)
        where = self._read(folder / SERVER_FILE)
        uri = f"http://{where['host']}:{where['port']}/score" if where.get("host") else ""
        return EndpointInfo(name=name, scoring_uri=uri, traffic=dict(state.traffic),
                            mirror_traffic=dict(state.mirror_traffic), auth_mode=state.auth_mode,
                            provisioning_state=status, error=error)

    def _server_status(self, folder: Path) -> tuple[ProvisioningState, str | None]:
        job = self._read(folder / RAY_FILE).get("server")
        if job is None:
            return ProvisioningState.FAILED, "the endpoint has no server job; create_or_update starts one"
        try:
            info = self.serving.get(job)
        except NotFound:
            return ProvisioningState.FAILED, f"its server job {job} is not recorded; create_or_update starts one"
        if info.status.is_terminal():
            return ProvisioningState.FAILED, (f"its server job {job} ended {info.status.value}: {info.error}; "
                                              "create_or_update starts it again (the same keys, deployments and traffic)")
        where = self._read(folder / SERVER_FILE)
        if where.get("job") != job or not client.answers(f"http://{where['host']}:{where['port']}/healthz/live", 2.0):
            return ProvisioningState.CREATING, None
        return ProvisioningState.SUCCEEDED, None

    def list(self) -> builtins.list[EndpointInfo]:
        return [self.get(p.name) for p in sorted(self.root.iterdir())
                if (p / STATE_FILE).exists()] if self.root.is_dir() else []

    def get_keys(self, name: str) -> dict[str, str]:
        return dict(self._state(name).keys)

    def delete(self, name: str) -> bool:
        """Stop the endpoint's server and provisioning jobs (each waited on until Ray has it ended), remove its
        state; False when it was already gone."""
        folder = self._dir(name)
        if not folder.exists():
            return False
        with locked(self.root / f".{name}.delete.lock"):
            if not folder.exists():
                return False
            # No state: it was never made whole, and a server job is submitted only after the state is saved.
            jobs = self.serving.list(self._prefix(folder)) if (folder / STATE_FILE).exists() else []
            for job in jobs:
                if not job.status.is_terminal():
                    self.serving.cancel(job.name, reason=f"endpoint {name} deleted")
            shutil.rmtree(folder)
        return True

    # -- deployments -------------------------------------------------------------------------------
    def begin_create_or_update_deployment(self, endpoint: str, name: str,
                                          settings: DeploymentSettings) -> DeploymentInfo:
        """Stage the model (a registered version, downloaded to the storage once) and a copy of the code, then
        submit the provisioning job (``<endpoint>-<name>-v<k>``) and return at once; traffic is left as it is and
        the serving version goes on serving until the new one joins."""
        folder = self._dir(endpoint)
        state = self._state(endpoint)
        workers = settings.instance_count or state.workers
        check.positive_int("deployment.instance_count", workers, maximum=64)
        code = Path(settings.code_dir)
        if not (code / settings.scoring_script).is_file():
            raise check.fail("deployment.scoring_script", f"{code / settings.scoring_script} does not exist",
                             "pass the folder that holds score.py and the script's name")
        profile = self.connection.profile(settings.instance_type, "deployment.instance_type")[0]
        model_dir = self.jobs.staged(Input(type="uri_folder",
                                           path=f"{MODEL_URI}{settings.model_name}/{settings.model_version}"))
        home = folder / "deployments" / name
        with locked(folder / ".state.lock"):
            record = self._read(home / RECORD)
            old = state.deployments.get(name)
            version = max(old.version if old else 0, int(record.get("version", 0)), state.retired.get(name, 0)) + 1
            if record.get("job") and not ProvisioningState(record.get("state", "Failed")).is_terminal():
                self.serving.request_cancel(record["job"], f"superseded by version {version}")
            shutil.copytree(code, home / f"v{version}" / "code",
                            ignore=shutil.ignore_patterns("__pycache__", "outputs"))
            deployment = DeploymentState(
                name=name, version=version, model_dir=model_dir, code_dir=str(home / f"v{version}" / "code"),
                scoring_script=settings.scoring_script, model=settings.model, workers=workers,
                environment_variables=dict(settings.environment_variables),
                data_collector=settings.data_collector.to_dict() if settings.data_collector else None,
                created=(old.created if old is not None else None) or time.time())
            write_json(home / f"v{version}" / DEPLOYMENT_FILE, vars(deployment), mode=0o600)
            job = f"{self._prefix(folder)}{name}-v{version}"
            creating = ProvisioningState.CREATING if old is None else ProvisioningState.UPDATING
            write_json(home / RECORD, {"version": version, "state": creating.value, "error": None, "job": job})
        self._submit(job, [PROVISION, str(folder), name, str(version)], profile)
        return self.get_deployment(endpoint, name)

    def get_deployment(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo:
        """Where its provisioning stands; a provisioning job that ended without its result is Failed with its
        log's tail; one that joined reads Succeeded once the endpoint's server answers with it."""
        folder = self._dir(endpoint)
        state = self._state(endpoint)
        record = self._read(folder / "deployments" / name / RECORD)
        serving = state.deployments.get(name)
        if not record and serving is None:
            raise NotFound(f"deployment {name} of endpoint {endpoint} does not exist")
        provisioning = ProvisioningState(record.get("state", "Succeeded"))
        error = record.get("error")
        if not provisioning.is_terminal() and record.get("job"):
            with contextlib.suppress(NotFound):
                info = self.serving.get(record["job"])
                again = self._read(folder / "deployments" / name / RECORD)  # it may have ended between the reads
                if info.status.is_terminal() and not ProvisioningState(again.get("state", "Failed")).is_terminal():
                    provisioning = (ProvisioningState.CANCELED if info.status is JobStatus.CANCELED
                                    else ProvisioningState.FAILED)
                    error = f"its provisioning job {record['job']} ended {info.status.value}: {info.error}"
                else:
                    provisioning, error = ProvisioningState(again.get("state", "Failed")), again.get("error")
        if provisioning is ProvisioningState.SUCCEEDED and serving is not None:
            status, why = self._server_status(folder)
            if status is not ProvisioningState.SUCCEEDED:
                provisioning, error = (ProvisioningState.UPDATING if status is ProvisioningState.CREATING
                                       else status), why
            elif record.get("answered") != serving.version:
                if not self._serves(state, serving):
                    provisioning = ProvisioningState.UPDATING  # joined; the server has not answered with it yet
                else:
                    with locked(folder / ".state.lock"):
                        again = self._read(folder / "deployments" / name / RECORD)
                        if again.get("version") == serving.version:
                            write_json(folder / "deployments" / name / RECORD, {**again, "answered": serving.version})
        return DeploymentInfo(endpoint=endpoint, name=name, provisioning_state=provisioning, error=error,
                              model=serving.model if serving else "")

    def _serves(self, state: EndpointState, deployment: DeploymentState) -> bool:
        """The server answers a scoring request (``{}``) for the deployment (its ``/deployments/<name>/score`` route,
        with the primary key), once per version: any answer from score.py, whatever its status, is the
        deployment's own; 404 (not loaded there) or 503 is not."""
        where = self._read(self._dir(state.name) / SERVER_FILE)
        request = urllib.request.Request(
            f"http://{where['host']}:{where['port']}/deployments/{deployment.name}/score", data=b"{}", method="POST",
            headers={"Authorization": f"Bearer {state.keys['primary']}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30):
                return True
        except urllib.error.HTTPError as exc:
            return exc.code not in (404, 503)  # score.py refused "{}", or failed on it: it serves
        except OSError:
            return False

    def list_deployments(self, endpoint: str) -> builtins.list[DeploymentInfo]:
        folder = self._dir(endpoint)
        names = set(self._state(endpoint).deployments) | {p.parent.name for p in folder.glob(f"deployments/*/{RECORD}")}
        return [self.get_deployment(endpoint, name) for name in sorted(names)]

    def delete_deployment(self, endpoint: str, name: str) -> bool:
        """Stop its provisioning if under way and remove it; one with traffic is refused."""
        folder = self._dir(endpoint)
        home = folder / "deployments" / name
        record = self._read(home / RECORD)
        stopped = False
        if record.get("job") and not ProvisioningState(record.get("state", "Failed")).is_terminal():
            self.serving.cancel(record["job"], reason="deployment deleted")
            stopped = True
        with locked(folder / ".state.lock"):
            state = self._state(endpoint)
            last = max(state.deployments[name].version if name in state.deployments else 0,
                       int(record.get("version", 0)))
            if last:
                state.retired[name] = max(state.retired.get(name, 0), last)
            if name in state.deployments:
                state.remove(name)
                stopped = True
            state.save(folder)
        shutil.rmtree(home, ignore_errors=True)
        return stopped

    def set_traffic(self, endpoint: str, traffic: dict[str, int],
                    mirror_traffic: dict[str, int] | None = None) -> EndpointInfo:
        """Weights written to the state the server's workers read before each request: in effect on return."""
        folder = self._dir(endpoint)
        with locked(folder / ".state.lock"):
            state = self._state(endpoint)
            mirror = dict(mirror_traffic if mirror_traffic is not None else state.mirror_traffic)
            check.traffic(dict(traffic), mirror, state.deployments)
            state.traffic, state.mirror_traffic = dict(traffic), mirror
            state.save(folder)
        return self.get(endpoint)

    def served_state(self, name: str) -> EndpointState:
        """The endpoint's whole state, keys included, with where its server serves (its node's address, port and
        process): for this backend's tests and tools, never a page."""
        where = self._read(self._dir(name) / SERVER_FILE)
        return replace(self._state(name), host=where.get("host", ""), port=int(where.get("port", 0)),
                       pid=where.get("pid"))

    def server_log(self, endpoint: str, lines: int = 200) -> str:
        """The endpoint's server job's log (uvicorn's and the scoring app's errors), its last ``lines``."""
        job = self._read(self._dir(endpoint) / RAY_FILE).get("server")
        if job is None:
            return ""
        return "\n".join(list(self.serving.logs(job))[-lines:])

    # -- Rollout and Shadow: the server's workers write their counts and mirrored answers to the endpoint's folder,
    # each to files of its own (no locks): read here as the local endpoint's are (mlrunway.serving.metrics).
    def deployment_metrics(self, endpoint: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
        """What ``deployment`` served over [start, end), from every server worker's per-second counts."""
        self._state(endpoint)
        reader = self._readers.get(endpoint)
        if reader is None:
            reader = self._readers[endpoint] = metrics.Reader(self._dir(endpoint), horizon_s=3600.0)
        return reader.read(deployment, start, end)

    def mirrored_answers(self, endpoint: str, deployment: str, start: float,
                         end: float) -> builtins.list[MirroredAnswer]:
        """The requests mirrored to ``deployment`` over [start, end), the champion's answer beside the shadow's."""
        self._state(endpoint)
        return metrics.mirrored_answers(self._dir(endpoint), deployment, start, end)

    def captured(self, endpoint: str, deployment: str, collection: str, start: float,
                 end: float) -> builtins.list[dict[str, Any]]:
        """What ``deployment``'s data collector wrote to ``collection`` over [start, end), oldest first, from the
        files the server's workers keep on the storage (:mod:`mlrunway.serving.capture`)."""
        check.endpoint_name(endpoint)
        return capture.read(capture.capture_root(self._dir(endpoint)), deployment, collection.lower(), start, end)

    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """Hold the endpoint's rollout lease for ``ttl_s``, without file locks (:mod:`mlrunway.ray.lease`): None; else
        who holds it and until when. The endpoint need not exist yet."""
        return lease.take(self._dir(endpoint), holder, ttl_s)

    def release(self, endpoint: str, holder: str) -> None:
        lease.release(self._dir(endpoint), holder)

    def get_logs(self, endpoint: str, deployment: str, lines: int = 100) -> str:
        """The deployment's scoring log (score.py's output and the server's errors), its last ``lines``."""
        self._state(endpoint)
        path = self._dir(endpoint) / "deployments" / deployment / "logs" / "score.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def serving_usage(self, endpoint: str) -> dict[str, Usage]:
        """Each deployment since its creation, on the server's profile."""
        profile = self._read(self._dir(endpoint) / RAY_FILE).get("profile")
        return {name: Usage(started=d.created, size=profile)
                for name, d in self._state(endpoint).deployments.items() if d.created is not None}

    # -- scoring -----------------------------------------------------------------------------------
    def invoke(self, endpoint: str, request_file: str | Path | None = None, *, payload: Any = None,
               deployment: str | None = None, timeout_s: float = 30.0) -> str:
        """POST to the scoring URI with the primary key; the body, as ``online_endpoints.invoke`` returns it."""
        body = client.request_body(request_file, payload)
        state = self._state(endpoint)
        uri = self.get(endpoint).scoring_uri
        if not uri:
            raise EndpointError(f"endpoint {endpoint}: its server has not started yet")
        return client.score(endpoint, uri, state.keys["primary"], body, deployment, timeout_s)

