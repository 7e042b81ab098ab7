"""The local backend: named jobs as supervised processes (torchrun for PyTorch distribution), MLflow tracking
and a model registry in one workspace folder, and online endpoints on 127.0.0.1 (``serving``).

Import :class:`mlrunway.local.backend.LocalBackend`; nothing here is imported until a connection asks for it.
"""

from __future__ import annotations

__all__ = ["backend", "jobs", "registry", "serving", "workspace"]
