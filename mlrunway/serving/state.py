"""An endpoint's state as its scoring app reads it: the endpoint (keys, traffic, limits) and its deployments.

The control plane of the backend that runs the endpoint keeps it (the local backend: ``endpoint.json`` in the
endpoint's folder, :mod:`mlrunway.local.serving.state`) and bumps an 8-byte counter, :data:`GENERATION_FILE`,
after each save; every server worker maps the counter and re-reads the state when it moves, so a traffic update
or a new deployment version reaches all workers without a restart and without dropping a request in flight.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GENERATION_FILE", "MAX_BODY_BYTES", "SERVER_LIMITS", "STATE_FILE", "DeploymentState", "EndpointState",
           "bump_generation", "check_limits", "new_key", "write_json"]

STATE_FILE = "endpoint.json"
GENERATION_FILE = "generation"  # 8 bytes the control plane bumps after each save; workers map it into memory
MAX_BODY_BYTES = 1024 * 1024  # a request body over this size is refused with 413
# The limits the server enforces before the app (mlrunway.serving.guard), set when an endpoint is created.
SERVER_LIMITS = ("max_header_bytes", "max_headers", "header_timeout_s", "body_timeout_s", "send_timeout_s")


@dataclass(kw_only=True)
class DeploymentState:
    name: str
    version: int
    model_dir: str
    code_dir: str
    scoring_script: str
    model: str = ""
    workers: int = 1
    environment_variables: dict[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    provisioning_state: str = "Succeeded"
    # Its data collector, in azure-ai-ml's shape (mlrunway.backend.capture), and the bytes its captures may hold.
    data_collector: dict[str, Any] | None = None
    capture_max_bytes: int = 1024 ** 3
    created: float | None = None  # when the deployment of this name was created (updates keep it): its serving hours


@dataclass(kw_only=True)
class EndpointState:
    name: str
    keys: dict[str, str] = field(repr=False)  # never in a log line, should a state ever be logged
    host: str = "127.0.0.1"
    port: int = 0
    pid: int | None = None
    pid_started: float | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(16))  # marks the server's processes
    workers: int = 1
    auth_mode: str = "key"
    traffic: dict[str, int] = field(default_factory=dict)
    mirror_traffic: dict[str, int] = field(default_factory=dict)
    deployments: dict[str, DeploymentState] = field(default_factory=dict)
    # The last version of each deployment deleted: a deployment made again under its name never reuses a version
    # (workers cache a loaded score.py by name and version).
    retired: dict[str, int] = field(default_factory=dict)
    request_timeout_ms: int = 5000
    max_concurrent_requests_per_worker: int = 64
    max_body_bytes: int = MAX_BODY_BYTES
    # Enforced by the server before the app (mlrunway.serving.guard): a request's head, how long a client
    # may take to send its head and its body, and to take its answers.
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    send_timeout_s: float = 30.0

    def remove(self, deployment: str) -> None:
        """Take ``deployment`` out of the endpoint (saved by the caller); one with traffic or mirror traffic is
        refused, naming it: its requests would have nowhere to go."""
        from mlrunway import check

        if self.traffic.get(deployment, 0) or self.mirror_traffic.get(deployment, 0):
            raise check.fail(f"endpoint.traffic.{deployment}", f"deployment {deployment} still has traffic",
                             "set its traffic and mirror traffic to 0 first")
        del self.deployments[deployment]
        self.traffic.pop(deployment, None)
        self.mirror_traffic.pop(deployment, None)

    def save(self, folder: Path) -> None:
        """Write the state (mode 0600: it holds the keys), then tell the workers (:func:`bump_generation`)."""
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / STATE_FILE, asdict(self), mode=0o600)
        bump_generation(folder)

    @classmethod
    def load(cls, folder: Path) -> EndpointState:
        data = json.loads((folder / STATE_FILE).read_text())
        data.pop("format", None)  # a workspace's format stamp (mlrunway.local.formats)
        data["deployments"] = {n: DeploymentState(**d) for n, d in data.get("deployments", {}).items()}
        return cls(**data)

    @property
    def scoring_uri(self) -> str:
        return f"http://{self.host}:{self.port}/score"

    @property
    def provisioning_state(self) -> str:
        """Saved state belongs to a server that answered (a failed start removes nothing but raises)."""
        return "Succeeded"


def check_limits(limits: dict[str, Any]) -> None:
    """The server's limits an endpoint is created with (:data:`SERVER_LIMITS`): counts are whole numbers, timeouts
    any positive number of seconds; a SpecError naming ``endpoint.<limit>`` otherwise."""
    from mlrunway import check

    unknown = sorted(set(limits) - set(SERVER_LIMITS))
    if unknown:
        raise check.fail(f"endpoint.{unknown[0]}", "is not a server limit", f"use one of {', '.join(SERVER_LIMITS)}")
    for name, value in limits.items():
        if name.endswith("_s"):
            if check.number(f"endpoint.{name}", value) <= 0:
                raise check.fail(f"endpoint.{name}", f"{value!r} is not a positive number of seconds",
                                 "pass seconds > 0")
        else:
            check.positive_int(f"endpoint.{name}", value)


def new_key() -> str:
    return secrets.token_urlsafe(32)


def write_json(path: Path, data: Any, *, mode: int | None = None) -> None:
    """Write ``data`` as JSON so that readers see the old file or the new one, never half of one (aside, then renamed
    into place); ``mode``: the file's permissions (a temporary file is made 0600)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, sort_keys=True)
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def bump_generation(folder: Path) -> None:
    """Tell the workers the state changed: one 8-byte counter, written in place (never replaced: the workers
    keep it mapped), so a worker sees a change by reading memory rather than by a system call per request."""
    path = folder / GENERATION_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        current = int.from_bytes(os.pread(fd, 8, 0).ljust(8, b"\0"), "little")
        os.pwrite(fd, (current + 1).to_bytes(8, "little"), 0)
    finally:
        os.close(fd)
