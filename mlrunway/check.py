"""Small named validators shared by the specs, the policies, the backends and the operators; each raises SpecError
naming the field."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from mlrunway.errors import SpecError, shorten

# Azure ML job and experiment names: letters, digits, '-' and '_', starting with a letter or digit.
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$")
# Azure ML model names: letters, digits, '-', '_' and '.', starting with a letter or digit (never '..').
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")
# Azure ML online endpoint and deployment names: 3 to 32 characters, a letter first, no hyphen last.
ENDPOINT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{1,30}[A-Za-z0-9]$")
SHOWN_CHARS = 80  # a bad value as an error echoes it: a line's worth, whatever its length

__all__ = ["endpoint_name", "fail", "job_name", "model_name", "model_version", "number", "one_of", "optional_seconds",
           "positive_int", "shown", "traffic"]


def shown(value: Any) -> str:
    """``value`` as an error echoes it: its repr, or, past SHOWN_CHARS, its head and tail with what was cut
    counted, so a 5,000-character name does not bury the field and the fix that follow it."""
    return shorten(repr(value), SHOWN_CHARS)


def fail(field: str, problem: str, fix: str) -> SpecError:
    """Build the one-sentence error every spec raises: field, problem, fix."""
    return SpecError(f"{field}: {problem}; {fix}")


def job_name(field: str, value: str) -> str:
    if not isinstance(value, str) or not _JOB_NAME.match(value):
        raise fail(
            field,
            f"{shown(value)} is not a valid name",
            "use 1 to 255 letters, digits, '-' or '_', starting with a letter or digit",
        )
    return value


def model_name(field: str, value: str) -> str:
    if not isinstance(value, str) or not _MODEL_NAME.match(value):
        raise fail(field, f"{shown(value)} is not a valid model name",
                   "use 1 to 255 letters, digits, '-', '_' or '.', starting with a letter or digit")
    return value


def model_version(field: str, value: object) -> int:
    """A version number as a user or a URL may give it: 3 or "3"."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isdigit())) \
            or int(value) < 1:
        raise fail(field, f"{shown(value)} is not a version number",
                   "pass a whole number >= 1 (or 'latest' where allowed)")
    return int(value)


def endpoint_name(name: str, field: str = "endpoint.name") -> str:
    """Azure's rule: 3 to 32 characters, a letter first, letters, digits and hyphens, no hyphen last."""
    if not isinstance(name, str) or not ENDPOINT_NAME.match(name):
        raise fail(
            field, f"{shown(name)} is not a valid endpoint name",
            "use 3 to 32 letters, digits and hyphens, starting with a letter and not ending with a hyphen",
        )
    return name


def number(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise fail(field, f"{shown(value)} is not a finite number", "pass an int or float")
    return float(value)


def positive_int(field: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(field, f"{shown(value)} is not an integer >= {minimum}", f"pass an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise fail(field, f"{value} is over the limit of {maximum}", f"pass at most {maximum}")
    return value


def optional_seconds(field: str, value: Any) -> float | None:
    if value is None:
        return None
    seconds = number(field, value)
    if seconds <= 0:
        raise fail(field, f"{shown(value)} is not a positive number of seconds", "pass seconds > 0 or None")
    return seconds


def flag(field: str, value: Any) -> bool:
    """A yes-or-no argument as given, or as a template renders it ("True", "false", "1", "0"); empty is no."""
    if isinstance(value, bool):
        return value
    if value is None or value == "":
        return False
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "false", "0"):
        return value.strip().lower() in ("true", "1")
    raise fail(field, f"{shown(value)} is not true or false", "pass true or false")


def one_of(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise fail(field, f"{shown(value)} is not supported", f"use one of {', '.join(allowed)}")
    return value


def traffic(traffic: dict[str, int], mirror: dict[str, int], deployments: Collection[str]) -> None:
    """Check an endpoint's weights before any change: integers 0..100 naming ``deployments`` that sum to 0 or 100;
    mirror traffic goes to one deployment with no live traffic, at most 50%."""
    for label, weights in (("traffic", traffic), ("mirror_traffic", mirror)):
        for name, weight in weights.items():
            if name not in deployments:
                raise fail(f"endpoint.{label}.{name}", "names no deployment of this endpoint",
                       f"create it first or use one of {sorted(deployments) or 'none yet'}")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
                raise fail(f"endpoint.{label}.{name}", f"{weight!r} is not an integer percentage", "use 0 to 100")
    total = sum(traffic.values())
    if total not in (0, 100):
        raise fail("endpoint.traffic", f"weights sum to {total}", "make them sum to 100 (or 0 for no traffic)")
    live = {n: w for n, w in mirror.items() if w}
    if len(live) > 1 or sum(live.values()) > 50:
        raise fail("endpoint.mirror_traffic", f"{live} is over the limit", "mirror at most 50% to one deployment")
    if any(traffic.get(n, 0) for n in live):
        raise fail("endpoint.mirror_traffic", "targets a deployment that has live traffic", "mirror to one with 0%")


def inside(base: str | Path, path: str | Path, field_name: str = "model.path") -> Path:
    """Resolve ``path`` under ``base``; reject one that escapes it through '..', an absolute path or a symlink, or
    that does not exist (a model's files, which every registry copies from a job's outputs)."""
    root = Path(base).resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise fail(field_name, f"{str(path)!r} escapes {root}", "pass a path inside the folder, without '..'")
    if not target.exists():
        raise fail(field_name, f"{target} does not exist", "pass the model's file or folder")
    if target.is_dir():
        for dirpath, dirnames, filenames in os.walk(target):
            for entry in (*dirnames, *filenames):
                link = Path(dirpath) / entry
                if link.is_symlink() and root not in link.resolve().parents:
                    raise fail(field_name, f"symlink {link} points outside {root}", "copy the file in instead")
    return target
