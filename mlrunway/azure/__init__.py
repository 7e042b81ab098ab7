"""The Azure ML backend, through azure-ai-ml (SDK v2). Imported only when a connection asks for it.

Import :class:`mlrunway.azure.backend.AzureBackend`, which sets up and wires one module per resource, each over
the small clients it is given: ``jobs``, ``models``, ``endpoints`` and their ``deployments``, ``metrics`` (a
deployment's requests, errors and latency from Azure Monitor), ``model_monitor`` (the workspace's model monitor of a
production deployment), ``lease`` (the rollout lease), ``writes`` (retries while an endpoint is busy) and ``rest``
(the workspace's MLflow and Run History). ``entities`` turns specs into the SDK's entities, ``environments``
picks their images, ``credentials`` turns a connection into a credential and a workspace, ``clouds`` and
``outputs`` hold the two private imports of azure-ai-ml, each with its reason.
"""

from __future__ import annotations

__all__ = ["backend", "clouds", "credentials", "deployments", "endpoints", "entities", "environments", "jobs", "lease",
           "metrics", "model_monitor", "models", "outputs", "rest", "writes"]
