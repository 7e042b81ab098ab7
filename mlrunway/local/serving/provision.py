"""Provisioning a local deployment in the background, as Azure provisions one while its caller goes on.

``start`` launches a detached process (``python -m mlrunway.local.serving.provision``) that imports score.py and
runs ``init()`` in a fresh interpreter, as Azure starts a container. Only a deployment whose ``init()``
returns joins the endpoint: the process itself commits it to ``endpoint.json`` and grows the server's
workers, so provisioning finishes even when whoever started it has exited (an Airflow task that deferred).
Until then the version that was serving goes on serving.

Progress is ``deployments/<name>/provision.json``: ``{"version", "state", "pid", "error"}`` with Azure's
provisioning states; the process's output is ``deployments/<name>/logs/provision-v<version>.log``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from mlrunway.backend.types import ProvisioningState
from mlrunway.local import records
from mlrunway.local.files import write_json
from mlrunway.local.processes import group_alive, terminate_group
from mlrunway.local.serving import master
from mlrunway.local.serving.state import DeploymentState, EndpointState
from mlrunway.locks import locked

RECORD = "provision.json"


def state_lock(endpoint_dir: Path) -> Path:
    """The lock every read-modify-write of ``endpoint.json`` holds (control plane and provisioning process)."""
    return endpoint_dir / ".state.lock"


def record_path(endpoint_dir: Path, name: str) -> Path:
    return endpoint_dir / "deployments" / name / RECORD


def read(endpoint_dir: Path, name: str) -> dict[str, Any] | None:
    """The deployment's provisioning record; None when it has none
    (:class:`~mlrunway.local.records.DamagedRecord` when it cannot be used)."""
    path = record_path(endpoint_dir, name)
    return records.read(path, "restore it, or create the deployment again") if path.exists() else None


def last_version(endpoint_dir: Path, name: str) -> int:
    """The version its provisioning record names; 0 when it has none, or one that cannot be read (the endpoint's
    own state and its retired versions still keep a number from being taken twice)."""
    with contextlib.suppress(records.DamagedRecord):
        if (record := read(endpoint_dir, name)) is not None:
            return int(record.get("version", 0))
    return 0


def _write(endpoint_dir: Path, name: str, **fields: Any) -> None:
    path = record_path(endpoint_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        kept = read(endpoint_dir, name) or {}
    except records.DamagedRecord:  # written anew: what this write says is what is known
        kept = {}
    write_json(path, {**kept, **fields})


def start(endpoint_dir: Path, deployment: DeploymentState, *, creating: bool) -> subprocess.Popen[bytes]:
    """Launch the provisioning process of ``deployment`` and record it as Creating (Updating for a new version of
    a deployment that serves)."""
    logs = endpoint_dir / "deployments" / deployment.name / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    state = ProvisioningState.CREATING if creating else ProvisioningState.UPDATING
    _write(endpoint_dir, deployment.name, version=deployment.version, state=state.value, pid=None, error=None)
    with open(logs / f"provision-v{deployment.version}.log", "wb") as log:
        # The deployment (its environment variables may hold secrets) goes through a pipe, never the command line
        # that any local user can read with ps.
        proc = subprocess.Popen([sys.executable, "-m", "mlrunway.local.serving.provision", str(endpoint_dir)],
                                stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(asdict(deployment)).encode())
        proc.stdin.close()
    _write(endpoint_dir, deployment.name, pid=proc.pid)
    return proc


def current(endpoint_dir: Path, name: str) -> tuple[ProvisioningState, str | None] | None:
    """The deployment's provisioning state and error; a process that died without a word is a failure."""
    try:
        record = read(endpoint_dir, name)
    except records.DamagedRecord as exc:
        return ProvisioningState.FAILED, str(exc)
    if record is None:
        return None
    state = ProvisioningState(record["state"])
    if not state.is_terminal() and record.get("pid") and not group_alive(record["pid"]):
        record = read(endpoint_dir, name) or record  # it may have finished between the two reads
        state = ProvisioningState(record["state"])
        if not state.is_terminal():
            log = _log_tail(endpoint_dir, name, record.get("version", 0))
            _write(endpoint_dir, name, state=ProvisioningState.FAILED.value,
                   error=f"the provisioning process exited without a result; log tail:\n{log}")
            record = read(endpoint_dir, name) or record
            state = ProvisioningState.FAILED
    return state, record.get("error")


def stop(endpoint_dir: Path, name: str) -> bool:
    """Stop a provisioning still under way (the deployment is canceled); False when none was (or none is known:
    its record cannot be read)."""
    try:
        record = read(endpoint_dir, name)
    except records.DamagedRecord:
        return False
    if record is None or ProvisioningState(record["state"]).is_terminal() or not record.get("pid"):
        return False
    terminate_group(record["pid"], None, 5)
    _write(endpoint_dir, name, state=ProvisioningState.CANCELED.value, error="provisioning was stopped")
    return True


def _log_tail(endpoint_dir: Path, name: str, version: int, lines: int = 15) -> str:
    path = endpoint_dir / "deployments" / name / "logs" / f"provision-v{version}.log"
    return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) if path.exists() else ""


def _commit(endpoint_dir: Path, deployment: DeploymentState) -> None:
    """Join the endpoint: the deployment's new version replaces the old; workers grow to what it asks for."""
    with locked(state_lock(endpoint_dir)):
        state = EndpointState.load(endpoint_dir)
        state.deployments[deployment.name] = deployment
        grow = max(0, deployment.workers - state.workers)
        if grow and state.pid and master.alive(state):
            for _ in range(grow):  # uvicorn adds a worker per SIGTTIN; the others keep serving
                psutil.Process(state.pid).send_signal(signal.SIGTTIN)
            state.workers = deployment.workers
        state.save(endpoint_dir)


def main() -> None:
    from mlrunway.serving import capture
    from mlrunway.serving.runtime import load_deployment

    endpoint_dir, deployment = Path(sys.argv[1]), DeploymentState(**json.loads(sys.stdin.read()))
    try:
        load_deployment(endpoint_dir, deployment)
        capture.WRITER.flush()  # what init() collected, if anything
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        tail = _log_tail(endpoint_dir, deployment.name, deployment.version)
        error: str | None = f"score.py init() raised; log tail:\n{tail}"
    else:
        error = None
    if not (endpoint_dir / "endpoint.json").exists():  # the endpoint was deleted meanwhile: nothing to report to
        sys.exit(1)
    if error is None:
        _commit(endpoint_dir, deployment)
    _write(endpoint_dir, deployment.name, state=(ProvisioningState.FAILED if error else ProvisioningState.SUCCEEDED).value,
           error=error)
    sys.exit(1 if error else 0)


if __name__ == "__main__":
    main()
