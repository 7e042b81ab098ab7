"""Turn an Airflow connection into an mlrunway backend.

Connection types: ``mlrunway_local`` (extra ``workspace``: the workspace root), ``azure_ml`` (subscription,
resource group, workspace, credential) and ``mlrunway_ray`` (:class:`~mlrunway.ray.connection.RayConnection`). Both may hold a ``budget``, a run's default, which the hook reads
(:meth:`MlrunwayHook.get_budget`), not the backend. ``mlrunway_default``, when no such connection exists, is the local
backend under the project's default workspace (``$MLRUNWAY_WORKSPACE`` or ``./.workspace``), so the demo needs
no set-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from mlrunway.backend.protocol import Backend
from mlrunway.backend.registry import LOCAL, connect
from mlrunway.errors import SpecError
from mlrunway.ledger.budget import Budget

if TYPE_CHECKING:
    from airflow.sdk import Connection

DEFAULT_CONN_ID = "mlrunway_default"


class MlrunwayHook(BaseHook):
    """:param backend_conn_id: the Airflow connection that names the backend."""

    conn_name_attr = "backend_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "mlrunway_local"
    hook_name = "mlrunway local backend"

    def __init__(self, backend_conn_id: str = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.backend_conn_id = backend_conn_id

    def get_conn(self) -> Backend:
        return self.get_backend()

    def get_backend(self) -> Backend:
        """The backend the connection names (:mod:`mlrunway.backend.registry`), imported only now."""
        conn = self._connection()
        if conn is None:
            return connect(LOCAL, {})
        conn_type = conn.conn_type or ""
        try:
            return connect(conn_type, connection_fields(conn_type, conn.extra_dejson, conn.login),
                           conn.password or None)
        except SpecError as exc:
            raise SpecError(f"backend_conn_id {self.backend_conn_id!r}: {exc}") from exc

    def get_budget(self) -> Budget | None:
        """The connection's ``budget`` (:class:`~mlrunway.ledger.budget.Budget`): what a run without one of its own
        may spend; None: no limit. A task resolves it once (:func:`~mlrunway.ledger.budget.budget_of`)."""
        conn = self._connection()
        if conn is None:
            return None
        conn_type = conn.conn_type or ""
        try:
            return Budget.parse(form_fields(conn_type, conn.extra_dejson).get("budget"),
                                BUDGET_FIELDS.get(conn_type, "budget"))
        except SpecError as exc:
            raise SpecError(f"backend_conn_id {self.backend_conn_id!r}: {exc}") from exc

    def _connection(self) -> Connection | None:
        """The Airflow connection; None for a missing ``mlrunway_default`` (the local backend, no set-up)."""
        try:
            return self.get_connection(self.backend_conn_id)
        except AirflowNotFoundException as exc:
            if self.backend_conn_id == DEFAULT_CONN_ID:
                return None
            raise SpecError(
                f"backend_conn_id: no Airflow connection {self.backend_conn_id!r}; create it (type mlrunway_local, "
                f"azure_ml or mlrunway_ray) or leave backend_conn_id at {DEFAULT_CONN_ID!r} for the local backend"
            ) from exc


# How a connection type's messages name its budget field (the azure_ml form's fields are named with the type).
BUDGET_FIELDS = {"azure_ml": "azure_ml connection.budget"}

# A connection type whose form labels the connection's own login as one of its fields (provider.py's relabeling):
# the azure_ml form's "Client ID" is the login.
LOGIN_FIELDS = {"azure_ml": "client_id"}


def connection_fields(conn_type: str, extra: dict[str, Any], login: str | None) -> dict[str, Any]:
    """The fields a backend is built from: the extras (:func:`form_fields`), and the login where the type's form
    labels it as a field (the azure_ml form's "Client ID"). The same field given twice with two values is refused
    naming both, never one chosen in silence."""
    fields = form_fields(conn_type, extra)
    name = LOGIN_FIELDS.get(conn_type)
    if name and login:
        if fields.get(name) not in (None, login):
            raise SpecError(f"{conn_type} connection.login: {login!r} (the form's Client ID) and the extra field {name} "
                            f"{fields[name]!r} differ; keep one, the Client ID field (the login)")
        fields[name] = login
    return fields


def form_fields(conn_type: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The connection's extras by field name, whether saved by the form (``extra__<conn_type>__x``) or as JSON;
    a field left empty is left out (the backend's default)."""
    prefix = f"extra__{conn_type}__"
    return {key.removeprefix(prefix): value for key, value in extra.items() if value not in ("", None)}


class RayHook(MlrunwayHook):
    """The ``mlrunway_ray`` connection type (the cluster's Jobs API, shared storage, the MLflow server; the
    password is the cluster's token)."""

    conn_type = "mlrunway_ray"
    hook_name = "Ray cluster (mlrunway)"


class AzureMLHook(MlrunwayHook):
    """The ``azure_ml`` connection type (subscription, resource group, workspace, credential)."""

    conn_type = "azure_ml"
    hook_name = "Azure Machine Learning (mlrunway)"
