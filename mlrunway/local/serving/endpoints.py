"""Local online endpoints: create, deploy, route traffic, invoke and delete, as ``ml_client.online_endpoints`` does.

Each endpoint is one server process group (uvicorn, see :mod:`mlrunway.serving.app`) on 127.0.0.1 and a free
port, tracked under ``<workspace>/endpoints/<name>/``. A deployment is provisioned in a separate process
(score.py imported, ``init()`` run, see :mod:`mlrunway.local.serving.provision`); only a deployment that provisions
joins the endpoint. Delete stops provisioning and the server (SIGTERM, then SIGKILL), checks the port is free
and removes the state.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from mlrunway import check
from mlrunway.backend.protocol import Endpoints
from mlrunway.backend.types import (
    DeploymentInfo,
    DeploymentMetrics,
    DeploymentSettings,
    EndpointInfo,
    EndpointSettings,
    MirroredAnswer,
    ProvisioningState,
    Usage,
)
from mlrunway.errors import EndpointError, NotFound
from mlrunway.local import records
from mlrunway.local.files import folder_locked, tail, write_json
from mlrunway.local.processes import wait_port_free
from mlrunway.local.registry import LocalModels
from mlrunway.local.serving import master, provision
from mlrunway.local.serving.state import (
    DeploymentState,
    EndpointState,
    check_traffic,
    new_key,
)
from mlrunway.local.workspace import Workspace
from mlrunway.locks import locked
from mlrunway.serving import capture, client, metrics
from mlrunway.serving.state import check_limits

LEASE_FIX = "delete it once no rollout of the endpoint is running"


class Removal(NamedTuple):
    """What deleting an endpoint stopped: its saved state (its server's pid and port, the deployments it served;
    None when its record was damaged or it had none) and, for a damaged record, how many processes of its server
    were found without it and stopped."""

    state: EndpointState | None
    stopped: int


class LocalEndpoints(Endpoints):
    """:param host: the address new endpoints listen on: 127.0.0.1 (this machine only) unless a team serves
        beyond it, behind a TLS-terminating proxy (docs/explanation/export-and-serving.md shows one); an endpoint keeps the host it has.
    :param capture_max_bytes: what each deployment's data collector may keep on disk (its oldest files go first).
    """

    def __init__(self, workspace: Workspace, host: str = "127.0.0.1",
                 capture_max_bytes: int = capture.DEFAULT_MAX_BYTES) -> None:
        self.workspace, self.host, self.capture_max_bytes = workspace, host, capture_max_bytes
        self._readers: dict[str, metrics.Reader] = {}  # per endpoint: its metrics, read incrementally

    def _dir(self, name: str) -> Path:
        return self.workspace.endpoints / check.endpoint_name(name)

    # -- endpoints ---------------------------------------------------------------------------------
    def create_or_update(self, name: str, settings: EndpointSettings | None = None, *, request_timeout_ms: int = 5000,
                         max_concurrent_requests_per_worker: int = 64, **limits: Any) -> EndpointInfo:
        """Create the endpoint and start its server, or return the running one (settings updated). ``limits``
        are the server's (``max_header_bytes``, ``max_headers``, ``header_timeout_s``, ``body_timeout_s``,
        ``send_timeout_s``; see :mod:`mlrunway.serving.guard`), set when the endpoint is created."""
        check_limits(limits)
        return self._info(self._create_or_update(name, settings or EndpointSettings(), request_timeout_ms,
                                                max_concurrent_requests_per_worker, limits))

    def _create_or_update(self, name: str, settings: EndpointSettings, request_timeout_ms: int,
                          max_concurrent_requests_per_worker: int, limits: dict[str, Any]) -> EndpointState:
        folder = self._dir(name)
        workers = settings.workers
        check.positive_int("endpoint.workers", workers, maximum=64)
        check.positive_int("endpoint.request_timeout_ms", request_timeout_ms, maximum=180_000)
        if (folder / "endpoint.json").exists():  # never new keys, port or deployments for an existing endpoint
            with locked(provision.state_lock(folder)):
                state = replace(EndpointState.load(folder), request_timeout_ms=request_timeout_ms,
                                max_concurrent_requests_per_worker=max_concurrent_requests_per_worker)
                state.save(folder)
                return state if master.alive(state) else master.start(folder, state)
        state = EndpointState(name=name, keys={"primary": new_key(), "secondary": new_key()}, workers=workers,
                              host=self.host,
                              request_timeout_ms=request_timeout_ms,
                              max_concurrent_requests_per_worker=max_concurrent_requests_per_worker, **limits)
        return master.start(folder, state)

    def recover(self, name: str) -> EndpointInfo:
        """Restart the endpoint's server if its master died, from its saved state: the same port, keys,
        deployments and traffic, so its scoring URI never changes. A running one is left as it is."""
        return self.restart(name)[0]

    def restart(self, name: str) -> tuple[EndpointInfo, bool]:
        """:meth:`recover`, saying whether this call restarted the server (False: it was running, or another
        recover got there first)."""
        folder = self._dir(name)
        with locked(provision.state_lock(folder)):
            state = self.state(name)
            restarted = not master.alive(state)
            if restarted:
                state = master.start(folder, state)
        return self._info(state), restarted

    def begin_create_or_update(self, name: str, settings: EndpointSettings | None = None) -> EndpointInfo:
        """As ``create_or_update``: a local server answers within seconds, so it returns Succeeded."""
        return self.create_or_update(name, settings)

    def get(self, name: str) -> EndpointInfo:
        """The endpoint now (one whose record is damaged: Failed and marked, naming the file)."""
        folder = self._dir(name)
        if not (folder / "endpoint.json").exists():
            raise NotFound(f"endpoint {name!r} does not exist in workspace {self.workspace.root}")
        return self._read(folder)

    def state(self, name: str) -> EndpointState:
        """The endpoint's whole saved state, keys included: for this backend's own server and tests."""
        folder = self._dir(name)
        if not (folder / "endpoint.json").exists():
            raise NotFound(f"endpoint {name!r} does not exist in workspace {self.workspace.root}")
        return EndpointState.load(folder)

    @staticmethod
    def _info(state: EndpointState) -> EndpointInfo:
        """What the endpoint is now: a server whose master is gone is Failed, with what is known of it."""
        dead = master.dead_reason(state)
        return EndpointInfo(name=state.name, scoring_uri=state.scoring_uri, traffic=dict(state.traffic),
                            mirror_traffic=dict(state.mirror_traffic), auth_mode=state.auth_mode,
                            provisioning_state=ProvisioningState.FAILED if dead else ProvisioningState.SUCCEEDED,
                            error=dead)

    def list(self) -> builtins.list[EndpointInfo]:
        """Every endpoint; one whose record is damaged is listed as Failed, marked, naming the file."""
        root = self.workspace.endpoints
        folders = sorted(root.iterdir()) if root.exists() else []
        return [self._read(p) for p in folders if (p / "endpoint.json").exists()]

    def _read(self, folder: Path) -> EndpointInfo:
        try:
            return self._info(EndpointState.load(folder))
        except records.DamagedRecord as exc:
            return EndpointInfo(name=folder.name, scoring_uri="", traffic={}, damaged=True,
                                provisioning_state=ProvisioningState.FAILED, error=str(exc))

    def delete(self, name: str) -> bool:
        """Stop the server, free the port, remove the state; False when it was already gone."""
        return self.remove(name) is not None

    def remove(self, name: str) -> Removal | None:
        """:meth:`delete`, saying what it stopped; None when the endpoint was already gone. Deletes of one endpoint
        (a person's, a run's cleanup) take turns on a lock on its folder: the first removes it, the others then
        find it gone."""
        folder = self._dir(name)
        with folder_locked(folder) as there:
            if not there:
                return None
            for record in folder.glob(f"deployments/*/{provision.RECORD}"):  # none may join a deleted endpoint
                provision.stop(folder, record.parent.name)
            removal = self._stop_server(folder) if (folder / "endpoint.json").exists() else Removal(None, 0)
            shutil.rmtree(folder)
        self._readers.pop(name, None)
        return removal

    @staticmethod
    def _stop_server(folder: Path) -> Removal:
        """Stop the endpoint's server and wait for its ports to be free; a damaged record's server is found
        without it (by its command line)."""
        try:
            state = EndpointState.load(folder)
        except records.DamagedRecord:
            server = master.processes_of(folder)
            ports = master.listening_ports(server)
            master.stop_processes(server)
            removal = Removal(None, len(server))
        else:
            master.stop(state)
            ports = {state.port}
            removal = Removal(state, 0)
        if busy := sorted(port for port in ports if not wait_port_free(port)):
            raise EndpointError(f"port {busy[0]} is still in use after the endpoint's server was stopped")
        return removal

    def get_keys(self, name: str) -> dict[str, str]:
        return dict(self.state(name).keys)

    def regenerate_keys(self, name: str, key_type: str = "primary") -> dict[str, str]:
        check.one_of("key_type", key_type, ("primary", "secondary"))
        with locked(provision.state_lock(self._dir(name))):
            state = self.state(name)
            state.keys[key_type] = new_key()
            state.save(self._dir(name))
        return dict(state.keys)

    # -- deployments -------------------------------------------------------------------------------
    def begin_create_or_update_deployment(self, endpoint: str, name: str,
                                          settings: DeploymentSettings) -> DeploymentInfo:
        """Start provisioning a deployment (a new version when it exists) and return at once; traffic is left
        as it is and the serving version goes on serving until the new one joins (:mod:`provision`).

        The model comes from this workspace's registry; ``instance_count`` is the server workers it needs
        (default: the endpoint's); ``instance_type`` has no meaning on one machine and is not used.
        """
        self._start_provisioning(endpoint, name, settings)
        return self.get_deployment(endpoint, name)

    def create_or_update_deployment(self, endpoint: str, name: str, settings: DeploymentSettings, *,
                                    timeout_s: float = 300.0) -> DeploymentInfo:
        """Provision a deployment and wait for it; a failing ``init()`` raises EndpointError with its log."""
        process = self._start_provisioning(endpoint, name, settings)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            provision.stop(self._dir(endpoint), name)
        info = self.get_deployment(endpoint, name)
        if info.provisioning_state is not ProvisioningState.SUCCEEDED:
            raise EndpointError(f"deployment {name} of endpoint {endpoint} failed to provision "
                                f"({info.provisioning_state.value}): {info.error}")
        return info

    def _start_provisioning(self, endpoint: str, name: str, settings: DeploymentSettings) -> subprocess.Popen[bytes]:
        state = self.state(endpoint)
        check.endpoint_name(name, "deployment.name")
        workers = settings.instance_count or state.workers
        check.positive_int("deployment.instance_count", workers, maximum=64)
        code_dir, scoring_script = Path(settings.code_dir), settings.scoring_script
        model_dir = LocalModels(self.workspace).get(settings.model_name, settings.model_version).path
        if not (Path(code_dir) / scoring_script).is_file():
            raise check.fail("deployment.scoring_script", f"{Path(code_dir) / scoring_script} does not exist",
                              "pass the folder that holds score.py and the script's name")
        if not Path(model_dir).is_dir():
            raise check.fail("deployment.model", f"model folder {model_dir} does not exist", "pass a registered model")
        folder = self._dir(endpoint)
        provision.stop(folder, name)  # a newer request supersedes one still under way
        old = state.deployments.get(name)
        version = max(old.version if old else 0, provision.last_version(folder, name), state.retired.get(name, 0)) + 1
        home = folder / "deployments" / name / f"v{version}"
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(code_dir, home / "code", ignore=shutil.ignore_patterns("__pycache__", "outputs"))
        deployment = DeploymentState(name=name, version=version, model_dir=str(Path(model_dir).resolve()),
                                     code_dir=str(home / "code"), scoring_script=scoring_script, model=settings.model,
                                     workers=workers, environment_variables=dict(settings.environment_variables),
                                     data_collector=settings.data_collector.to_dict() if settings.data_collector else None,
                                     capture_max_bytes=self.capture_max_bytes,
                                     created=(old.created if old is not None else None) or time.time())
        return provision.start(folder, deployment, creating=old is None)

    def serving_usage(self, endpoint: str) -> dict[str, Usage]:
        """Each serving deployment since its creation, on its scoring processes (a deployment made before this
        release recorded no creation: not priced)."""
        return {name: Usage(started=d.created, processes=d.workers)
                for name, d in self.state(endpoint).deployments.items() if d.created is not None}

    def get_deployment(self, endpoint: str, name: str, *, operation: str | None = None) -> DeploymentInfo:
        """Where the deployment's provisioning stands (Creating, Updating, Succeeded, Failed, Canceled); one that
        provisioned on a server whose master is gone is Failed with the reason. A local provisioning keeps its
        own record (its error is in it), so ``operation`` is not needed."""
        state = self.state(endpoint)
        progress = provision.current(self._dir(endpoint), name)
        serving = state.deployments.get(name)
        if progress is None and serving is None:
            raise NotFound(f"deployment {name} of endpoint {endpoint} does not exist")
        provisioning, error = progress or (ProvisioningState.SUCCEEDED, None)
        if provisioning is ProvisioningState.SUCCEEDED and (dead := master.dead_reason(state)):
            provisioning, error = ProvisioningState.FAILED, dead
        return DeploymentInfo(endpoint=endpoint, name=name, provisioning_state=provisioning, error=error,
                              model=serving.model if serving else "")

    def list_deployments(self, endpoint: str) -> builtins.list[DeploymentInfo]:
        """The endpoint's deployments: those serving, and those still provisioning."""
        folder = self._dir(endpoint)
        names = set(self.state(endpoint).deployments) | {p.parent.name for p in folder.glob(f"deployments/*/{provision.RECORD}")}
        return [self.get_deployment(endpoint, name) for name in sorted(names)]

    def delete_deployment(self, endpoint: str, name: str) -> bool:
        """Stop its provisioning if under way and remove it; one with traffic is refused."""
        folder = self._dir(endpoint)
        stopped = provision.stop(folder, name)
        with locked(provision.state_lock(folder)):
            state = self.state(endpoint)
            last = max(state.deployments[name].version if name in state.deployments else 0,
                       provision.last_version(folder, name))
            if last:
                state.retired[name] = max(state.retired.get(name, 0), last)
                state.save(folder)
            if name not in state.deployments:
                shutil.rmtree(folder / "deployments" / name, ignore_errors=True)
                return stopped
            state.remove(name)
            state.save(folder)
        shutil.rmtree(folder / "deployments" / name, ignore_errors=True)
        return True

    def set_traffic(self, endpoint: str, traffic: dict[str, int],
                    mirror_traffic: dict[str, int] | None = None) -> EndpointInfo:
        with locked(provision.state_lock(self._dir(endpoint))):
            state = self.state(endpoint)
            mirror = dict(mirror_traffic if mirror_traffic is not None else state.mirror_traffic)
            check_traffic(dict(traffic), mirror, state.deployments)
            state.traffic, state.mirror_traffic = dict(traffic), mirror
            state.save(self._dir(endpoint))
        return self._info(state)

    def deployment_metrics(self, endpoint: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
        """What ``deployment`` served over [start, end), from every server worker's per-second counts."""
        self.state(endpoint)
        reader = self._readers.get(endpoint)
        if reader is None:
            reader = self._readers[endpoint] = metrics.Reader(self._dir(endpoint), horizon_s=3600.0)
        return reader.read(deployment, start, end)

    def mirrored_answers(self, endpoint: str, deployment: str, start: float, end: float) -> builtins.list[MirroredAnswer]:
        """The requests mirrored to ``deployment`` over [start, end), each with the champion's answer beside the
        shadow's, as the server's workers kept them (:func:`metrics.mirrored_answers`)."""
        self.state(endpoint)
        return metrics.mirrored_answers(self._dir(endpoint), deployment, start, end)

    def captured(self, endpoint: str, deployment: str, collection: str, start: float,
                 end: float) -> builtins.list[dict[str, Any]]:
        """What ``deployment``'s data collector wrote to ``collection`` over [start, end), oldest first; the files
        outlive the endpoint (:mod:`mlrunway.serving.capture`)."""
        check.endpoint_name(endpoint)
        return capture.read(capture.capture_root(self._dir(endpoint)), deployment, collection.lower(), start, end)

    def replay(self, model: str, code_dir: str, scoring_script: str, requests: builtins.list[Any],
               out: str) -> dict[str, int]:
        """What the script collects when given ``requests`` with ``model`` (from this workspace's registry), in a
        process of its own (:mod:`mlrunway.monitoring.reference`)."""
        import sys
        import tempfile

        found = LocalModels(self.workspace).get(model.partition(":")[0], int(model.partition(":")[2]))
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as listed:
            listed.write("".join(json.dumps(r) + "\n" for r in requests))
            listed.flush()
            done = subprocess.run([sys.executable, "-m", "mlrunway.monitoring.reference", "--code", code_dir,
                                   "--scoring-script", scoring_script, "--model", str(found.path), "--model-ref", model,
                                   "--requests", listed.name, "--out", out], capture_output=True, text=True)
        if done.returncode:
            raise EndpointError(f"the reference of {model} could not be made with {code_dir}/{scoring_script}: "
                                f"{(done.stderr or done.stdout).strip()[-1500:]}")
        counts: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
        return counts

    def lease(self, endpoint: str, holder: str, ttl_s: float) -> str | None:
        """Hold the endpoint's rollout lease for ``ttl_s`` (taken, or renewed by its holder): None; else who holds
        it and until when. The endpoint need not exist yet (the first run creates it under the lease)."""
        folder = self._dir(endpoint)
        folder.mkdir(parents=True, exist_ok=True)
        with locked(folder / ".lease.lock"):
            try:
                current = records.read(folder / "lease.json", LEASE_FIX) if (folder / "lease.json").exists() else None
            except records.DamagedRecord as exc:  # who holds it cannot be known: nobody takes it (fails closed)
                return str(exc)
            now = time.time()
            if current and current["holder"] != holder and current["until"] > now:
                return f"{current['holder']} (until {time.strftime('%H:%M:%S', time.localtime(current['until']))})"
            write_json(folder / "lease.json", {"holder": holder, "until": now + ttl_s})
        return None

    def release(self, endpoint: str, holder: str) -> None:
        """Give the lease back if ``holder`` holds it."""
        folder = self._dir(endpoint)
        if not (folder / "lease.json").exists():
            return
        with locked(folder / ".lease.lock"), contextlib.suppress(records.DamagedRecord):  # kept: named by lease()
            if records.read(folder / "lease.json", LEASE_FIX)["holder"] == holder:
                (folder / "lease.json").unlink()

    def server_log(self, endpoint: str, lines: int = 200) -> str:
        """The endpoint's server's own log (its master's and workers' errors), its last ``lines``."""
        self.get(endpoint)
        return tail(self._dir(endpoint) / "logs" / "server.log", lines)

    def get_logs(self, endpoint: str, deployment: str, lines: int = 100) -> str:
        self.get(endpoint)
        return tail(self._dir(endpoint) / "deployments" / deployment / "logs" / "score.log", lines)

    # -- scoring -----------------------------------------------------------------------------------
    def invoke(self, endpoint: str, request_file: str | Path | None = None, *, payload: Any = None,
               deployment: str | None = None, timeout_s: float = 30.0) -> str:
        """POST to the scoring URI with the primary key; return the body, as ``online_endpoints.invoke`` does."""
        body = client.request_body(request_file, payload)
        state = self.state(endpoint)
        return client.score(endpoint, state.scoring_uri, state.keys["primary"], body, deployment, timeout_s)

