"""azure-ai-ml's own vocabulary, as plain dicts (what a DAG file or a trigger form holds), turned into specs.

The names are the SDK's: a job is what ``azure.ai.ml.command`` takes (``command``, ``code``, ``inputs``,
``outputs``, ``environment``, ``compute``, ``distribution``, ``instance_count``, ``environment_variables``,
``experiment_name``, ``display_name``, ``tags``, ``timeout``); a search expression is ``{"type": "choice",
"values": [...]}`` as ``azure.ai.ml.sweep.Choice(values=...)``; a policy ``{"type": "bandit", "slack_factor":
0.15, ...}``; a distribution ``{"type": "pytorch", "process_count_per_instance": 2}``. Every error names the
argument's path (``search_space.batch_size.values``) and the fix. Rendered templates arrive as strings: numbers
are cast where the SDK takes numbers.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from mlrunway import check
from mlrunway.early_termination import POLICIES, EarlyTerminationPolicy
from mlrunway.errors import SpecError
from mlrunway.specs import search_space as space
from mlrunway.specs.job import (
    CommandJobSpec,
    Distribution,
    Input,
    MpiDistribution,
    Output,
    PyTorchDistribution,
    TensorFlowDistribution,
)
from mlrunway.specs.sweep import Objective, SweepLimits

__all__ = ["JOB_ARGUMENTS", "as_arguments", "command_job", "distribution", "early_termination", "limits",
           "merged_job", "objective", "search_space"]

JOB_ARGUMENTS = ("command", "code", "inputs", "outputs", "environment", "compute", "distribution", "instance_count",
                 "environment_variables", "experiment_name", "display_name", "tags", "timeout", "queue_settings")
_Table = dict[str, tuple[type, dict[str, Any]]]
_EXPRESSIONS: _Table = {
    "choice": (space.Choice, {"values": list}),
    "uniform": (space.Uniform, {"min_value": float, "max_value": float}),
    "loguniform": (space.LogUniform, {"min_value": float, "max_value": float}),
    "quniform": (space.QUniform, {"min_value": float, "max_value": float, "q": float}),
    "qloguniform": (space.QLogUniform, {"min_value": float, "max_value": float, "q": float}),
    "normal": (space.Normal, {"mu": float, "sigma": float}),
    "lognormal": (space.LogNormal, {"mu": float, "sigma": float}),
    "qnormal": (space.QNormal, {"mu": float, "sigma": float, "q": float}),
    "qlognormal": (space.QLogNormal, {"mu": float, "sigma": float, "q": float}),
    "randint": (space.Randint, {"upper": int}),
}
_DISTRIBUTIONS: _Table = {
    "pytorch": (PyTorchDistribution, {"process_count_per_instance": int}),
    "mpi": (MpiDistribution, {"process_count_per_instance": int}),
    "tensorflow": (TensorFlowDistribution, {"worker_count": int, "parameter_server_count": int}),
}


def _mapping(field: str, value: Any, example: str) -> Mapping[str, Any]:
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        raise check.fail(field, f"is the text {value[:80]!r}, not the object it spells", "render templates as objects "
                         "(Airflow: render_template_as_native_obj=True, which mlrunway's operators set unless a task "
                         f"turns it off, or mlrunway.lifecycle), or pass e.g. {example}")
    if not isinstance(value, Mapping):
        raise check.fail(field, f"{value!r} is not an object", f"pass e.g. {example}")
    return value


def _typed(field: str, value: Any, table: Mapping[str, tuple[type, dict[str, Any]]], example: str) -> Any:
    """``{"type": <name>, <argument>: ...}`` -> the spec class of that name, arguments cast, unknown ones named."""
    data = dict(_mapping(field, value, example))
    kind = str(data.pop("type", "")).lower()
    if kind not in table:
        raise check.fail(f"{field}.type", f"{kind or 'missing'!r} is not one of {sorted(table)}", f"pass e.g. {example}")
    cls, arguments = table[kind]
    unknown = sorted(set(data) - set(arguments))
    if unknown:
        raise check.fail(f"{field}.{unknown[0]}", f"is not an argument of {kind}", f"use {sorted(arguments)}")
    cast = {}
    for name, raw in data.items():
        try:
            cast[name] = None if raw is None else arguments[name](raw)
        except (TypeError, ValueError):
            raise check.fail(f"{field}.{name}", f"{raw!r} is not a {arguments[name].__name__}",
                             f"pass a {arguments[name].__name__}") from None
    try:
        return cls(**cast)
    except TypeError as exc:
        raise check.fail(field, f"missing arguments for {kind} ({exc})", f"pass e.g. {example}") from None
    except SpecError as exc:  # the spec's own check names its field ("bandit.slack_factor"): keep the argument
        own, _, rest = str(exc).partition(": ")
        argument = own.rsplit(".", 1)[-1]
        raise SpecError(f"{field}{'' if argument in (kind, own) and '.' not in own else '.' + argument}: {rest}") \
            from None


def search_space(value: Mapping[str, Any] | None) -> dict[str, space.SearchExpression]:
    """``{"lr": {"type": "loguniform", "min_value": -7, "max_value": -2}, "batch_size": {"type": "choice",
    "values": [32, 64]}}``; ``loguniform`` bounds are in log space, as the SDK's."""
    data = _mapping("search_space", value, '{"lr": {"type": "uniform", "min_value": 0.001, "max_value": 0.1}}')
    if not data:
        raise check.fail("search_space", "is empty", "name at least one hyperparameter to search")
    out: dict[str, space.SearchExpression] = {}
    for name, expr in data.items():
        field = f"search_space.{name}"
        if isinstance(expr, Mapping) and expr.get("type") == "choice" and not expr.get("values"):
            raise check.fail(f"{field}.values", "empty", "list at least one value")
        built: Any = expr if isinstance(expr, tuple(cls for cls, _ in _EXPRESSIONS.values())) else \
            _typed(field, expr, _EXPRESSIONS, '{"type": "choice", "values": [32, 64]}')
        out[name] = built
    return out


def early_termination(value: Any) -> EarlyTerminationPolicy | None:
    """``{"type": "bandit", "slack_factor": 0.15, "evaluation_interval": 1, "delay_evaluation": 10}``,
    ``median_stopping``, ``truncation_selection`` (any policy in ``early_termination.POLICIES``); None, ``{}`` or
    ``{"type": "none"}`` for none."""
    if value is None or value == {} or (isinstance(value, Mapping) and str(value.get("type", "")).lower() == "none"):
        return None
    if any(isinstance(value, policy.spec) for policy in POLICIES.values()):
        return value
    table = {name: (policy.spec, _arguments(policy.spec)) for name, policy in POLICIES.items()}
    return _typed("early_termination", value, table, '{"type": "bandit", "slack_factor": 0.15}')


def _arguments(spec: type) -> dict[str, Any]:
    """A policy's arguments, each with the type its field names (``float | None``: float), to cast the strings a
    rendered template gives."""
    hints = typing.get_type_hints(spec)
    return {f.name: next(t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None))
            for f in dataclasses.fields(spec) if f.name != "type"}


def distribution(value: Any) -> Distribution | None:
    """``{"type": "pytorch", "process_count_per_instance": 2}``, ``mpi``, or ``tensorflow`` with
    ``worker_count`` and ``parameter_server_count``; None for one process."""
    if value is None or value == {}:
        return None
    if isinstance(value, (PyTorchDistribution, MpiDistribution, TensorFlowDistribution)):
        return value
    return _typed("distribution", value, _DISTRIBUTIONS, '{"type": "pytorch", "process_count_per_instance": 2}')


def limits(value: Mapping[str, Any] | None) -> SweepLimits:
    """``max_total_trials``, ``max_concurrent_trials``, ``timeout`` and ``trial_timeout`` (seconds)."""
    data = dict(_mapping("limits", value or {}, '{"max_total_trials": 8, "max_concurrent_trials": 2}'))
    known = {"max_total_trials": int, "max_concurrent_trials": int, "timeout": float, "trial_timeout": float}
    if unknown := sorted(set(data) - set(known)):
        raise check.fail(f"limits.{unknown[0]}", "is not a sweep limit", f"use {sorted(known)}")
    try:
        return SweepLimits(**{k: None if v in (None, "") else known[k](v) for k, v in data.items()})  # type: ignore[arg-type]
    except ValueError as exc:
        raise check.fail("limits", str(exc), "pass numbers") from None


def objective(value: Mapping[str, Any]) -> Objective:
    """``{"primary_metric": "val_loss", "goal": "minimize"}``, as ``sweep(primary_metric=, goal=)``."""
    data = _mapping("objective", value, '{"primary_metric": "best_val_acc", "goal": "maximize"}')
    goal: Any = check.one_of("objective.goal", str(data.get("goal", "maximize")).lower(), ("maximize", "minimize"))
    metric = data.get("primary_metric")
    if not isinstance(metric, str) or not metric:
        raise check.fail("objective.primary_metric", "is missing", "name the metric the script logs once per epoch")
    return Objective(primary_metric=metric, goal=goal)


def _input(field: str, value: Any) -> Any:
    """A literal, an ``azureml://`` URI (a folder), or ``{"type": "uri_folder"|"uri_file", "path": ...}``."""
    if isinstance(value, Input):
        return value
    if isinstance(value, Mapping):
        data = dict(value)
        kind, path = data.pop("type", "uri_folder"), data.pop("path", None)
        if data or not isinstance(path, str) or not path:
            raise check.fail(field, f"{dict(value)!r} is not an input", 'pass {"type": "uri_folder", "path": "..."}')
        return Input(path=path, type=kind)
    if isinstance(value, str) and value.startswith("azureml://"):
        return Input(path=value)
    return value


def command_job(value: Mapping[str, Any] | CommandJobSpec, field: str = "job") -> CommandJobSpec:
    """The job ``azure.ai.ml.command(**value)`` would make, as a spec; or a CommandJobSpec as it is."""
    if isinstance(value, CommandJobSpec):
        return value
    data = dict(_mapping(field, value, '{"command": "python train.py --lr ${{inputs.lr}}", "code": "./src"}'))
    if unknown := sorted(set(data) - set(JOB_ARGUMENTS)):
        raise check.fail(f"{field}.{unknown[0]}", "is not an argument of azure.ai.ml.command", f"use {list(JOB_ARGUMENTS)}")
    for required in ("command", "code"):
        if not data.get(required):
            raise check.fail(f"{field}.{required}", "is missing", f"pass the job's {required}")
    inputs = {k: _input(f"{field}.inputs.{k}", v) for k, v in (data.get("inputs") or {}).items()}
    outputs = {k: v if isinstance(v, Output) else Output(**(v or {})) for k, v in (data.get("outputs") or {}).items()}
    try:
        return CommandJobSpec(
            code=str(data["code"]), command=str(data["command"]), inputs=inputs, outputs=outputs,
            environment_variables={str(k): str(v) for k, v in (data.get("environment_variables") or {}).items()},
            distribution=distribution(data.get("distribution")),
            instance_count=int(data.get("instance_count") or 1),
            experiment_name=str(data.get("experiment_name") or "mlrunway"),
            display_name=data.get("display_name") or None,
            environment=data.get("environment") or None, compute=data.get("compute") or None,
            tags={str(k): str(v) for k, v in (data.get("tags") or {}).items()},
            timeout=float(data["timeout"]) if data.get("timeout") else None,
            queue_settings=data.get("queue_settings") or None,
        )
    except SpecError as exc:
        raise SpecError(str(exc).replace("command_job.", f"{field}.", 1)) from None


def as_arguments(spec: CommandJobSpec) -> dict[str, Any]:
    """A spec back in the SDK's words: ``command_job(as_arguments(spec)) == spec``."""
    data = spec.to_dict()
    return {**data, "inputs": {k: {"type": v["type"], "path": v["path"]} if isinstance(v, dict) else v
                               for k, v in data["inputs"].items()}}


def merged_job(job: Mapping[str, Any] | CommandJobSpec | str | None, overrides: Mapping[str, Any]) -> CommandJobSpec:
    """``job`` (a dict in the SDK's words, or a spec) with each override that was given (not None) in place of
    its field; what an operator's ``job=`` and its keyword arguments describe together."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if isinstance(job, CommandJobSpec):
        return job if not given else command_job({**as_arguments(job), **given})
    return command_job({**_mapping("job", job or {}, '{"command": "python train.py", "code": "./src"}'), **given})
