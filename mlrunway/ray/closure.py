"""What of mlrunway a controller job needs on the cluster: the files of the modules it imports, at any depth and
inside functions too (:mod:`modulefinder` reads their bytecode), never the whole package nor the operators. They
travel as the job's ``py_modules``; the cluster's Python brings the rest (pydantic, scipy, requests, the MLflow
client; Optuna for bayesian sampling)."""

from __future__ import annotations

import functools
import modulefinder
from pathlib import Path

import mlrunway

__all__ = ["CONTROLLER", "modules", "package"]

CONTROLLER = ("mlrunway.ray.sweep_controller", "mlrunway.sweep.bayesian")
# Files a module of the closure reads rather than imports: the jobs module ships the distributed driver beside each
# job's entry (a controller submits trials that may be distributed).
READS = {"mlrunway/ray/jobs.py": ("mlrunway/ray/ranks.py",)}
# What the cluster's Python must have for the controller (the docs and preflight name them).
NEEDS = ("pydantic", "scipy", "numpy", "requests", "mlflow")


@functools.cache
def modules(roots: tuple[str, ...] = CONTROLLER) -> tuple[Path, ...]:
    """The files of every mlrunway module ``roots`` import, with their packages' ``__init__.py``, sorted."""
    base = Path(mlrunway.__file__).resolve().parent.parent
    finder = modulefinder.ModuleFinder(path=[str(base)])
    for root in roots:
        finder.run_script(str(base / (root.replace(".", "/") + ".py")))
    found = {name: getattr(module, "__file__", None) for name, module in finder.modules.items()}
    files = {Path(path).resolve() for name, path in found.items()
             if (name == "mlrunway" or name.startswith("mlrunway.")) and path}
    files.update(base / (root.replace(".", "/") + ".py") for root in roots)
    files.update(base / read for path in list(files) for read in READS.get(path.relative_to(base).as_posix(), ()))
    for path in list(files):  # every package on the way, so each import finds its parent
        for parent in path.parents:
            if parent == base:
                break
            files.add(parent / "__init__.py")
    return tuple(sorted(p for p in files if p.is_file()))


def package(roots: tuple[str, ...] = CONTROLLER) -> tuple[Path, list[Path]]:
    """The folder the files are relative to (the one that holds ``mlrunway/``) and the files."""
    return Path(mlrunway.__file__).resolve().parent.parent, list(modules(roots))
