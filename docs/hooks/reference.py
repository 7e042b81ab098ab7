"""The docs site's pages that the code holds the source of, generated when mkdocs builds (an mkdocs hook, named in
mkdocs.yml): the home page (README.md, its links made the site's), the changelog (CHANGELOG.md), the operators'
page (one mkdocstrings block per name ``mlrunway.operators`` exports), every DAG's params (each DAG file in
``dags/``), every settings group (the pydantic dataclasses whose fields are declared with
:func:`mlrunway.settings.setting`), the connections' fields (the provider info) and the command lines (their
argparse parsers) and the local endpoint's statuses and limits. Nothing is written into ``docs/``: the pages exist in the build only, so they cannot go stale.

``tests/docs/test_reference.py`` imports this file for the same readers: a Param, a setting, a connection field or
an operator's argument without a description fails there, naming it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import pkgutil
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the dags import mlrunway as installed; examples' DAGs name folders by the repo
    sys.path.insert(0, str(REPO))

# Modules not walked for settings groups: a package's __main__ runs when imported (mlrunway.data's writes the
# example data), and the runners shipped into jobs as their code folders are not the library a DAG imports.
NOT_WALKED = re.compile(r"^mlrunway\.((.*\.)?__main__|onnx_export\.(job|_standalone)|deploy\.score_once)$")


# -- readers (the tests use these too) ------------------------------------------------------------------------
def settings_groups() -> list[type]:
    """Every settings group mlrunway declares, by module then name: a pydantic dataclass whose fields carry the
    words of :func:`mlrunway.settings.setting`."""
    import mlrunway

    found: dict[str, type] = {}
    for module in _modules(mlrunway):
        for name, value in vars(module).items():
            if (isinstance(value, type) and value.__module__ == module.__name__ and is_dataclass(value)
                    and hasattr(value, "__pydantic_fields__") and _declared(value)):
                found[f"{value.__module__}.{name}"] = value
    return [found[key] for key in sorted(found)]


def _modules(package: Any) -> Iterator[Any]:
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if not NOT_WALKED.match(info.name):
            yield importlib.import_module(info.name)


def _declared(kind: type) -> bool:
    return any(isinstance(info.json_schema_extra, dict) and "problem" in info.json_schema_extra
               for info in kind.__pydantic_fields__.values())  # type: ignore[attr-defined]


def dags() -> list[Any]:
    """The DAGs of ``dags/``, each file imported as Airflow's DAG processor would."""
    from airflow.sdk import DAG

    found = []
    for path in sorted((REPO / "dags").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_mlrunway_docs_dag_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found += [value for value in vars(module).values() if isinstance(value, DAG)]
    return sorted(found, key=lambda dag: dag.dag_id)


def connection_types() -> list[dict[str, Any]]:
    from mlrunway.airflow.provider import get_provider_info

    return list(get_provider_info()["connection-types"])


def operators() -> list[type]:
    import mlrunway.operators

    return [getattr(mlrunway.operators, name) for name in mlrunway.operators.__all__]


def documented_arguments(function: Callable[..., Any], *owners: type) -> dict[str, str | None]:
    """Each keyword of ``function``'s signature (``**kwargs`` left out) and its ``:param name:`` text, read from the
    docstrings of ``function`` and ``owners`` (a class and its bases, which document what they take through
    ``**kwargs``); None where none documents it."""
    docs = "\n".join(inspect.getdoc(thing) or "" for thing in (function, *owners))
    described = {m.group(1): " ".join(m.group(2).split())
                 for m in re.finditer(r"^:param (\w+):(.*(?:\n(?!:|\S).*)*)", docs, re.M)}
    return {name: described.get(name) or None for name, p in inspect.signature(function).parameters.items()
            if name != "self" and p.kind is not p.VAR_KEYWORD}


def operator_arguments(operator: type) -> dict[str, str | None]:
    """An operator's own arguments (its ``__init__`` and those of mlrunway's bases it passes ``**kwargs`` to)."""
    ours = [k for k in operator.__mro__ if k.__module__.startswith(("mlrunway.", "operators."))]
    arguments: dict[str, str | None] = {}
    for kind in reversed(ours):
        if "__init__" in vars(kind):
            arguments.update(documented_arguments(kind.__init__, *ours))  # type: ignore[misc]
    return arguments


def parsers() -> list[argparse.ArgumentParser]:
    """The command lines a user runs, from their own parser builders."""
    from mlrunway.airflow import approval
    from mlrunway.local import __main__ as local_cli

    return [local_cli.build_parser(), approval.build_parser()]


# -- pages ------------------------------------------------------------------------------------------------------
def _cell(text: Any) -> str:
    """A table cell: its pipes escaped, and its angle brackets outside code spans (a description's ``<VM size>``
    is text, not a tag the page would swallow)."""
    parts = str(text).replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def _table(columns: list[str], rows: Iterator[list[Any]] | list[list[Any]]) -> list[str]:
    """A markdown table's lines (each cell escaped), then a blank line."""
    return [f"| {' | '.join(columns)} |", f"|{' --- |' * len(columns)}",
            *(f"| {' | '.join(_cell(cell) for cell in row)} |" for row in rows), ""]


def _code(value: Any) -> str:
    return f"`{json.dumps(value)}`"


def _type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " or ".join(_code(v) for v in schema["enum"])
    kinds = schema.get("type", [])
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "anyOf" in schema:
        kinds = [_type(branch) for branch in schema["anyOf"]]
    words = []
    for kind in kinds:
        if kind == "array" and isinstance(schema.get("items"), dict):
            words.append(f"array of {_type(schema['items'])}")
        elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
            words.append(f"object of {_type(schema['additionalProperties'])}")
        else:
            words.append(str(kind))
    bounds = [f"{word} {schema[key]}" for key, word in (
        ("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"),
        ("minLength", "length ≥"), ("maxLength", "length ≤"), ("minItems", "items ≥"), ("maxItems", "items ≤"))
        if key in schema]
    return " or ".join(words or ["any"]) + (f" ({', '.join(bounds)})" if bounds else "")


def settings_page() -> str:
    from mlrunway.settings import form_field

    lines = ["# Settings groups", "",
             "Every group of settings a user writes (a rollout, a gate, a smoke test, ...), from its one declaration "
             "(`mlrunway.settings`): the trigger form's fields, the builder's and the operators' validation and the "
             "error a bad value gets all come from it. A mistake is refused before any job, as "
             "`<group>.<setting>: <value> is not ...; <fix>`.", ""]
    for kind in settings_groups():
        doc = (inspect.getdoc(kind) or "").split("\n\n")[0]
        schemas = {field.name: form_field(kind, field.name) for field in fields(kind)}
        lines += [f"## `{kind.__module__}.{kind.__name__}`", "", " ".join(doc.split()), ""]
        lines += _table(["setting", "type", "default", "description"], [
            [f"`{name}`", _type(schema), _code(schema["default"]) if "default" in schema else "required",
             schema.get("description", "")] for name, schema in schemas.items()])
    return "\n".join(lines)


def params_page() -> str:
    lines = ["# DAG params", "",
             "Each DAG of `dags/` and its trigger form's fields (Airflow's Params), by section: the form shows them "
             "with these titles and descriptions, and the same bounds refuse a bad value before the run starts.", ""]
    for dag in dags():
        doc = " ".join((dag.doc_md or dag.description or "").split("\n\n")[0].split())
        lines += [f"## `{dag.dag_id}`", "", doc, ""] if doc else [f"## `{dag.dag_id}`", ""]
        if not dag.params:
            lines += ["No params.", ""]
            continue
        lines += _table(["param", "section", "type", "default", "description"], [
            [f"`{name}`", param.schema.get("section", ""), _type(param.schema), _code(param.value),
             param.description or ""] for name, param in dag.params.items()])
    return "\n".join(lines)


def connections_page() -> str:
    lines = ["# Connections", "",
             "The backend is chosen by the DAG's `backend_conn_id`, an Airflow connection. `mlrunway_default` with no "
             "such connection is the local backend in `./.workspace` (or `$MLRUNWAY_WORKSPACE`). Each connection "
             "type's fields, as the provider declares them (the Airflow UI's form shows the same); written as JSON, "
             "they are the connection's extra.", ""]
    for kind in connection_types():
        behaviour = kind.get("ui-field-behaviour", {})
        rows = [[f"`{name}`", spec["label"], _type(spec["schema"]), spec.get("description", "")]
                for name, spec in kind["conn-fields"].items()]
        rows += [[f"`{field}` (the connection's own)", label, "string", behaviour.get("placeholders", {}).get(field, "")]
                 for field, label in behaviour.get("relabeling", {}).items()]
        lines += [f"## `{kind['connection-type']}`: {kind['hook-name']}", "", f"Hook: `{kind['hook-class-name']}`.", "",
                  *_table(["field", "label", "type", "description"], rows)]
    return "\n".join(lines)


def cli_page() -> str:
    lines = ["# Command lines", "", "Each command's `--help`, from its own parser.", ""]
    for parser in parsers():
        lines += [f"## `{parser.prog}`", "", "```text", parser.format_help().rstrip(), "```", ""]
        for action in parser._actions:  # the subcommands' own help
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    lines += [f"### `{parser.prog} {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def endpoint_page() -> str:
    from dataclasses import MISSING

    from mlrunway.serving.app import STATUSES
    from mlrunway.serving.guard import Limits

    lines = ["# The local endpoint's HTTP answers", "",
             "The local online endpoint keeps Azure ML's contract: `POST /score` (the scoring URI: key auth, traffic "
             "weights, the `azureml-model-deployment` header, mirror traffic), `POST /deployments/<name>/score` (one "
             "deployment, as its own scoring server answers), `GET /`, `GET /healthz/live` and "
             "`GET /healthz/ready`. Errors are JSON with an error id that the deployment's log holds.", "",
             "## Statuses", "", *_table(["status", "when"], [[status, when] for status, when in STATUSES.items()]),
             "## The server's limits", "",
             "Enforced before a request reaches the app or its key check (`mlrunway.serving.guard`).", ""]
    lines += _table(["limit", "default", "what"], [
        [f"`{limit.name}`", _code(limit.default) if limit.default is not MISSING else "required",
         limit.metadata.get("doc", "")] for limit in fields(Limits)])
    return "\n".join(lines)


def operators_page() -> str:
    lines = ["# Operators", "",
             "The lifecycle's operators, the production endpoint's monitor and the workspace's pruning, as "
             "`mlrunway.operators` exports them. Every argument is templated where the operator's "
             "`template_fields` says so; the job operators take azure-ai-ml's words.", ""]
    for operator in operators():
        lines += [f"::: mlrunway.operators.{operator.__name__}", "    options:", "      members: false", ""]
    return "\n".join(lines)


def home_page() -> str:
    """README.md, its links to ``docs/`` pages made the site's own."""
    text = (REPO / "README.md").read_text()
    return text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")


PAGES: dict[str, Callable[[], str]] = {
    "index.md": home_page,
    "changelog.md": lambda: (REPO / "CHANGELOG.md").read_text(),
    "reference/operators.md": operators_page,
    "reference/params.md": params_page,
    "reference/settings.md": settings_page,
    "reference/connections.md": connections_page,
    "reference/cli.md": cli_page,
    "reference/endpoint-http.md": endpoint_page,
}


# -- the hook -----------------------------------------------------------------------------------------------------
def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, render in PAGES.items():
        files.append(File.generated(config, uri, content=render()))
    return files


SPHINX_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):(?=<code>|`)")


def on_page_content(html: str, **_: Any) -> str:
    """Docstrings are written for Sphinx (``:class:`X```); mkdocstrings renders the role's name as text: drop it."""
    return SPHINX_ROLE.sub("", html)
