"""The Azure ML backend, through azure-ai-ml (SDK v2). Imported only when a connection asks for it.

Import :class:`mlrunway.azure.backend.AzureBackend`; ``entities`` turns specs into the SDK's entities and
``credentials`` a connection into a credential and a workspace.
"""

from __future__ import annotations

__all__ = ["backend", "credentials", "entities"]
