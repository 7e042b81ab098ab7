"""What an optional part of mlrunway needs, said where it is first needed: a missing extra fails with the
``pip install`` that fixes it, never an ``ImportError`` from deep inside a task.

The base install (what every Airflow component needs to parse the DAGs and orchestrate) has no torch, onnx,
onnxruntime, mlflow, optuna, pandas or scikit-learn; they come with the extras of ``pyproject.toml``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from mlrunway.errors import MlrunwayError

__all__ = ["BACKEND_EXTRAS", "MissingExtra", "installed_version", "require"]

# The extra each of mlrunway's own backends needs, by connection type, and the modules that show it is installed.
BACKEND_EXTRAS = {"mlrunway_local": ("local", ("mlflow", "optuna", "psutil", "uvicorn", "starlette")),
                  "azure_ml": ("azure", ("azure.ai.ml", "azure.identity", "azure.monitor.query")),
                  "mlrunway_ray": ("ray", ("mlflow", "requests"))}
TORCH_FIRST = " (torch first, from PyTorch's CPU or CUDA index: docs/how-to/install.md)"


class MissingExtra(MlrunwayError):
    """An optional part of mlrunway used where its extra is not installed."""


def require(what: str, extra: str, *modules: str) -> None:
    """Find each of ``modules`` (without importing it: a check costs no import), or raise :class:`MissingExtra`
    naming the ``pip install`` of ``extra``."""
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # its parent package is missing (azure.ai.ml without azure)
            found = False
        if not found:
            first = TORCH_FIRST if extra in ("export", "local") else ""
            raise MissingExtra(f"{what} needs {module}, which is not installed here: pip install "
                               f"\"mlrunway[{extra}]\"{first}")


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` without its local build tag (``2.13.0+cpu`` -> ``2.13.0``)."""
    try:
        return importlib.metadata.version(distribution).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None
