"""The scoring app a deployment runs, the same on every backend that serves an endpoint on its own machines: the
ASGI app (:mod:`~mlrunway.serving.app`: Azure ML's online-endpoint contract), the HTTP limits before it
(:mod:`~mlrunway.serving.guard`), each worker's loaded score.py (:mod:`~mlrunway.serving.runtime`), the data
collector (:mod:`~mlrunway.serving.capture`) and the per-deployment metrics (:mod:`~mlrunway.serving.metrics`),
over the endpoint's state (:mod:`~mlrunway.serving.state`).

A backend keeps what is its own: the processes that run the app, the endpoint's state on disk and its control plane
(the local backend's :mod:`mlrunway.local.serving`).
"""

from mlrunway.serving.state import DeploymentState, EndpointState

__all__ = ["DeploymentState", "EndpointState"]
