"""What the six operators share: the backend from the connection, the run's names, links; and what the three
that wait on remote work share: deferral, a poll interval and a maximum wait."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any, TypeVar

from airflow.sdk import BaseOperator, Context
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException

from mlrunway.airflow.hook import DEFAULT_CONN_ID, MlrunwayHook
from mlrunway.airflow.links import ALL_LINKS, links_for
from mlrunway.backend.naming import RunNames, endpoint_salt
from mlrunway.backend.protocol import Backend
from mlrunway.errors import ParityError, SpecError, shorten_exception
from mlrunway.extras import MissingExtra
from mlrunway.ledger.budget import Budget, budget_of
from mlrunway.lineage import LineageDataset, namespace_of
from mlrunway.pipeline import check_prefix

T = TypeVar("T")
# azure-ai-ml's placeholders: ``${{inputs.lr}}`` would otherwise be read by Jinja as its own ``{{ inputs.lr }}``.
_AZURE_PLACEHOLDER = re.compile(r"\$\{\{.*?\}\}")
# What a retry cannot change: a bad input or a preflight refusal, a missing extra, the export job's parity verdict.
# (A lost watch, an outage past its bound and a killed worker are not among them: their retry re-attaches.)
REFUSALS: tuple[type[Exception], ...] = (SpecError, MissingExtra, ParityError)
_FINAL: dict[type[BaseException], type[BaseException]] = {}


def final(exc: BaseException) -> BaseException:
    """``exc`` as an error Airflow does not retry: the same class and message, also an AirflowFailException (a
    retry would only meet it again). One that cannot be rebuilt so becomes an AirflowFailException with its
    message."""
    if isinstance(exc, AirflowFailException):
        return exc
    kind = type(exc)
    marked = _FINAL.get(kind) or _FINAL.setdefault(kind, type(kind.__name__, (kind, AirflowFailException), {
        "__module__": kind.__module__, "__doc__": f"{kind.__doc__ or kind.__name__} (not retried)"}))
    try:
        again = marked(*exc.args)
    except TypeError:  # a class whose constructor wants other arguments than its args
        again = AirflowFailException(f"{kind.__name__}: {exc}")
    return again.with_traceback(exc.__traceback__)


def _refusals_final(method: Callable[..., T]) -> Callable[..., T]:
    """``method``, whose refusals (:data:`REFUSALS`) fail the task at once, its message said once, instead of
    after every retry has met it again."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return method(*args, **kwargs)
        except REFUSALS as exc:
            if isinstance(exc, AirflowFailException):  # an inner call (super().execute) marked it already
                raise
            raise final(exc) from exc.__cause__

    return run


def _screen_sized(method: Callable[..., T]) -> Callable[..., T]:
    """``method``, whose exceptions reach the task log with messages at most a screen long (a library's
    message can be megabytes: a recursive copy's path, a whole response body)."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            short = shorten_exception(exc)
            if short is exc:
                raise
        raise short  # outside the handler: the long original is not attached as its context

    return run


def _remembered(method: Callable[..., T]) -> Callable[..., T]:
    """``method``, whose result the task also keeps as ``self.returned``: its OpenLineage outputs are read there
    once it ends (a listener gets the task, not the XComs it pushed)."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> T:
        self.returned = None  # a failed try made nothing, whatever an earlier one made
        result = self.returned = method(self, *args, **kwargs)
        return result

    return run


class MlrunwayBaseOperator(BaseOperator):
    """:param backend_conn_id: Airflow connection of the backend (``mlrunway_default``: local, no set-up).
    :param name_prefix: prefix of every name this run creates (jobs, models, the endpoint).

    No exception of an operator carries a message longer than a screen (:func:`~mlrunway.errors.shorten`), from
    ``execute`` or from whichever method a deferral resumes in; a refusal a retry cannot change (:data:`REFUSALS`)
    fails the task for good (:func:`final`), wherever it is raised.

    Templates render natively whatever the DAG says (``render_template_as_native_obj=False`` on a task turns it
    off): a templated job, search space or limit renders to the object or number it describes, not to its text.
    """

    template_fields: tuple[str, ...] = ("backend_conn_id", "name_prefix")
    operator_extra_links = ALL_LINKS
    returned: Any = None  # what execute (or the method a deferral resumed in) returned: the lineage's outputs
    budget: Any = None  # the run's budget as the task was given it (a task that takes one sets it); None: the connection's

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "execute" in cls.__dict__:
            cls.execute = _refusals_final(  # type: ignore[method-assign]
                _screen_sized(_remembered(cls.__dict__["execute"])))

    def __init__(self, *, backend_conn_id: str = DEFAULT_CONN_ID, name_prefix: str = "mlrunway", **kwargs: Any) -> None:
        kwargs.setdefault("multiple_outputs", True)  # each returned key is an XCom of its own: task.output["key"]
        kwargs.setdefault("render_template_as_native_obj", True)
        super().__init__(**kwargs)
        self.backend_conn_id = backend_conn_id
        self.name_prefix = name_prefix

    def render_template(self, content: Any, context: Any, jinja_env: Any = None, seen_oids: Any = None) -> Any:
        """As Airflow's, but azure-ai-ml's own ``${{inputs.x}}`` / ``${{outputs.y}}`` placeholders pass through
        untouched, so a command with both (``--epochs {{ params.epochs }} --lr ${{inputs.lr}}``) renders right."""
        if isinstance(content, str) and "${{" in content:
            content = _AZURE_PLACEHOLDER.sub(lambda m: "{% raw %}" + m[0] + "{% endraw %}", content)
        return super().render_template(content, context, jinja_env, seen_oids)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Where every deferral comes back (``execute_complete`` or another method), under ``execute``'s wrappers."""
        self.returned = None
        result = self.returned = _refusals_final(_screen_sized(super().resume_execution))(next_method, next_kwargs,
                                                                                             context)
        return result

    @cached_property
    def backend(self) -> Backend:
        return MlrunwayHook(self.backend_conn_id).get_backend()

    @cached_property
    def run_budget(self) -> Budget | None:
        """The run's budget, resolved once per task: the task's own ``budget`` (Train's, the sweep's, deploy's), else
        its connection's (:meth:`~mlrunway.airflow.hook.MlrunwayHook.get_budget`); None: no limit."""
        return budget_of(self.budget, MlrunwayHook(self.backend_conn_id).get_budget)

    def names(self, context: Context) -> RunNames:
        """What the run creates is named after it; its endpoint after the backend's workspace too, where endpoint
        names are region-wide (Azure)."""
        return RunNames.of(context["dag"].dag_id, context["run_id"], check_prefix(self.name_prefix),
                           endpoint_salt(self.backend))

    def link(self, context: Context, kind: str, name: str, version: int | str | None = None) -> None:
        """Show the task's links to what it created: Azure ML studio, or the UI plugin's pages locally."""
        self.show_links(context, links_for(self.backend, self.backend_conn_id, kind, name, version))

    def show_links(self, context: Context, links: dict[str, str]) -> None:
        """Keep ``links`` (by key) in ``self.links``, which the link classes read as the task ends, and push each
        as an XCom under its key at once (the run's "Sweep report" tab reads ``report_url``)."""
        self.links = {**getattr(self, "links", {}), **links}
        for key, url in links.items():
            context["ti"].xcom_push(key=key, value=url)

    # -- OpenLineage (the provider's listener calls these; :mod:`mlrunway.lineage` names the datasets) ----------
    def get_openlineage_facets_on_start(self) -> Any:
        """What the task reads, as it starts."""
        from mlrunway.airflow.lineage import operator_lineage

        return operator_lineage(self.lineage_inputs())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """What the task read and what it made, from what it returned (nothing made when it failed)."""
        from mlrunway.airflow.lineage import operator_lineage

        result = self.returned if isinstance(self.returned, dict) else {}
        return operator_lineage(self.lineage_inputs(), self.lineage_outputs(result))

    @property
    def lineage_namespace(self) -> str:
        """The namespace of what the backend holds (its jobs, models, endpoints)."""
        return namespace_of(self.backend)

    def lineage_inputs(self) -> list[LineageDataset]:
        """The datasets the task reads, from its (rendered) arguments; each operator says which."""
        return []

    def lineage_outputs(self, result: dict[str, Any]) -> list[LineageDataset]:
        """The datasets the task made, from its result; each operator says which."""
        return []


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (False unless a deployment sets it), read as Airflow's own
    providers read it: where a triggerer runs, set it (``AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=True``) and every
    waiting task frees its worker slot."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)


class MlrunwayWaitingOperator(MlrunwayBaseOperator):
    """:param deferrable: wait in the triggerer instead of holding a worker slot; None (the default): Airflow's
        ``[operators] default_deferrable`` (:func:`default_deferrable`), as Airflow's own providers do.
    :param max_wait_s: past this many seconds, stop the remote work and fail the task.
    :param poll_interval_s: seconds between status checks; None (the default) takes the backend's
        (``capabilities.poll_interval_s``: 0.25 s locally, a read of a few files; 30 s on Azure ML, whose reads
        are rate-limited).
    :param defer_after_s: wait this long in the worker before deferring. Resuming a deferred task costs a
        new task process and a DAG parse, more than a short wait; and Airflow 3.3 can fail a task whose
        trigger fires seconds after it deferred (apache/airflow#72716).
    """

    def __init__(self, *, deferrable: bool | None = None, max_wait_s: float = 3600,
                 poll_interval_s: float | None = None, defer_after_s: float = 20.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.max_wait_s, self.poll_interval_s = max_wait_s, poll_interval_s
        self.defer_after_s = defer_after_s

    @property
    def poll_s(self) -> float:
        """Seconds between status checks: the task's own, else the backend's."""
        if self.poll_interval_s is not None:
            return float(self.poll_interval_s)
        return self.backend.capabilities.poll_interval_s

    def settle(self, status: Callable[[], T], done: Callable[[T], bool]) -> T:
        """Poll ``status()`` for up to ``defer_after_s`` seconds (never past ``max_wait_s``); return the first one
        that is ``done``, or the last one seen, which the caller then defers on."""
        deadline = time.monotonic() + min(self.defer_after_s, self.max_wait_s)
        current = status()
        while not done(current) and time.monotonic() < deadline:
            time.sleep(max(0.0, min(self.poll_s, deadline - time.monotonic())))
            current = status()
        return current
