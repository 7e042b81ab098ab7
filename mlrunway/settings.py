"""Settings groups declared once: a pydantic dataclass per group a user writes (a rollout, a gate, ...), whose
fields carry their type, bounds, default, description and, for each, the words of its error: what is wrong with a
value and the fix. From that one declaration come

- the validation (:func:`parse`): pydantic's checks, its errors translated into the project's one sentence,
  ``<group>.<field>: <value> is not ...; <fix>``;
- the trigger form's Param (:func:`form_schema`): the JSON Schema pydantic emits, rewritten in the dialect Airflow's
  form reads (a top-level ``type`` list with ``"null"`` for an optional group, references inlined, ``anyOf`` with
  null as a type list), with its title, section and description;
- preflight, which calls the group's ``parse``.

What depends on the backend (a rollout window against its metrics lag) is checked by the group's validators with
pydantic's validation context; the form holds the static part, and a rule across fields that JSON Schema cannot
state is checked by preflight, before any job starts.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import Field, TypeAdapter, ValidationError

from mlrunway import check
from mlrunway.errors import MlrunwayError

__all__ = ["SettingsError", "defaults", "form_schema", "parse", "setting"]

T = TypeVar("T")
_WORDS = ("problem", "fix")  # a field's own error words, kept out of the form's schema


class SettingsError(ValueError):
    """A rule across a group's fields (or one that needs the backend) broken: raised by the group's validators,
    translated by :func:`parse` into ``<group>.<name>: <problem>; <fix>``."""

    def __init__(self, name: str, problem: str, fix: str) -> None:
        super().__init__(f"{name}: {problem}; {fix}")
        self.name, self.problem, self.fix = name, problem, fix


def setting(default: Any, *, description: str, problem: str, fix: str, schema: dict[str, Any] | None = None,
            **constraints: Any) -> Any:
    """A field of a settings group: its default, description, bounds (pydantic's ``Field`` constraints) and the
    words of its error (``problem`` may name the value as ``{value!r}``); ``schema``: keywords for the form that
    the type cannot say (an object's own properties)."""
    return Field(default, description=description,
                 json_schema_extra={"problem": problem, "fix": fix, **(schema or {})}, **constraints)


def parse(kind: type[T], value: Mapping[str, Any] | None, field: str, *, noun: str,
          context: Mapping[str, Any] | None = None) -> T:
    """The group ``kind`` from a user's mapping (None: its defaults), every mistake a SpecError naming
    ``<field>.<setting>``, the value and the fix; ``context`` reaches the group's validators."""
    if value is not None and not isinstance(value, Mapping):
        raise check.fail(field, f"{value!r} is not a mapping", f"give the {noun} settings as an object, or leave it "
                                                                "empty for the defaults")
    raw = dict(value or {})
    try:
        return _adapter(kind).validate_python(raw, context=dict(context or {}))
    except ValidationError as exc:
        raise _translated(kind, raw, field, noun, exc) from None


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(kind: type) -> TypeAdapter[Any]:
    """The group's validator and schema, built once per group."""
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def _translated(kind: type, raw: dict[str, Any], field: str, noun: str, exc: ValidationError) -> Exception:
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, SettingsError):  # a rule of the group's own validators
        return check.fail(f"{field}.{cause.name}", cause.problem, cause.fix)
    if isinstance(cause, MlrunwayError):  # a check of the project's own, its message already whole
        return cause
    fields = {f.name: f for f in dataclasses.fields(kind)}
    if error["type"] == "extra_forbidden" or name not in fields:
        article = "an" if noun[:1] in "aeiou" else "a"
        return check.fail(f"{field}.{name}", f"is not {article} {noun} setting", f"use {', '.join(fields)}")
    words = _words(kind, name)
    return check.fail(f"{field}.{name}", words["problem"].format(value=raw.get(name)), words["fix"])


def _words(kind: type, name: str) -> dict[str, str]:
    extra = _adapter(kind).json_schema()["properties"][name]
    return {key: extra[key] for key in _WORDS}


def defaults(kind: type) -> str:
    """The group's defaults as the JSON a user writes (``{"steps": [10, 50, 100], ...}``), for a description."""
    return json.dumps(_adapter(kind).dump_python(kind(), mode="json"))


def form_schema(kind: type, *, title: str, description: str, section: str | None = None) -> dict[str, Any]:
    """The Param keywords of the group ``kind`` (an optional object: empty is its defaults) in the dialect Airflow's
    trigger form reads: ``type``, ``title``, ``section`` (where the form has sections), ``description``, and the
    group's ``properties`` (each with its bounds and description; a reference inlined, an optional value as a type
    list with ``"null"``) with ``additionalProperties: false``."""
    schema = _adapter(kind).json_schema(mode="validation")
    definitions = schema.get("$defs", {})
    properties = {name: _form(prop, definitions) for name, prop in schema["properties"].items()}
    own = {key: value for key, value in schema.items()  # the group's own keywords (dependentRequired, ...)
           if key not in ("type", "title", "description", "properties", "required", "$defs", "additionalProperties")}
    return {"type": ["null", "object"], "title": title, **({"section": section} if section is not None else {}),
            "description": description, "properties": properties, **own, "additionalProperties": False}


def _form(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """One property in the form's dialect."""
    schema = copy.deepcopy(schema)
    if "$ref" in schema:
        schema = {**definitions[schema.pop("$ref").rsplit("/", 1)[1]], **schema}
    for key in (*_WORDS, "title", "default"):
        schema.pop(key, None)
    if "anyOf" in schema:  # X | None: the form's type list, the non-null branch's keywords beside it
        branches = [_form(b, definitions) for b in schema.pop("anyOf")]
        types = ["null"] if any(b.get("type") == "null" for b in branches) else []
        for branch in (b for b in branches if b.get("type") != "null"):
            kind = branch.pop("type", None)
            types += kind if isinstance(kind, list) else [kind] if kind else []
            for key, value in branch.items():  # the field's own keywords (its schema=) win over the type's
                schema.setdefault(key, value)
        schema["type"] = types
    if "items" in schema:
        schema["items"] = _form(schema["items"], definitions)
    return schema
