"""Which backends exist: an enum of kinds, each with its Airflow connection type and the class that implements
it, imported only when a connection asks for it (astronomer-cosmos's execution modes are the model).

A third backend is one sibling folder with a class that has ``from_connection(fields, secret)`` and satisfies
:class:`~mlrunway.backend.protocol.Backend`, plus one line here.
"""

from __future__ import annotations

import enum
import importlib
from typing import Any, Protocol, cast

from mlrunway.backend.protocol import Backend
from mlrunway.errors import SpecError

__all__ = ["BackendKind", "connect"]


class BackendFactory(Protocol):
    def from_connection(self, fields: dict[str, Any], secret: str | None = None) -> Backend: ...


class BackendKind(enum.Enum):
    """A backend: its Airflow connection type, and ``module:Class``."""

    LOCAL = ("mlrunway_local", "mlrunway.local.backend:LocalBackend")
    AZURE = ("azure_ml", "mlrunway.azure.backend:AzureBackend")
    FAKE = ("mlrunway_fake", "mlrunway.backend.fake:FakeBackend")

    def __init__(self, conn_type: str, implementation: str) -> None:
        self.conn_type, self.implementation = conn_type, implementation

    @classmethod
    def of_conn_type(cls, conn_type: str) -> BackendKind:
        for kind in cls:
            if kind.conn_type == conn_type:
                return kind
        raise SpecError(f"connection type {conn_type!r} is not a backend; use one of "
                        f"{', '.join(k.conn_type for k in cls)}")

    def factory(self) -> BackendFactory:
        module, _, name = self.implementation.partition(":")
        return cast(BackendFactory, getattr(importlib.import_module(module), name))


def connect(conn_type: str, fields: dict[str, Any], secret: str | None = None) -> Backend:
    """The backend a connection of ``conn_type`` names, from its extra fields and its secret."""
    return BackendKind.of_conn_type(conn_type).factory().from_connection(fields, secret)
