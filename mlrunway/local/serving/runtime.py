"""What each server worker holds: the endpoint state it last read and one loaded score.py per deployment version.

A deployment's ``init()`` runs once per worker (the ONNX Runtime session is created once). Several deployments
share a worker, each score.py loaded as its own module; ``AZUREML_MODEL_DIR`` is set for the duration of its
``init()`` under a lock, since the environment is process-wide.
"""

from __future__ import annotations

import importlib.util
import logging
import mmap
import os
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from mlrunway.local.serving import capture
from mlrunway.local.serving.state import GENERATION_FILE, STATE_FILE, DeploymentState, EndpointState

_INIT_LOCK = threading.Lock()


@dataclass
class LoadedDeployment:
    state: DeploymentState
    module: ModuleType
    log: logging.Logger
    capture: capture.Target | None = None  # its payload logging (request, response), when it has any


def deployment_logger(endpoint_dir: Path, name: str) -> logging.Logger:
    """The deployment's log (``deployments/<name>/logs/score.log``), shared by all workers through append."""
    log = logging.getLogger(f"mlrunway.deployment.{endpoint_dir.name}.{name}")
    if not log.handlers:
        folder = endpoint_dir / "deployments" / name / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(folder / "score.log")
        handler.setFormatter(logging.Formatter(f"%(asctime)s pid={os.getpid()} %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def load_deployment(endpoint_dir: Path, state: DeploymentState) -> LoadedDeployment:
    log = deployment_logger(endpoint_dir, state.name)
    script = Path(state.code_dir) / state.scoring_script
    spec = importlib.util.spec_from_file_location(f"mlrunway_score_{state.name}_v{state.version}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    collector = capture.target(endpoint_dir, state.name, state.model or state.model_dir, state.data_collector,
                               state.capture_max_bytes, log)
    with _INIT_LOCK, capture.collecting(collector, state.name, state.version):
        saved = {k: os.environ.get(k) for k in ("AZUREML_MODEL_DIR", *state.environment_variables)}
        os.environ.update({"AZUREML_MODEL_DIR": state.model_dir, **state.environment_variables})
        try:
            spec.loader.exec_module(module)
            module.init()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    log.info("init() done: deployment %s version %s, model %s", state.name, state.version, state.model or state.model_dir)
    return LoadedDeployment(state, module, log, collector if collector and collector.settings.payload else None)


class Runtime:
    """The worker's view of its endpoint; ``current()`` is cheap (one stat) and reloads only on change."""

    def __init__(self, endpoint_dir: Path) -> None:
        self.dir = endpoint_dir
        self._state_path = str(endpoint_dir / STATE_FILE)
        self._stamp: bytes | tuple[int, int] | None = None
        self._map: mmap.mmap | None = None
        self._state: EndpointState | None = None
        self._loaded: dict[tuple[str, int], LoadedDeployment] = {}
        self._lock = threading.Lock()
        self._random = random.Random()

    def current(self) -> EndpointState:
        """The state as last saved: reloaded when the control plane's generation counter moved (a read of
        mapped memory per request, no system call)."""
        generation = self._generation()
        if generation != self._stamp or self._state is None:
            self._state, self._stamp = EndpointState.load(self.dir), generation
        return self._state

    def _generation(self) -> bytes | tuple[int, int]:
        if self._map is None:
            path = self.dir / GENERATION_FILE
            if not path.exists():  # an endpoint saved before counters existed: the file's stamp, as before
                info = os.stat(self._state_path)
                return (info.st_ino, info.st_mtime_ns)
            with open(path, "rb") as handle:
                self._map = mmap.mmap(handle.fileno(), 8, access=mmap.ACCESS_READ)
        return self._map[:8]

    def loaded(self, state: EndpointState, name: str) -> LoadedDeployment | None:
        """The deployment's current version if this worker has loaded it already: no I/O, no init()."""
        wanted = state.deployments.get(name)
        return None if wanted is None else self._loaded.get((name, wanted.version))

    def deployment(self, name: str) -> LoadedDeployment | None:
        """The loaded deployment for the state's current version, loading it on first use in this worker."""
        state = self.current()
        wanted = state.deployments.get(name)
        if wanted is None:
            return None
        key = (name, wanted.version)
        loaded = self.loaded(state, name)
        if loaded is None:
            with self._lock:
                loaded = self._loaded.get(key) or load_deployment(self.dir, wanted)
                self._loaded = {k: v for k, v in self._loaded.items() if k[0] != name} | {key: loaded}
        return loaded

    def choose(self, state: EndpointState) -> str | None:
        """A deployment by traffic weight, or None when no deployment has traffic."""
        weights = {n: w for n, w in state.traffic.items() if w > 0}
        if len(weights) <= 1:  # the usual case, one deployment at 100%: no draw
            return next(iter(weights), None)
        return self._random.choices(list(weights), weights=list(weights.values()))[0]

    def mirror_target(self, state: EndpointState) -> str | None:
        for name, percent in state.mirror_traffic.items():
            if percent and self._random.random() * 100 < percent:
                return name
        return None

    def ready(self) -> bool:
        """Load every deployment that has traffic; ready when all load."""
        return all(self.deployment(n) is not None for n, w in self.current().traffic.items() if w > 0)
