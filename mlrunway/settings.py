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
import functools
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError

from mlrunway import check
from mlrunway.errors import MlrunwayError

__all__ = ["ANY_CASE", "EMPTY_IS_NONE", "MAX_PRICE", "NOT_A_FLAG", "PRICE_WORDS", "SettingsError", "defaults",
           "form_field", "form_schema", "limit_setting", "parse", "price_setting", "setting", "worded"]

T = TypeVar("T")
_WORDS = ("problem", "fix")  # a field's own error words, kept out of the form's schema


class SettingsError(ValueError):
    """A rule across a group's fields (or one that needs the backend) broken: raised by the group's validators,
    translated by :func:`parse` into ``<group>.<name>: <problem>; <fix>``."""

    def __init__(self, name: str, problem: str, fix: str) -> None:
        super().__init__(f"{name}: {problem}; {fix}")
        self.name, self.problem, self.fix = name, problem, fix


def _not_a_flag(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return value


NOT_A_FLAG = BeforeValidator(_not_a_flag)  # a number a template may render as text ("0.01"), but never true/false
EMPTY_IS_NONE = BeforeValidator(lambda value: None if value == "" else value)  # an optional name left empty
ANY_CASE = BeforeValidator(lambda value: value.lower() if isinstance(value, str) else value)  # "Hour", "Sobol"


def setting(default: Any, *, description: str, problem: str, fix: str, schema: dict[str, Any] | None = None,
            title: str | None = None, **constraints: Any) -> Any:
    """A field of a settings group: its default, description, bounds (pydantic's ``Field`` constraints) and the
    words of its error (``problem`` may name the value as ``{value!r}``); ``schema``: keywords for the form that
    the type cannot say (an object's own properties); ``title``: its label where the form shows it as a field of
    its own (:func:`form_field`)."""
    return Field(default, description=description, title=title,
                 json_schema_extra={"problem": problem, "fix": fix, **(schema or {})}, **constraints)


# The rules a budget and a rate card share, declared once for the connection's settings (Budget, RateCard) and the
# sweep's share of a budget (SweepBudget), which the specs hold and may not import from the backends.
MAX_PRICE = 1e6  # a price per hour above it is a slip of the keyboard (1e308 would print "inf USD")
PRICE_WORDS = {"problem": f"{{value!r}} is not a price of at least 0 and at most {MAX_PRICE:.0f}",
               "fix": "give a number per hour in the card's currency, e.g. 0.04"}


def limit_setting(default: Any, *, description: str, problem: str, fix: str) -> Any:
    """A budget's limit: a finite amount above 0 (never a flag: a template may render it as text)."""
    return setting(default, description=description, problem=problem, fix=fix, gt=0, allow_inf_nan=False)


def price_setting(default: Any, *, description: str, problem: str = PRICE_WORDS["problem"],
          fix: str = PRICE_WORDS["fix"]) -> Any:
    """A price per hour: finite, at least 0 and at most :data:`MAX_PRICE`."""
    return setting(default, description=description, problem=problem, fix=fix, ge=0, le=MAX_PRICE,
                   allow_inf_nan=False)


def worded(field: str, noun: str) -> Any:
    """A class decorator for a settings group built in code (a pydantic dataclass, not ``defer_build``: a deferred
    build sets ``__init__`` again when it completes): its constructor's mistakes are the SpecError :func:`parse`
    raises, ``<field>.<setting>: <problem>; <fix>``, not pydantic's own."""

    def decorate(kind: type[T]) -> type[T]:
        validated = kind.__init__

        @functools.wraps(validated)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                validated(self, *args, **kwargs)
            except ValidationError as exc:
                raise _translated(kind, kwargs, field, noun, exc) from None

        kind.__init__ = __init__  # type: ignore[method-assign]
        return kind

    return decorate


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
_SCHEMAS: dict[type, dict[str, Any]] = {}


def _adapter(kind: type) -> TypeAdapter[Any]:
    """The group's validator, built once per group."""
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def _schema(kind: type) -> dict[str, Any]:
    """The group's JSON Schema, made once per group (a DAG file's Params read it at every parse): read it, never
    change it (what leaves this module is a copy)."""
    if kind not in _SCHEMAS:
        _SCHEMAS[kind] = _adapter(kind).json_schema(mode="validation")
    return _SCHEMAS[kind]


def _translated(kind: type, raw: dict[str, Any], field: str, noun: str, exc: ValidationError) -> Exception:
    error = exc.errors()[0]
    cause = (error.get("ctx") or {}).get("error")
    path = [str(part) for part in error["loc"] if part != "[key]"]
    name = ".".join(filter(None, [field, *path]))  # field "": the group's settings are fields of their own
    if isinstance(cause, SettingsError):  # a rule of the group's own validators
        return check.fail(".".join(filter(None, [name, cause.name])), cause.problem, cause.fix)
    if isinstance(cause, MlrunwayError):  # a check of the project's own, its message already whole
        return cause
    node, value, depth, known = _walk(_schema(kind), error["loc"], raw)
    if error["type"] == "extra_forbidden" or node is None:
        article = "an" if noun[:1] in "aeiou" else "a"
        return check.fail(name, f"is not {article} {noun} setting", f"use {', '.join(known)}")
    named = ".".join(filter(None, [field, *[str(p) for p in error["loc"][:depth] if p != "[key]"]]))
    return check.fail(named, node["problem"].format(value=_Shown(value)), node["fix"])


class _Shown:
    """A value as an error echoes it (:func:`mlrunway.check.shown`: a long one shortened), for a problem's
    ``{value!r}``."""

    def __init__(self, value: Any) -> None:
        self.text = check.shown(value)

    def __repr__(self) -> str:
        return self.text


def _walk(schema: dict[str, Any], loc: tuple[Any, ...],
          raw: Any) -> tuple[dict[str, Any] | None, Any, int, list[str]]:
    """Follow an error's location through the group's schema: the innermost declared setting on the way (its
    words), the value the user gave there and how deep in the location it is, and the settings known where the path
    left the schema (None for the setting: an unknown name)."""
    definitions = schema.get("$defs", {})
    node, value, known = schema, raw, list(schema.get("properties", {}))
    found: tuple[dict[str, Any] | None, Any, int] = (None, raw, 0)
    for index, part in enumerate(loc):
        node = _inline(node, definitions)
        if part == "[key]":  # the previous part was a mapping's key, not a value: the keys' own schema
            continue
        if index + 1 < len(loc) and loc[index + 1] == "[key]":
            node, value = node.get("propertyNames", {}), part
        elif isinstance(part, int) and isinstance(node.get("items"), dict):  # an item of a list
            node, value = node["items"], value[part] if isinstance(value, list) and part < len(value) else value
        elif part in node.get("properties", {}):
            known = list(node["properties"])
            node, value = node["properties"][part], value.get(part) if isinstance(value, Mapping) else value
        elif (values := _values(node)) is not None:  # a mapping's value, any key
            node, value = values, value.get(part) if isinstance(value, Mapping) else value
        else:
            return None, value, index, list(node.get("properties", known))
        if "problem" in _inline(node, definitions):
            found = (_inline(node, definitions), value, index + 1)
    return (*found, known)


def _values(node: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of a mapping's values: ``additionalProperties``, or (keys with a pattern) its one pattern's."""
    if isinstance(node.get("additionalProperties"), dict):
        return node["additionalProperties"]
    patterns = list(node.get("patternProperties", {}).values())
    return patterns[0] if len(patterns) == 1 else None


def _deref(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """A schema node with the definition its ``$ref`` names merged in (its own keywords win)."""
    if "$ref" not in node:
        return node
    return {**definitions[node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}


def _inline(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """A schema node with its reference, or its one non-null ``anyOf`` branch, merged in."""
    node = _deref(node, definitions)
    branches = [b for b in node.get("anyOf", ()) if b.get("type") != "null"]
    if len(branches) == 1:
        node = {**_inline(branches[0], definitions), **{k: v for k, v in node.items() if k != "anyOf"}}
    return node


def defaults(kind: type) -> str:
    """The group's defaults as the JSON a user writes (``{"steps": [10, 50, 100], ...}``), for a description."""
    return json.dumps(_adapter(kind).dump_python(kind(), mode="json"))


def form_schema(kind: type, *, title: str, description: str, section: str | None = None) -> dict[str, Any]:
    """The Param keywords of the group ``kind`` (an optional object: empty is its defaults) in the dialect Airflow's
    trigger form reads: ``type``, ``title``, ``section`` (where the form has sections), ``description``, and the
    group's ``properties`` (each with its bounds and description; a reference inlined, an optional value as a type
    list with ``"null"``), what is ``required``, with ``additionalProperties: false``."""
    schema = _schema(kind)
    definitions = schema.get("$defs", {})
    properties = {name: _form(prop, definitions) for name, prop in schema["properties"].items()}
    own = {key: copy.deepcopy(value) for key, value in schema.items()  # the group's own (dependentRequired, ...)
           if key not in ("type", "title", "description", "properties", "$defs", "additionalProperties")}
    return {"type": ["null", "object"], "title": title, **({"section": section} if section is not None else {}),
            "description": description, "properties": properties, **own, "additionalProperties": False}


def form_field(kind: type, name: str) -> dict[str, Any]:
    """One setting of the group ``kind`` as a Param's keywords of its own, in the form's dialect (its type, bounds
    and description, its ``title``, and its declared ``default`` where it has one), for a form that shows a group's
    settings as fields of their own."""
    schema = _schema(kind)
    declared = schema["properties"][name]
    kept = {key: copy.deepcopy(declared[key]) for key in ("title", "default") if key in declared}
    return {**_form(declared, schema.get("$defs", {})), **kept}


def _form(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """One property in the form's dialect (and, within it, each nested schema)."""
    schema = copy.deepcopy(_deref(schema, definitions))
    for key in (*_WORDS, "title", "default"):
        schema.pop(key, None)
    branches = [_form(b, definitions) for b in schema.get("anyOf", ())]
    if sum(b.get("type") != "null" for b in branches) > 1:  # a real choice: kept as it is, each branch formed
        schema["anyOf"] = branches
    elif branches:  # X | None: the form's type list, the non-null branch's keywords beside it
        del schema["anyOf"]
        types = ["null"] if any(b.get("type") == "null" for b in branches) else []
        for branch in (b for b in branches if b.get("type") != "null"):
            kind = branch.pop("type", None)
            types += kind if isinstance(kind, list) else [kind] if kind else []
            for key, value in branch.items():  # the field's own keywords (its schema=) win over the type's
                schema.setdefault(key, value)
        schema["type"] = types
    for key in ("items", "propertyNames", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            schema[key] = _form(schema[key], definitions)
    for key in ("properties", "patternProperties"):
        if key in schema:
            schema[key] = {name: _form(sub, definitions) for name, sub in schema[key].items()}
    if schema.get("propertyNames") == {}:
        del schema["propertyNames"]
    if "patternProperties" in schema:  # a key that matches no pattern is refused, as the declaration does
        schema.setdefault("additionalProperties", False)
    return schema
