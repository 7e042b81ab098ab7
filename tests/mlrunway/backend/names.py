"""Every public entry point of a backend that takes a name refuses one that is not a name (issue 60, 3), before it
acts: ``jobs.get("../../<other workspace>/jobs/victim")`` once reconciled a job of another workspace.

The entry points are read from the protocol (:mod:`mlrunway.backend.protocol`) and the backend's own class, so a
method added without a check fails the test that calls :func:`refusals`."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlrunway.errors import SpecError

HOSTILE = "../../victim"
NAMES = ("name", "endpoint", "deployment", "job_name")  # the parameters that hold a name
# A harmless value for every other parameter an entry point takes (the name is checked first: none is used).
OTHERS: dict[str, Any] = {
    "spec": None, "sweep": None, "path": ".", "version": 1, "tags": {}, "alias": "production", "settings": None,
    "traffic": {}, "start": 0.0, "end": 1.0, "seconds": 0.1, "metric": "m", "holder": "h", "ttl_s": 1.0,
    "collection": "model_inputs", "artifact_path": "a", "lines": 1, "reason": "r", "output": "o", "kind": "job",
    "metrics": {},
}


def entry_points(component: Any) -> Iterator[tuple[str, str]]:
    """(method, parameter) for each public method of ``component`` and each of its name parameters."""
    for attr, method in inspect.getmembers(type(component), inspect.isfunction):
        if attr.startswith("_"):
            continue
        for parameter in inspect.signature(method).parameters:
            if parameter in NAMES:
                yield attr, parameter


def call(component: Any, attr: str, target: str, folder: Path) -> Any:
    """``component.attr`` with ``HOSTILE`` as ``target`` and a harmless value for everything else it needs."""
    args: dict[str, Any] = {}
    for parameter, spec in inspect.signature(getattr(component, attr)).parameters.items():
        if parameter == target:
            args[parameter] = HOSTILE
        elif parameter in NAMES:
            args[parameter] = "fine-name"
        elif spec.default is inspect.Parameter.empty and spec.kind not in (spec.VAR_KEYWORD, spec.VAR_POSITIONAL):
            args[parameter] = folder if parameter in ("dest", "folder") else OTHERS[parameter]
    return getattr(component, attr)(**args)


def refusals(backend: Any, folder: Path) -> dict[str, str]:
    """Each entry point of the backend's jobs, models and endpoints that did not refuse the hostile name, with
    what it did instead (empty: every one refused it, naming the field)."""
    missed = {}
    for component in ("jobs", "models", "endpoints"):
        for attr, target in entry_points(getattr(backend, component)):
            where = f"{component}.{attr}({target}=...)"
            try:
                result = call(getattr(backend, component), attr, target, folder)
            except SpecError as exc:
                if repr(HOSTILE) not in str(exc) or ".name" not in str(exc).split(":")[0]:
                    missed[where] = f"refused, but its error does not name the field and value: {exc}"
                continue
            except Exception as exc:  # noqa: BLE001 - anything but the check's refusal is a miss
                missed[where] = f"{type(exc).__name__}: {exc}"
                continue
            missed[where] = f"answered {result!r}"
    return missed
