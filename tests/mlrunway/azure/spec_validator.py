"""Check a request body against the Azure ML REST spec (``mfe.json``) of the api-version the request carries.

The fake service (``fake_azureml.py``) refuses with 400 what this finds, so a test fails where the real service
would refuse the SDK's request. The files under ``spec/`` are described in ``spec/README.md``.

Checked, the subset of JSON Schema that Swagger 2.0 and autorest use in these files: ``$ref`` (to ``definitions``
or ``parameters``, by its last path segment; the referring schema's own keys such as ``readOnly``,
``x-nullable`` and ``x-ms-mutability`` win over the definition's), ``allOf`` (properties and required merged),
``type``, integer ``format`` ranges (int32, int64), ``enum``, ``pattern`` (unanchored, as in JSON Schema),
``minLength``, ``maxLength``, ``required``, ``properties``, ``additionalProperties``, ``items``,
``x-nullable`` and ``discriminator``; path parameters' ``pattern`` and lengths (a parameter with
``x-ms-skip-url-encoding``, such as Azure Monitor's ``{resourceUri}``, spans segments); a missing required body.
``route`` tells which path template of a version's file a request fits: the fake answers a named 500 to an ARM
request that fits none.

Choices, each for a reason:

- ``enum`` is enforced even where ``x-ms-enum.modelAsString`` is true (nearly every enum here, ``EndpointAuthMode``
  too): that flag tells clients to tolerate values added later in responses; the service of one api-version
  knows only its list. The comparison ignores case, as the service's .NET enum parsing does: the SDK sends
  ``objective.goal`` lower-cased (``entities/_job/sweep/objective.py:39``) against the spec's Minimize, Maximize,
  and sweeps work.
- A discriminated value (``endpointComputeType``, ``jobType``, ...) is checked as the subtype whose
  ``x-ms-discriminator-value`` (or definition name) matches, ignoring case. A value no subtype has is a problem
  naming the subtypes (``AzureMLCompute`` is in ``EndpointComputeType`` but has no subtype: refused). The one
  exception is a subtype the trimmed file left out (``omitted.discriminatorSubtypes``, e.g. an AutoML job): a
  value in the base's enum is then not checked further.
- Unknown properties are refused only where ``additionalProperties`` is false (the ``mfe.json`` definitions
  mostly say so); where it is absent any extra property is allowed.
- ``null`` is allowed only where ``x-nullable`` is true. The SDK's models drop ``None`` when built or set
  (``_restclient/arm_ml_service/_utils/model_base.py:662`` and ``:1135``); ``_job_operations.py`` strips the
  nulls of a round-tripped body before it re-sends one. So a null in a request is a change worth seeing.
- A type the SDK gets wrong on every request of a kind, which the service therefore takes, is not a problem
  there and only there (``SDK_DEVIATIONS``, each with its source lines).
- Read-only fields (``readOnly``, or an ``x-ms-mutability`` without create and update) are not problems: ARM
  ignores them. ``read_only_fields`` lists them and they are not checked further. ``create_only_fields`` lists
  every present field whose ``x-ms-mutability`` lacks update, nested ones too, for the fake to compare with the
  stored resource on an update.

Not checked: string formats (``date-time``, ``duration``, ``uuid``, ``uri``), ``default``, ``x-ms-secret``,
query and header parameters (the api-version only picks the file), and cross-field rules that live only in
descriptions (traffic summing to 100, mirror traffic to at most 50).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC_DIR = Path(__file__).parent / "spec"
_TYPES: dict[str, tuple[str, Any]] = {
    "string": ("a string", str), "integer": ("an integer", int), "number": ("a number", (int, float)),
    "boolean": ("a boolean", bool), "array": ("an array", list), "object": ("an object", dict),
}
_INT_BITS = {"int32": 31, "int64": 63}
# What azure-ai-ml sends against its spec's letter and the service takes anyway, by operationId and field: each
# is every user's request of that kind, so the service accepting it is shown by the SDK working at all. Nothing
# else of the same kind is let through.
SDK_DEVIATIONS: dict[tuple[str, str], str] = {
    ("CodeVersions_CreateOrUpdate", "properties.properties.hash_version"): (
        "ResourceBase.properties is a map of strings, and Code._to_rest_object sends the content hash's version "
        "as the integer 202208 (entities/_assets/_artifacts/code.py:116, _utils/_asset_utils.py:335) on every "
        "code upload; the same SDK sends it as a string only as the list's query (_code_operations.py:142)"),
}


@functools.cache
def _load(spec_dir: Path) -> dict[str, dict[str, Any]]:
    """Every file in the folder by its api-version (the file's stem)."""
    return {f.stem: json.loads(f.read_text()) for f in sorted(spec_dir.glob("*.json"))}


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _bind(template: str, segments: list[str], spanning: set[str]) -> dict[str, str] | None:
    """The path parameters when the actual path's segments fit the template, else None. Literal segments compare
    ignoring case (ARM's paths do); a parameter in ``spanning`` (``x-ms-skip-url-encoding``, such as Azure
    Monitor's ``{resourceUri}``) takes one or more whole segments, any other exactly one."""
    parts = []
    for part in template.strip("/").split("/"):
        if part.startswith("{") and part.endswith("}"):
            parts.append("(.+)" if part[1:-1] in spanning else "([^/]+)")
        else:
            parts.append(re.escape(part))
    found = re.fullmatch("/".join(parts), "/".join(segments), re.IGNORECASE)
    if found is None:
        return None
    names = [p[1:-1] for p in template.strip("/").split("/") if p.startswith("{") and p.endswith("}")]
    return dict(zip(names, found.groups(), strict=True))


@dataclass
class _Walk:
    """One pass over a request against one spec file: what it found wrong, read-only and create-only."""

    spec: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    read_only: list[str] = field(default_factory=list)
    create_only: list[str] = field(default_factory=list)
    recasing: bool = False  # also give enum values the spec's casing, in place (SpecValidator.as_stored)
    operation_id: str = ""  # the operation walked, for SDK_DEVIATIONS

    def resolve(self, schema: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        """The schema with its ``$ref`` followed, and the definition's name."""
        name = None
        while "$ref" in schema:
            name = _ref_name(schema["$ref"])
            target = self.spec["definitions"].get(name) or self.spec["parameters"][name]
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return name, schema

    def check(self, value: Any, schema: dict[str, Any], path: str) -> None:
        """Check the value at ``path`` (dotted, ``[i]`` for items; empty for the body) against the schema."""
        name, schema = self.resolve(schema)
        mutability = schema.get("x-ms-mutability", ["create", "read", "update"])
        if schema.get("readOnly") or not {"create", "update"} & set(mutability):
            self.read_only.append(path)
            return
        if "update" not in mutability:
            self.create_only.append(path)
        label = path or "body"
        if value is None:
            if not schema.get("x-nullable"):
                self.problems.append(f"{label}: null is not allowed")
            return
        if name and "discriminator" in schema:
            name, schema = self.subtype(name, schema, value, path)
            if not schema:
                return
        kind = schema.get("type") or ("object" if "properties" in schema or "allOf" in schema else None)
        if kind in _TYPES:
            article, python_type = _TYPES[kind]
            if (not isinstance(value, python_type) or (isinstance(value, bool) and kind != "boolean")) and (
                    self.operation_id, path) not in SDK_DEVIATIONS:
                self.problems.append(f"{label}: {value!r} is not {article}")
                return
        if kind == "object":
            self.object(value, schema, path, name)
        elif kind == "array" and "items" in schema:
            for i, item in enumerate(value):
                self.check(item, schema["items"], f"{path}[{i}]")
        else:
            self.scalar(value, schema, label)

    def scalar(self, value: Any, schema: dict[str, Any], label: str) -> None:
        """``enum`` (ignoring case), ``pattern``, lengths and integer ranges."""
        problems = self.problems
        if "enum" in schema and str(value).lower() not in {str(e).lower() for e in schema["enum"]}:
            problems.append(f"{label}: {value!r} is not one of {', '.join(map(str, schema['enum']))}")
        if isinstance(value, str):
            if "pattern" in schema and not re.search(schema["pattern"], value):
                problems.append(f"{label}: {value!r} does not match the pattern {schema['pattern']}")
            if len(value) < schema.get("minLength", 0):
                problems.append(f"{label}: {value!r} is shorter than {schema['minLength']} characters")
            if len(value) > schema.get("maxLength", len(value)):
                problems.append(f"{label}: {value!r} is longer than {schema['maxLength']} characters")
        bits = _INT_BITS.get(schema.get("format", ""))
        if bits and isinstance(value, int) and not -(2**bits) <= value < 2**bits:
            problems.append(f"{label}: {value} is out of range for {schema['format']}")

    def object(self, value: dict[str, Any], schema: dict[str, Any], path: str, name: str | None) -> None:
        properties, required, extra = self.flatten(schema)
        for key in sorted(required - value.keys()):
            self.problems.append(f"{path or 'body'}: required field '{key}' is missing")
        for key, item in value.items():
            if key in properties:
                self.check(item, properties[key], _join(path, key))
                self.recase(value, key, properties[key])
            elif isinstance(extra, dict):
                self.check(item, extra, _join(path, key))
                self.recase(value, key, extra)
            elif extra is False:
                self.problems.append(f"{_join(path, key)}: unknown field, not in {name or 'the definition'}")

    def recase(self, parent: dict[str, Any], key: str, schema: dict[str, Any]) -> None:
        """When recasing (``SpecValidator.as_stored``), an enum value in the spec's own casing, as the service's .NET
        enums give it back: the SDK sends ``dataCollectionMode`` "enabled", the service answers "Enabled"."""
        enum = self.resolve(schema)[1].get("enum") if self.recasing else None
        if enum and isinstance(parent[key], str):
            parent[key] = next((e for e in enum if str(e).lower() == parent[key].lower()), parent[key])

    def flatten(self, schema: dict[str, Any]) -> tuple[dict[str, Any], set[str], Any]:
        """Properties, required names and ``additionalProperties`` of an object, its ``allOf`` parts merged in."""
        properties: dict[str, Any] = {}
        required: set[str] = set()
        extra: Any = True
        for part in schema.get("allOf", []):
            part_properties, part_required, part_extra = self.flatten(self.resolve(part)[1])
            properties |= part_properties
            required |= part_required
            extra = part_extra
        properties |= schema.get("properties", {})
        required |= set(schema.get("required", []))
        return properties, required, schema.get("additionalProperties", extra)

    def subtype(self, base: str, schema: dict[str, Any], value: Any, path: str) -> tuple[str, dict[str, Any]]:
        """The subtype a discriminated value names; the base when it names none (its required check reports
        that); an empty schema when there is nothing to check: a value no subtype has (a problem), a trimmed one."""
        tag = schema["discriminator"]
        if not isinstance(value, dict) or not isinstance(value.get(tag), str):
            return base, schema
        subtypes = {d.get("x-ms-discriminator-value", n): n for n, d in self.spec["definitions"].items()
                    if base in self.ancestors(n)}
        for key, name in subtypes.items():
            if key.lower() == value[tag].lower():
                return name, self.spec["definitions"][name]
        trimmed = base in self.spec.get("omitted", {}).get("discriminatorSubtypes", {})
        known = self.resolve(self.flatten(schema)[0].get(tag, {}))[1].get("enum", [])
        if not (trimmed and value[tag].lower() in {str(k).lower() for k in known}):
            self.problems.append(f"{_join(path, tag)}: {value[tag]!r} is not one of {', '.join(subtypes)}")
        return base, {}

    def ancestors(self, name: str) -> set[str]:
        parents = {_ref_name(p["$ref"]) for p in self.spec["definitions"][name].get("allOf", []) if "$ref" in p}
        return parents.union(*(self.ancestors(p) for p in parents))


class SpecValidator:
    """Requests checked against the REST spec files of ``spec_dir``, one per api-version."""

    def __init__(self, spec_dir: Path = SPEC_DIR) -> None:
        self.specs = _load(spec_dir)

    def operation(self, method: str, path: str, api_version: str) -> dict[str, Any] | None:
        """The spec's operation for an actual request path; None when that version's file has none."""
        found = self._match(method, path, api_version)
        return found[1] if found else None

    def check_request(self, method: str, path: str, api_version: str, body: Any) -> list[str]:
        """What the service would refuse in the request: each problem names the field or parameter and why.
        Empty when the request is valid or the operation is not in the files (nothing to check against)."""
        return self._walk(method, path, api_version, body).problems

    def read_only_fields(self, method: str, path: str, api_version: str, body: Any) -> list[str]:
        """The JSON paths of read-only fields present in the body (ARM ignores them; the fake decides)."""
        return self._walk(method, path, api_version, body).read_only

    def as_stored(self, method: str, path: str, api_version: str, body: Any) -> Any:
        """The body with every enum value in the spec's casing, as the service stores and returns it."""
        self._walk(method, path, api_version, body, recasing=True)
        return body

    def create_only_fields(self, method: str, path: str, api_version: str, body: Any) -> list[str]:
        """The JSON paths present in the body whose ``x-ms-mutability`` lacks update (set once, at creation)."""
        return self._walk(method, path, api_version, body).create_only

    def route(self, method: str, path: str, api_version: str) -> str | None:
        """The spec's path template an actual request path fits, for this method and version; None when the
        version's file has no such operation (the fake then answers that it has no schema for it)."""
        found = self._match(method, path, api_version)
        return found[3] if found else None

    def _match(self, method: str, path: str, api_version: str) -> tuple[dict, dict, dict[str, str], str] | None:
        """The version's spec file, the operation, the path's arguments and the path template."""
        spec = self.specs.get(api_version, {})
        segments = path.split("?", 1)[0].strip("/").split("/")
        for template, item in spec.get("paths", {}).items():
            operation = item.get(method.lower())
            if operation is None:
                continue
            parameters = [_Walk(spec).resolve(p)[1] for p in operation.get("parameters", []) + item.get("parameters", [])]
            spanning = {p["name"] for p in parameters if p["in"] == "path" and p.get("x-ms-skip-url-encoding")}
            args = _bind(template, segments, spanning)
            if args is not None:
                return spec, operation, args, template
        return None

    def _walk(self, method: str, path: str, api_version: str, body: Any, recasing: bool = False) -> _Walk:
        found = self._match(method, path, api_version)
        if found is None:
            return _Walk({})
        spec, operation, args, _ = found
        walk = _Walk(spec, recasing=recasing, operation_id=operation.get("operationId", ""))
        for parameter in operation.get("parameters", []):
            parameter = walk.resolve(parameter)[1]
            if parameter["in"] == "path" and parameter["name"] in args:
                walk.scalar(args[parameter["name"]], parameter, f"path parameter {parameter['name']}")
            elif parameter["in"] == "body" and body is None and parameter.get("required"):
                walk.problems.append(f"body: required body parameter '{parameter['name']}' is missing")
            elif parameter["in"] == "body" and body is not None:
                walk.check(body, parameter["schema"], "")
        return walk
