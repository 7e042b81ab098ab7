"""What the workspace's state files must hold, checked where they are read: a record that does not parse, or parses
but is of the wrong shape, reads as damaged, naming the file and the fix, and never stops the readers of the records
beside it.

Each state file kind (:data:`mlrunway.local.formats.STATE_FILES`) has one :class:`Shape` here: the fields it may
hold with their JSON types, those it must hold, and the values a field may take. A record kept as a dataclass
(a model version, an endpoint, a deployment, a trial) takes its shape from the dataclass's own annotations, so the
two cannot drift apart. Written by hand rather than with pydantic: these checks run in the sweep controller and in
each trial's supervisor, which are started lean (a supervisor without ``site``) and would pay pydantic's import on
every start.
"""

from __future__ import annotations

import enum
import types
import typing
from pathlib import Path
from typing import Any

from mlrunway.errors import MlrunwayError
from mlrunway.local.files import read_json

if typing.TYPE_CHECKING:
    from mlrunway.backend.types import ModelVersion

__all__ = ["JOB_STATES", "DamagedRecord", "Shape", "read", "read_version", "shape"]

JsonTypes = tuple[type, ...]
_NUMBER: JsonTypes = (int, float)
_NONE = type(None)


class DamagedRecord(MlrunwayError):
    """A state file that cannot be used: it does not parse, or is of the wrong shape."""

    def __init__(self, path: Path, problem: str, fix: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"damaged record {path}: {problem}; {fix}")


class Shape:
    """A record's fields and their JSON types; ``required`` it must hold; ``choices`` the values a field may take;
    ``items`` the shape of each element of a list field (or each value of an object field); ``closed``, for the
    record of a dataclass, what a field it does not know is not (it would not construct). A plain class: a job's
    supervisor reads its records without importing dataclasses."""

    __slots__ = ("choices", "closed", "fields", "items", "required")

    def __init__(self, fields: dict[str, JsonTypes], required: tuple[str, ...] = (),
                 choices: dict[str, tuple[Any, ...]] | None = None, items: dict[str, Shape] | None = None,
                 closed: str = "") -> None:
        self.fields, self.required, self.closed = fields, required, closed
        self.choices, self.items = choices or {}, items or {}

    @classmethod
    def of(cls, record: type, *, skip: tuple[str, ...] = (), items: dict[str, Shape] | None = None) -> Shape:
        """The shape of a dataclass as JSON holds it: its fields without a default are required."""
        from dataclasses import MISSING, fields

        hints = typing.get_type_hints(record)
        kept = [f for f in fields(record) if f.name not in skip]
        choices = {f.name: tuple(m.value for m in hints[f.name]) for f in kept
                   if isinstance(hints[f.name], type) and issubclass(hints[f.name], enum.Enum)}
        needed = tuple(f.name for f in kept if f.default is MISSING and f.default_factory is MISSING)
        return cls({f.name: _json_types(hints[f.name]) for f in kept}, needed, choices, items,
                   closed=f"no field of {_words(record.__name__)}")

    def problem(self, data: Any) -> str | None:
        """What is wrong with ``data`` for this shape, in words; None when it fits."""
        if not isinstance(data, dict):
            return f"holds {_name(data)}, not an object"
        for key in self.required:
            if key not in data:
                return f"has no {key!r}"
        for key, value in data.items():
            allowed = self.fields.get(key)
            if allowed is None:
                if self.closed:
                    return f"has {key!r}, {self.closed}"
                continue  # a field a later release adds: kept, unread
            if not _is(value, allowed):
                return f"{key!r} is {_name(value)}, not {' or '.join(_name_of(t) for t in allowed)}"
            if key in self.choices and value not in self.choices[key]:
                return f"{key} {value!r} is not one of {', '.join(map(str, self.choices[key]))}"
            if key in self.items:
                elements = value.items() if isinstance(value, dict) else enumerate(value)
                for index, element in elements:
                    if (inner := self.items[key].problem(element)) is not None:
                        return f"{key}[{index!r}] {inner}"
        return None


def _json_types(hint: Any) -> JsonTypes:
    """The JSON types a value of the annotation ``hint`` is held as."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return (object,)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _json_types(arg))
    if hint is _NONE:
        return (_NONE,)
    if origin in (dict,) or hint is dict:
        return (dict,)
    if origin in (list, tuple) or hint in (list, tuple):
        return (list,)
    if hint is float:
        return _NUMBER
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return (str,)
    return (hint,)


def _words(name: str) -> str:
    """``ModelVersion`` -> "a model version"."""
    return "a " + "".join(f" {c.lower()}" if c.isupper() else c for c in name).strip()


def _is(value: Any, allowed: JsonTypes) -> bool:
    if isinstance(value, bool):  # JSON's true is no number
        return bool in allowed or object in allowed
    return isinstance(value, allowed)


def _name(value: Any) -> str:
    return _name_of(type(value))


def _name_of(kind: type) -> str:
    return {_NONE: "null", dict: "object", list: "array", object: "anything"}.get(kind, kind.__name__)


_OPT_STR: JsonTypes = (str, _NONE)
_OPT_NUMBER: JsonTypes = (int, float, _NONE)
_OPT_INT: JsonTypes = (int, _NONE)
# JobStatus's values (a test holds them equal): a job's supervisor reads its records without importing the backend's
# types (mlrunway.local.supervisor.TERMINAL).
JOB_STATES = ("Queued", "Running", "Completed", "Failed", "Canceled")
# A job's status as the submitter, its supervisor and the readers that reconcile it write it.
_JOB_STATUS = Shape(
    {"status": (str,), "created": _OPT_NUMBER, "started": _OPT_NUMBER, "ended": _OPT_NUMBER, "error": _OPT_STR,
     "exit_code": _OPT_INT, "timed_out": (bool, _NONE), "killed": (bool,), "run_open": (bool,),
     "mlflow_run_id": _OPT_STR, "supervisor_pid": _OPT_INT, "supervisor_started": _OPT_NUMBER,
     "pgid": _OPT_INT, "pgid_started": _OPT_NUMBER, "cancel_signal": _OPT_STR, "usage": (dict, _NONE)},
    required=("status",), choices={"status": JOB_STATES})
# Every state file kind, by its name (formats.STATE_FILES); those of a dataclass are made when first read (shape).
_SHAPES: dict[str, Shape] = {
    "job.json": Shape({"name": (str,), "kind": (str,), "spec": (dict,), "argv": (list,), "token": (str,),
                       "workspace": (str,), "sweep": (dict,), "parent_run_id": _OPT_STR, "kill_grace_s": _NUMBER,
                       "cancel_look_s": _NUMBER, "poll_s": _NUMBER, "mlflow_run": (list, _NONE)},
                      required=("name", "kind", "spec", "argv", "token"), choices={"kind": ("command", "sweep")}),
    "status.json": _JOB_STATUS,
    "outcome.json": Shape({**_JOB_STATUS.fields, "ended": _NUMBER}, required=("status", "ended"),
                          choices={"status": JOB_STATES}),
    "cancel_requested.json": Shape({"reason": (str,), "at": _NUMBER}, required=("reason",)),
    "sweep.json": Shape({"trials": (list,), "best_trial": _OPT_STR, "stopped_because": _OPT_STR, "error": _OPT_STR,
                         "sampler_version": (int,), "seed": _OPT_INT, "partial_judgements": (list,),
                         "name": (str,), "objective": (dict,)},
                        required=("trials", "sampler_version")),
    "lease.json": Shape({"holder": (str,), "until": _NUMBER}, required=("holder", "until")),
    "provision.json": Shape({"version": (int,), "state": (str,), "pid": _OPT_INT, "error": _OPT_STR},
                            required=("state",)),  # 0.1.0 wrote a record without a version
}

_OF_TYPES = ("model.json", "endpoint.json", "sweep.json", "provision.json")  # shaped after the backend's types


def shape(kind: str) -> Shape:
    """The shape of the state file kind ``kind`` (its file name)."""
    if kind in _OF_TYPES and "model.json" not in _SHAPES:
        from mlrunway.backend.types import ModelVersion, ProvisioningState, TrialInfo
        from mlrunway.local.serving.state import DeploymentState, EndpointState

        _SHAPES["model.json"] = Shape.of(ModelVersion, skip=("damaged", "error"))
        _SHAPES["endpoint.json"] = Shape.of(EndpointState, items={"deployments": Shape.of(DeploymentState)})
        _SHAPES["sweep.json"].items["trials"] = Shape.of(TrialInfo)
        _SHAPES["provision.json"].choices["state"] = tuple(s.value for s in ProvisioningState)
    return _SHAPES[kind]


def read(path: Path, fix: str, kind: str | None = None) -> dict[str, Any]:
    """The state file ``path`` as its readers use it: parsed, in the current format and of its kind's shape (named by
    its file name unless ``kind``); :class:`DamagedRecord`, naming the file, the problem and ``fix``, otherwise.
    A file that is missing, or that this mlrunway cannot open (a newer format), raises as it did."""
    try:
        data = read_json(path)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError: truncated, binary, empty
        raise DamagedRecord(path, f"does not parse ({type(exc).__name__}: {exc})", fix) from exc
    if (problem := shape(kind or path.name).problem(data)) is not None:
        raise DamagedRecord(path, problem, fix)
    return typing.cast(dict[str, Any], data)


def read_version(folder: Path, name: str, version: int) -> ModelVersion:
    """A version's ``model.json``, checked against the record's fields; one that does not parse or is of the wrong
    shape reads as a damaged version naming the file and the fix (listed, never served), never an exception that
    stops every reader of the model."""
    from mlrunway.backend.types import ModelVersion

    record = folder / "model.json"
    fix = f"restore it or delete {folder}"
    try:
        model = ModelVersion(**read(record, fix))
        if (model.name, model.version) != (name, version):
            raise DamagedRecord(record, f"names {model.name}:{model.version}, in the folder of {name}:{version}", fix)
        return model
    except (OSError, DamagedRecord) as exc:
        error = str(exc) if isinstance(exc, DamagedRecord) else f"damaged record {record}: cannot be read ({exc}); {fix}"
    return ModelVersion(name=name, version=version, path=str(folder / "files"), damaged=True, error=error)

