"""The local online endpoint: an ASGI scoring server and its control plane."""

from mlrunway.serving.state import DeploymentState, EndpointState, check_endpoint_name

__all__ = ["DeploymentState", "EndpointState", "check_endpoint_name"]
