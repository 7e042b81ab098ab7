"""The backends the contract suite runs on, listed once in :data:`BACKENDS`, and the fixtures it takes.

Each contract test asks for ``backend`` and runs once per entry (ids ``[local]``, ``[azure]``, ``[fake]``): a new
backend is one line of :data:`BACKENDS`, a factory that sets it up in a test's own folder, yields it with its
:class:`Driver`, and tears it down. The driver brings a job to a state the same way on every backend (a real
process locally, the scripted statuses of a fake), so a test never asks which backend it runs on. A capability a
backend lacks is a declared skip naming it (:func:`require`), never a silent pass.

A backend whose set-up is costly (a cluster) is not in :data:`BACKENDS` but in :data:`COSTLY`, and runs the contract
from one file of its own, so that under ``pytest --dist loadfile`` it is set up once per worker that runs that file.
Its entry sets up the costly part once, in a folder of the file's own, and yields the factory of each test's backend
over it (a fresh workspace per test, the cluster shared). The Ray backend adds itself with one entry::

    COSTLY = {"ray": ray_set_up}  # ray_set_up(root) starts the cluster, yields a Factory of backends on it

and one file, ``tests/contract/test_on_ray.py``, which calls ``collect_on("ray", globals())`` (and holds every other
test that needs the cluster: one file, one cluster per worker).

:func:`collect_on` puts every contract test (and the fixtures of the modules they come from) into that file, with
``backend`` and ``module_backend`` made over the costly backend, ids ``[ray]``: ``--collect-only`` lists each contract
test once per backend of :data:`BACKENDS` and once per costly one. tests/contract/test_on_standin.py proves it on a
stand-in (the fake backend, registered there under ``standin``, counting its set-ups).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _pytest.fixtures import FixtureFunctionDefinition  # pytest exports no name for a fixture's definition

from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import JobStatus
from mlrunway.specs.job import CommandJobSpec

# What a contract job runs: a Python one-liner's worth, so a real process ends within a second.
JOB_SCRIPT = "print('contract job ran')\n"
# What a contract deployment serves (stage 2b): Azure ML's init()/run() over the model folder's weights.txt.
SCORE_SCRIPT = """\
import json, os

def init():
    global weights
    found = [os.path.join(d, 'weights.txt') for d, _, files in os.walk(os.environ['AZUREML_MODEL_DIR'])
             if 'weights.txt' in files]
    with open(found[0]) as f:
        weights = f.read()

def run(raw_data):
    return {'weights': weights, 'echo': json.loads(raw_data)}
"""


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

    # -- stage 2b: endpoints, models, capabilities
    def score_code(self) -> Path:
        """A code folder whose score.py answers each request with its model's ``weights.txt`` and the request."""
        code = self.root / "score"
        code.mkdir(parents=True, exist_ok=True)
        (code / "score.py").write_text(SCORE_SCRIPT)
        return code

    # -- stage 2a: jobs, sweeps, outputs
    # What scripts jobs where they are not real processes: the Azure fake service (its compute runs only commands
    # tagged with a role, as mlrunway's own jobs are) or the FakeBackend (it runs nothing: each outcome is scripted).
    service: Any = None

    def _script_spec(self, name: str, script: str, args: str = "", **changes: Any) -> CommandJobSpec:
        """``python job.py <args>`` over ``script`` in a code folder of job ``name``'s own, tagged with a role."""
        from mlrunway.specs.job import ROLE_TAG

        code = self.root / f"code-{name}"
        code.mkdir(parents=True, exist_ok=True)
        (code / "job.py").write_text(script)
        return CommandJobSpec(**{"code": str(code), "command": f"python job.py {args}".strip(),
                                 "experiment_name": "contract", "tags": {ROLE_TAG: "contract"}, **changes})

    def _azure(self) -> bool:
        return self.service is not None and not hasattr(self.service, "jobs")

    def failing(self, backend: Backend, name: str, why: str) -> None:
        """Submit job ``name``, whose script exits with ``why`` (the fake: scripted Failed with it)."""
        if self.service is not None and not self._azure():
            self.service.jobs.script(name, JobStatus.FAILED, error=f"exit code 1: {why}")
        backend.jobs.submit(name, self._script_spec(name, f"raise SystemExit({why!r})\n"))

    def running(self, backend: Backend, name: str) -> None:
        """Submit job ``name``, which runs until it is canceled (the services: Running from its first read on)."""
        if self.service is not None and not self._azure():
            self.service.jobs.script(name, JobStatus.RUNNING)
        backend.jobs.submit(name, self._script_spec(name, "import time\ntime.sleep(300)\n"))
        if self._azure():
            self.service.job_script[name] = ["Running"]  # the last status read stays

    def printing(self, backend: Backend, name: str, line: str) -> None:
        """Submit job ``name``, which prints ``line``; a declared skip where the backend keeps no job's output."""
        if self.service is not None and not self._azure():
            pytest.skip("fake keeps no job's output: its logs are its scripted metrics")
        backend.jobs.submit(name, self._script_spec(name, f"print({line!r})\n"))

    def logging(self, backend: Backend, name: str, values: tuple[float, ...]) -> None:
        """Submit job ``name``, which logs ``values`` of ``best_val_acc`` to its MLflow run, one a step (the Azure
        fake: its run's history, the one metric it keeps)."""
        script = (f"import mlflow\nfor step, value in enumerate({values!r}):\n"
                  "    mlflow.log_metric('best_val_acc', value, step=step)\n")
        backend.jobs.submit(name, self.job_spec() if self.service is not None else self._script_spec(name, script))
        if self._azure():
            self.service.runs[name]["history"] = list(values)
        elif self.service is not None:
            self.service.jobs.logged[name] = {"best_val_acc": values}

    def writing(self, backend: Backend, name: str, files: dict[str, str]) -> None:
        """Submit job ``name``, which writes ``files`` (relative path -> text) to its ``./outputs``, and those under
        ``model/`` to its named output ``model`` (the fake: its scripted output files)."""
        from mlrunway.specs.job import Output

        if self.service is not None and not self._azure():
            self.service.jobs.output_files = dict(files)
        script = (f"import pathlib, sys\nfor path, text in {files!r}.items():\n"
                  "    top, _, rest = path.partition('/')\n"
                  "    target = pathlib.Path(sys.argv[1], rest) if top == 'model' else pathlib.Path('outputs', path)\n"
                  "    target.parent.mkdir(parents=True, exist_ok=True)\n"
                  "    target.write_text(text)\n")
        backend.jobs.submit(name, self._script_spec(name, script, "${{outputs.model}}", outputs={"model": Output()}))

    def sweep(self, backend: Backend, name: str, curves: list[list[float]], *, policy: Any = None,
              stops: dict[int, int] | None = None, pause: float = 0.0) -> None:
        """Submit sweep ``name`` of one trial per curve (grid over them, in order), each logging its curve of
        ``best_val_acc``, maximized. ``stops``: trial index -> the interval ``policy`` stops it at, which the real
        controller decides itself and the services are scripted with; ``pause``: seconds between two values."""
        from mlrunway.specs import Choice, Objective, SweepLimits, SweepSpec

        stops = stops or {}
        values = [",".join(map(str, curve)) for curve in curves]
        trial = self._script_spec(name, CURVE_SCRIPT, "--curve ${{inputs.curve}} --pause ${{inputs.pause}}",
                                  inputs={"curve": values[0], "pause": pause})
        spec = SweepSpec(trial=trial, search_space={"curve": Choice(values=values)}, sampling_algorithm="grid",
                         objective=Objective(primary_metric="best_val_acc"), early_termination=policy,
                         limits=SweepLimits(max_total_trials=len(curves)))
        ran = [curve[: stops.get(index, len(curve))] for index, curve in enumerate(curves)]
        if self._azure():
            from tests.mlrunway.azure.fake_azureml import Trial

            self.service.sweep_trials[name] = [Trial({"curve": value}, history, "Canceled" if i in stops else "Completed")
                                               for i, (value, history) in enumerate(zip(values, ran, strict=True))]
        elif self.service is not None:
            self.service.jobs.set_trials(name, scripted_trials(name, values, ran, stops),
                                         best=f"{name}_trial_{max(range(len(ran)), key=lambda i: max(ran[i]))}")
        backend.jobs.submit_sweep(name, spec)


# A sweep trial's script (stage 2a): one value of its curve a step, a pause apart, so a policy can stop it running.
CURVE_SCRIPT = """\
import argparse, time, mlflow
p = argparse.ArgumentParser(); p.add_argument("--curve"); p.add_argument("--pause", type=float)
a = p.parse_args()
for step, value in enumerate(float(v) for v in a.curve.split(",")):
    mlflow.log_metric("best_val_acc", value, step=step)
    time.sleep(a.pause)
"""


def scripted_trials(name: str, values: list[str], ran: list[list[float]], stops: dict[int, int]) -> list[Any]:
    """The fake backend's trials of a sweep (stage 2a), as :meth:`Driver.sweep` scripts them."""
    from mlrunway.backend.types import TrialInfo

    return [TrialInfo(name=f"{name}_trial_{i}", params={"curve": value}, history=tuple(history),
                      metrics={"best_val_acc": history[-1]},
                      status=JobStatus.CANCELED if i in stops else JobStatus.COMPLETED,
                      early_termination={"reason": "scripted", "interval": stops[i]} if i in stops else None)
            for i, (value, history) in enumerate(zip(values, ran, strict=True))]


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
    yield backend, Driver(root, service=service)
    assert not service.no_schema, "\n".join(service.no_schema)


@contextlib.contextmanager
def fake_backend(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Backend, Driver]]:
    """The shipped scripted backend: an unscripted job completes at its first read; its endpoints score with the
    deployment's score.py, run in-process (stage 2b)."""
    from mlrunway.backend.fake import FakeBackend

    fake = FakeBackend(root / "fake")
    fake.endpoints.scorer = functools.partial(score_in_process, fake)
    yield fake, Driver(root, service=fake)


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
    yield from made_for_test(BACKENDS[request.param], request, tmp_path, monkeypatch)


def made_for_test(factory: Factory, request: pytest.FixtureRequest, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """Yield the backend ``factory`` makes in the test's own folder, its driver stashed for :func:`driver`."""
    with factory(tmp_path, monkeypatch) as (made, driver):
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


# -- stage 2b: endpoints, models, capabilities
@pytest.fixture(scope="module", params=list(BACKENDS), ids=list(BACKENDS))
def module_backend(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Backend, Driver]]:
    """Each backend of :data:`BACKENDS`, set up once for a test module whose set-up is costly (an endpoint)."""
    with pytest.MonkeyPatch.context() as monkeypatch, \
            BACKENDS[request.param](tmp_path_factory.mktemp(request.param), monkeypatch) as made:
        yield made



# -- backends whose set-up is costly (a cluster): each runs the contract from tests/contract/test_on_<id>.py
CostlySetUp = Callable[[Path], contextlib.AbstractContextManager[Factory]]



@dataclass
class RayFactory:
    """The factory of one test's Ray backend over the file's cluster (:func:`ray_set_up`): a namespace of the test's
    own on the cluster and the shared storage, and the MLflow server's registry emptied (one server serves the
    file's tests, and the contract's model tests count versions from 1)."""

    cluster: Any

    @contextlib.contextmanager
    def __call__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Backend, Driver]]:
        import uuid

        from mlrunway.ray.backend import RayBackend
        from mlrunway.ray.tracking import client

        backend = RayBackend.from_connection(self.connection(f"t-{uuid.uuid4().hex[:12]}"), self.cluster.token)
        registry = client(self.cluster.tracking_uri)
        for model in registry.search_registered_models():
            registry.delete_registered_model(model.name)
        backend.jobs.wait_poll_s = 0.2
        try:
            yield backend, Driver(root)
        finally:  # nothing of a test's jobs outlives it: every stop asked at once, then each awaited
            running = [job.name for job in backend.jobs.list() if not job.status.is_terminal()]
            for name in running:
                backend.jobs.request_cancel(name, "the contract test ended")
            for name in running:
                backend.jobs.cancel(name, reason="the contract test ended")

    def connection(self, namespace: str, **changes: Any) -> dict[str, Any]:
        """An ``mlrunway_ray`` connection's fields for this cluster (its token is the connection's password)."""
        return {"address": self.cluster.address, "storage": str(self.cluster.storage),
                "tracking_uri": self.cluster.tracking_uri, "namespace": namespace,
                "profiles": {"cpu": {"num_cpus": 1}}, **changes}


@contextlib.contextmanager
def ray_set_up(root: Path) -> Iterator[Factory]:
    """A real two-node Ray cluster and MLflow server (tests/ray_cluster.py), once for tests/contract/test_on_ray.py."""
    from tests.ray_cluster import ray_cluster

    with ray_cluster(root) as cluster:
        yield RayFactory(cluster)


# Each costly backend by the id its tests carry: its set-up, once for its file in a folder of the file's own, yields
# the factory of one test's backend over it. Not in BACKENDS: the main parametrization never sets it up.
COSTLY: dict[str, CostlySetUp] = {"ray": ray_set_up}


def contract_modules() -> list[ModuleType]:
    """The contract's test modules: each tests/contract/test_*.py but the costly backends' own files."""
    return [importlib.import_module(f"tests.contract.{path.stem}")
            for path in sorted(Path(__file__).parent.glob("test_*.py")) if not path.stem.startswith("test_on_")]


def collect_on(name: str, namespace: dict[str, Any]) -> None:
    """Put every contract test, and its module's fixtures, into ``namespace`` with ``backend`` and ``module_backend``
    made over the costly backend ``name`` of :data:`COSTLY`, whose set-up the file shares (ids ``[<name>]``).

    :param name: the costly backend's id.
    :param namespace: the ``globals()`` of tests/contract/test_on_<name>.py.
    """
    for module in contract_modules():
        assert not hasattr(module, "pytestmark"), f"{module.__name__}: mark its tests one by one, not the module"
        for attr, value in vars(module).items():
            if (attr.startswith("test_") and callable(value)) or isinstance(value, FixtureFunctionDefinition):
                assert namespace.setdefault(attr, value) is value, f"{module.__name__}.{attr}: the name is taken"

    @pytest.fixture(scope="module", params=[name], ids=[name])
    def costly_set_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Factory]:
        """The costly backend set up once for this file: the factory of each test's backend over it."""
        with COSTLY[name](tmp_path_factory.mktemp(name)) as factory:
            yield factory

    @pytest.fixture(name="backend")
    def costly_backend(costly_set_up: Factory, request: pytest.FixtureRequest, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
        """A backend over the costly set-up, in the test's own folder."""
        yield from made_for_test(costly_set_up, request, tmp_path, monkeypatch)

    @pytest.fixture(name="module_backend", scope="module")
    def costly_module_backend(costly_set_up: Factory, tmp_path_factory: pytest.TempPathFactory
                              ) -> Iterator[tuple[Backend, Driver]]:
        """A backend over the costly set-up for a test module whose set-up is costly (an endpoint)."""
        with pytest.MonkeyPatch.context() as monkeypatch, \
                costly_set_up(tmp_path_factory.mktemp(f"{name}-module"), monkeypatch) as made:
            yield made

    # The file imports this module apart from the conftest pytest loads (--import-mode=importlib): its driver
    # fixture reads the key this module's backend fixtures stash the driver under.
    namespace.update(costly_set_up=costly_set_up, backend=costly_backend, module_backend=costly_module_backend,
                     driver=driver)


def score_in_process(fake: Any, payload: Any, deployment: str | None) -> str:
    """The fake backend's answer to an invoke: the deployment's score.py, run on its registered model's files."""
    endpoint = fake.endpoints.invocations[-1][0]  # the invoke being answered is recorded just before it is scored
    settings = fake.endpoints.endpoints[endpoint].settings[deployment]
    script = Path(settings.code_dir) / settings.scoring_script
    spec = importlib.util.spec_from_file_location(f"score_{endpoint}_{deployment}".replace("-", "_"), script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = fake.models.get(settings.model_name, settings.model_version)
    previous = os.environ.get("AZUREML_MODEL_DIR")
    os.environ["AZUREML_MODEL_DIR"] = model.path
    try:
        module.init()
    finally:
        os.environ.pop("AZUREML_MODEL_DIR") if previous is None else os.environ.update(AZUREML_MODEL_DIR=previous)
    return json.dumps(module.run(json.dumps(payload)))
