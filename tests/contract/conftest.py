"""The backends the contract suite runs on, listed once in :data:`BACKENDS`, and the fixtures it takes.

Each contract test asks for ``backend`` and runs once per entry (ids ``[local]``, ``[azure]``, ``[fake]``): a new
backend is one line of :data:`BACKENDS`, a factory that sets it up in a test's own folder, yields it with its
:class:`Driver`, and tears it down. The driver brings a job to a state the same way on every backend (a real
process locally, the scripted statuses of a fake), so a test never asks which backend it runs on. A capability a
backend lacks is a declared skip naming it (:func:`require`), never a silent pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import JobStatus
from mlrunway.specs.job import CommandJobSpec

# What a contract job runs: a Python one-liner's worth, so a real process ends within a second.
JOB_SCRIPT = "print('contract job ran')\n"


@dataclass
class Driver:
    """What the tests ask of a backend beyond the contract, answered the same way on each.

    :param root: the test's own folder (code and model files are written under it).
    :param wait_s: how long a test waits for a job to end.
    """

    root: Path
    wait_s: float = 60.0
    made: list[str] = field(default_factory=list)

    def job_spec(self, **changes: Any) -> CommandJobSpec:
        """A command job every backend runs to Completed: ``python job.py`` in a code folder of one file."""
        code = self.root / "code"
        code.mkdir(parents=True, exist_ok=True)
        (code / "job.py").write_text(JOB_SCRIPT)
        return CommandJobSpec(**{"code": str(code), "command": "python job.py", "experiment_name": "contract",
                                 **changes})

    def model_folder(self, name: str = "model", text: str = "weights") -> Path:
        """A folder of model files to register (one small file)."""
        folder = self.root / "models" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "weights.txt").write_text(text)
        return folder


Factory = Callable[[Path, pytest.MonkeyPatch], contextlib.AbstractContextManager[tuple[Backend, Driver]]]


@contextlib.contextmanager
def local_backend(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Backend, Driver]]:
    """The local backend in a workspace of the test's own: its jobs are real processes."""
    from mlrunway.local.backend import LocalBackend
    from mlrunway.local.workspace import Workspace

    backend = LocalBackend(Workspace.at(root / "ws"))
    backend.jobs.kill_grace_s = 2.0
    backend.jobs.wait_poll_s = 0.05  # its pause ends as soon as the job's status file changes
    try:
        yield backend, Driver(root)
    finally:  # nothing of a test's jobs outlives it
        for job in backend.jobs.list():
            if not job.status.is_terminal():
                backend.jobs.cancel(job.name, reason="the contract test ended")


@contextlib.contextmanager
def azure_backend(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Backend, Driver]]:
    """The Azure backend on the real ``MLClient`` over the fake Azure ML service (tests/mlrunway/azure): jobs go
    Queued, Running, Completed over its reads. A request the fake holds to no contract fails the test."""
    from mlrunway.azure.backend import AzureBackend
    from tests.mlrunway.azure.fake_azureml import (
        RESOURCE_GROUP,
        SUBSCRIPTION,
        WORKSPACE,
        FakeAzureML,
        FakeCredential,
        route_blob_storage,
    )

    (root / "service").mkdir(parents=True)
    service = FakeAzureML(root / "service")
    route_blob_storage(service, monkeypatch)
    connection = {"subscription_id": SUBSCRIPTION, "resource_group": RESOURCE_GROUP, "workspace_name": WORKSPACE,
                  "compute": "cpu-cluster", "cache_dir": str(root / "cache"), "reports_folder": str(root / "reports")}
    backend = AzureBackend.from_connection(connection, credential=FakeCredential(), transport=service,
                                           polling_interval=0, retry_backoff_factor=0.0)
    backend.jobs.poll_s = backend.jobs.wait_poll_s = backend.endpoints.provision_poll_s = 0.0
    yield backend, Driver(root)
    assert not service.no_schema, "\n".join(service.no_schema)


@contextlib.contextmanager
def fake_backend(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Backend, Driver]]:
    """The shipped scripted backend: an unscripted job completes at its first read."""
    from mlrunway.backend.fake import FakeBackend

    yield FakeBackend(root / "fake"), Driver(root)


# Every backend the contract runs on, by the id its tests carry. A backend added later is one line here.
BACKENDS: dict[str, Factory] = {
    "local": local_backend,
    "azure": azure_backend,
    "fake": fake_backend,
}

_DRIVER = pytest.StashKey[Driver]()


@pytest.fixture(params=list(BACKENDS), ids=list(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """Each backend of :data:`BACKENDS` in turn, set up in the test's own folder and torn down after it."""
    with BACKENDS[request.param](tmp_path, monkeypatch) as (made, driver):
        request.node.stash[_DRIVER] = driver
        yield made


@pytest.fixture
def driver(backend: Backend, request: pytest.FixtureRequest) -> Driver:
    """The driver that came with this test's ``backend``."""
    return request.node.stash[_DRIVER]


def require(backend: Backend, capability: type) -> Any:
    """The part of ``backend`` (itself, its jobs, models or endpoints) that is ``capability``; a declared skip
    naming the backend and the capability where none is."""
    for part in (backend, backend.jobs, backend.models, backend.endpoints):
        if isinstance(part, capability):
            return part
    pytest.skip(f"{backend.kind} has no {capability.__name__}")


def completed(backend: Backend, name: str, driver: Driver) -> None:
    """Submit ``name`` (the driver's job) and wait for it to end Completed."""
    backend.jobs.submit(name, driver.job_spec())
    info = backend.jobs.wait(name, timeout=driver.wait_s)
    assert info.status is JobStatus.COMPLETED, info.error
