"""An endpoint's state on disk (``endpoints/<name>/endpoint.json``), shared by the control plane and the server.

The control plane writes it atomically; every server worker re-reads it when it changes, so a traffic update
or a new deployment version reaches all workers without a restart and without dropping a request in flight.
The file holds the keys, so it is created with mode 0600.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.local.files import write_json
from mlrunway.local.records import read

STATE_FILE = "endpoint.json"
MAX_BODY_BYTES = 1024 * 1024  # a request body over this size is refused with 413
# The limits the server enforces before the app (mlrunway.local.serving.guard), set when an endpoint is created.
SERVER_LIMITS = ("max_header_bytes", "max_headers", "header_timeout_s", "body_timeout_s", "send_timeout_s")


def new_key() -> str:
    return secrets.token_urlsafe(32)


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
    # Enforced by the server before the app (mlrunway.local.serving.guard): a request's head, how long a client
    # may take to send its head and its body, and to take its answers.
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    send_timeout_s: float = 30.0

    @property
    def scoring_uri(self) -> str:
        return f"http://{self.host}:{self.port}/score"

    @property
    def provisioning_state(self) -> str:
        """Saved state belongs to a server that answered (a failed start removes nothing but raises)."""
        return "Succeeded"

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / STATE_FILE
        write_json(path, asdict(self))
        os.chmod(path, 0o600)
        bump_generation(folder)

    @classmethod
    def load(cls, folder: Path) -> EndpointState:
        data = read(folder / STATE_FILE, "restore it, or delete the endpoint (its server is found and stopped without "
                                         "the record)")
        data["deployments"] = {n: DeploymentState(**d) for n, d in data.get("deployments", {}).items()}
        return cls(**data)


GENERATION_FILE = "generation"  # 8 bytes the control plane bumps after each save; workers map it into memory


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


def check_traffic(traffic: dict[str, int], mirror: dict[str, int], deployments: dict[str, DeploymentState]) -> None:
    """Weights are integers 0..100 that sum to 0 or 100; mirror traffic goes to one deployment, at most 50%."""
    for label, weights in (("traffic", traffic), ("mirror_traffic", mirror)):
        for name, weight in weights.items():
            if name not in deployments:
                raise check.fail(f"endpoint.{label}.{name}", "names no deployment of this endpoint",
                                  f"create it first or use one of {sorted(deployments) or 'none yet'}")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
                raise check.fail(f"endpoint.{label}.{name}", f"{weight!r} is not an integer percentage", "use 0 to 100")
    total = sum(traffic.values())
    if total not in (0, 100):
        raise check.fail("endpoint.traffic", f"weights sum to {total}", "make them sum to 100 (or 0 for no traffic)")
    live = {n: w for n, w in mirror.items() if w}
    if len(live) > 1 or sum(live.values()) > 50:
        raise check.fail("endpoint.mirror_traffic", f"{live} is over the limit", "mirror at most 50% to one deployment")
    if any(traffic.get(n, 0) for n in live):
        raise check.fail("endpoint.mirror_traffic", "targets a deployment that has live traffic", "mirror to one with 0%")
