"""The local online endpoint: an ASGI scoring server and its control plane."""

from mlrunway.local.serving.state import DeploymentState, EndpointState

__all__ = ["DeploymentState", "EndpointState"]
