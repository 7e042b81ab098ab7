"""What each server worker holds: the endpoint state it last read and one loaded score.py per deployment version.

A deployment's ``init()`` runs once per worker (the ONNX Runtime session is created once). Several deployments
share a worker, each score.py loaded as its own module; ``AZUREML_MODEL_DIR`` is set for the duration of its
``init()`` under a lock, since the environment is process-wide.

score.py is loaded as Azure ML's scoring server loads it (azureml-inference-server-http: the code folder
**appended** to ``sys.path``, the script by ``spec_from_file_location``, the working directory unchanged), so
``import vocab`` finds the module beside it. Unlike Azure, where each deployment has processes of its own, the
deployments of a local endpoint share their workers, and so ``sys.modules``: the folder is on ``sys.path`` only
while score.py is imported and its ``init()`` runs, and the modules loaded from it are then taken out of
``sys.modules`` (score.py keeps its references), so the next deployment or version that imports a module of the
same name loads its own. An ``import`` of a code-folder module inside ``run()`` (a lazy import) cannot be told
apart within one process: :class:`CodeModules`, first on ``sys.meta_path``, refuses it with an ImportError that
says so, instead of silently loading another deployment's module; it knows which thread is loading which folder,
so this holds while another deployment's ``init()`` runs beside a ``run()``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import mmap
import os
import random
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from mlrunway.serving import capture
from mlrunway.serving.state import GENERATION_FILE, STATE_FILE, DeploymentState, EndpointState

# Reads an endpoint's state from its folder: each backend keeps the state its own way (the local backend, the
# workspace's endpoint.json with its format version).
StateLoader = Callable[[Path], EndpointState]

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


class CodeModules(importlib.abc.MetaPathFinder):
    """Which deployment's code folder provides which top-level module names, and which folder the current thread
    is loading. First on ``sys.meta_path``: an import of a name some code folder provides, by a thread that is not
    loading that folder (a lazy import in ``run()``), is refused with an ImportError that says why, unless the name
    is found outside every code folder (an installed package of the same name, which Azure's appended folder would
    not shadow either). Every other import passes through untouched."""

    def __init__(self) -> None:
        self._loading = threading.local()
        self._owners: dict[str, str] = {}  # code folder -> "deployment blue version 3"
        self._names: dict[str, set[str]] = {}  # module name -> the code folders that provide it

    def register(self, folder: str, owner: str) -> None:
        self._owners[folder] = owner
        for name in _top_level_modules(Path(folder)):
            self._names.setdefault(name, set()).add(folder)

    @contextmanager
    def loading(self, folder: str) -> Iterator[None]:
        """The current thread imports from ``folder`` meanwhile (score.py's import and init()). Its modules are in
        ``sys.modules`` then, where an import statement finds them before any finder: ``__import__`` is guarded
        meanwhile, so another thread's ``import helper`` (a run() beside this init()) is refused, not given them."""
        import builtins

        self._loading.folder = folder
        original = builtins.__import__
        loader = threading.get_ident()

        def guarded(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
            if level == 0 and threading.get_ident() != loader:
                module = sys.modules.get(name.partition(".")[0])
                if module is not None and _from_folder(module, folder):
                    raise self._refusal(name.partition(".")[0], {folder})
            return original(name, globals, locals, fromlist, level)

        builtins.__import__ = guarded
        try:
            yield
        finally:
            builtins.__import__ = original
            self._loading.folder = None

    def _refusal(self, name: str, folders: set[str]) -> ImportError:
        owners = ", ".join(sorted(self._owners[folder] for folder in folders))
        return ImportError(
            f"import {name!r} outside score.py's import and init(): the local endpoint loads a deployment's own "
            f"modules ({name!r} is {owners}'s) only while its score.py is imported and init() runs, because its "
            "deployments share worker processes and a lazy import cannot tell whose module it means; import it at "
            "the top of score.py or in init() (on Azure ML each deployment has processes of its own)", name=name)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        folders = self._names.get(fullname)
        if not folders or path is not None or getattr(self._loading, "folder", None) is not None:
            return None  # the loading thread sees its own folder, appended to sys.path, as Azure's server does
        elsewhere = [entry for entry in sys.path if entry not in self._owners]
        if importlib.machinery.PathFinder.find_spec(fullname, elsewhere) is not None:
            return None
        raise self._refusal(fullname, folders)


def _top_level_modules(folder: Path) -> set[str]:
    """The names ``import x`` finds in ``folder``: ``x.py`` and packages ``x/__init__.py``."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return set()
    return {entry.stem for entry in entries if entry.suffix == ".py" and entry.is_file()} | {
        entry.name for entry in entries if (entry / "__init__.py").is_file()}


CODE_MODULES = CodeModules()  # first on sys.meta_path once a deployment loads in this process


def _from_folder(module: ModuleType, folder: str) -> bool:
    """Whether ``module`` was loaded from ``folder``: its file, or (a namespace package) one of its paths."""
    try:  # a module with a __getattr__ of its own (torch.classes) answers any name with an object of its own
        places = [getattr(module, "__file__", None), *(getattr(module, "__path__", None) or [])]
    except Exception:  # noqa: BLE001 - whatever such an attribute raises, it is no path of ours
        places = [getattr(module, "__file__", None)]
    return any(isinstance(p, str) and os.path.abspath(p).startswith(folder + os.sep) for p in places)


def load_deployment(endpoint_dir: Path, state: DeploymentState) -> LoadedDeployment:
    """Import the deployment version's score.py and run its ``init()``, as Azure ML's scoring server does (see the
    module's docstring), its code folder's modules its own."""
    log = deployment_logger(endpoint_dir, state.name)
    folder = os.path.abspath(state.code_dir)
    script = Path(folder) / state.scoring_script
    spec = importlib.util.spec_from_file_location(f"mlrunway_score_{state.name}_v{state.version}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    collector = capture.target(endpoint_dir, state.name, state.model or state.model_dir, state.data_collector,
                               state.capture_max_bytes, log)
    with _INIT_LOCK, capture.collecting(collector, state.name, state.version):
        saved = {k: os.environ.get(k) for k in ("AZUREML_MODEL_DIR", *state.environment_variables)}
        os.environ.update({"AZUREML_MODEL_DIR": state.model_dir, **state.environment_variables})
        if CODE_MODULES not in sys.meta_path:
            sys.meta_path.insert(0, CODE_MODULES)
        CODE_MODULES.register(folder, f"deployment {state.name} version {state.version}")
        appended = folder not in sys.path
        if appended:
            sys.path.append(folder)
        try:
            with CODE_MODULES.loading(folder):
                spec.loader.exec_module(module)
                module.init()
        finally:
            if appended and folder in sys.path:
                sys.path.remove(folder)
            for name, loaded in list(sys.modules.items()):  # score.py holds its references; the next loads its own
                if _from_folder(loaded, folder):
                    sys.modules.pop(name, None)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    log.info("init() done: deployment %s version %s, model %s", state.name, state.version, state.model or state.model_dir)
    return LoadedDeployment(state, module, log, collector if collector and collector.settings.payload else None)


class Runtime:
    """The worker's view of its endpoint; ``current()`` is cheap (one stat) and reloads only on change."""

    def __init__(self, endpoint_dir: Path, load_state: StateLoader) -> None:
        self.dir = endpoint_dir
        self._load_state = load_state
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
            self._state, self._stamp = self._load_state(self.dir), generation
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
