"""Which backends exist: the ``mlrunway.backends`` entry-point group, one entry per Airflow connection type
(``<conn_type> = "module:Class"``), each loaded only when a connection asks for it, as MLflow finds its stores.

mlrunway registers ``mlrunway_local`` and ``azure_ml`` (pyproject.toml). A third backend ships in a package of its
own: a class with ``from_connection(fields, secret)`` that satisfies :class:`~mlrunway.backend.protocol.Backend`,
an entry point in this group, and, for Airflow's connection form, a provider whose hook subclasses
``mlrunway.airflow.hook.MlrunwayHook`` with its ``conn_type``. The shipped
:class:`~mlrunway.backend.fake.FakeBackend` is registered only by the tests' own distribution
(``tests/fake_backend``), so a production Airflow refuses an ``mlrunway_fake`` connection.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol, cast

from mlrunway.backend.protocol import Backend
from mlrunway.errors import SpecError
from mlrunway.extras import BACKEND_EXTRAS, require

__all__ = ["GROUP", "LOCAL", "available", "connect"]

GROUP = "mlrunway.backends"
LOCAL = "mlrunway_local"  # the embedded default, for ``mlrunway_default`` when no such connection exists


class BackendFactory(Protocol):
    def from_connection(self, fields: dict[str, Any], secret: str | None = None) -> Backend: ...


@functools.cache
def available() -> dict[str, EntryPoint]:
    """The installed backends by connection type (read once per process: a scan of the installed packages)."""
    return {point.name: point for point in entry_points(group=GROUP)}


def connect(conn_type: str, fields: dict[str, Any], secret: str | None = None) -> Backend:
    """The backend a connection of ``conn_type`` names, from its extra fields and its secret."""
    found = available()
    if conn_type not in found:
        raise SpecError(f"connection type {conn_type!r} is not an installed mlrunway backend; use one of "
                        f"{', '.join(sorted(found))} (a backend registers itself in the {GROUP!r} entry-point group)")
    if conn_type in BACKEND_EXTRAS:  # one of mlrunway's own: its extra, said before anything imports it
        extra, modules = BACKEND_EXTRAS[conn_type]
        require(f"the {conn_type} backend", extra, *modules)
    return cast(BackendFactory, found[conn_type].load()).from_connection(fields, secret)
