"""The Ray backend (the ``mlrunway_ray`` connection): jobs and sweeps on a Ray cluster through its Jobs API, runs
and models on an MLflow server, records on storage every node shares. Its Airflow side imports no ``ray``.

Import :class:`mlrunway.ray.backend.RayBackend`; nothing here is imported until a connection asks for it.
"""

from __future__ import annotations

__all__ = ["backend", "client", "closure", "connection", "endpoints", "entry", "jobs", "models", "preflight",
           "sweep_controller", "tracking"]
