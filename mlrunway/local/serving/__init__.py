"""The local online endpoint: its control plane, its server processes and its state on disk; the scoring app the
server runs is :mod:`mlrunway.serving`."""

from mlrunway.local.serving.state import DeploymentState, EndpointState

__all__ = ["DeploymentState", "EndpointState"]
