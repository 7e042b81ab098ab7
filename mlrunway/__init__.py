"""mlrunway: the PyTorch model lifecycle (train, sweep, pick, ONNX, deploy, clean up) on Azure ML or locally.

The layers, each enforced by import-linter (``make test``): the core (``specs``, ``early_termination``,
``sweep``, ``backend``, ``pipeline``, ``report``, ``production``, ``deploy``, ``onnx_export``, ``data``, ``check``,
``errors``) imports no backend and no Airflow; the backends (``local``, ``azure``) never import each other;
``airflow`` is the only package that imports Airflow, and it imports no backend.
"""

from __future__ import annotations

__all__ = ["airflow", "azure", "backend", "check", "data", "deploy", "early_termination", "errors", "local",
           "onnx_export", "pipeline", "production", "report", "specs", "sweep"]
