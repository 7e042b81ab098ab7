"""What mlrunway still reads from an earlier release, in one place: each renamed word, the release that renamed it
and the release that stops reading it.

A stored record (a local workspace's state file) is migrated by its format
(:data:`mlrunway.local.formats.MIGRATIONS`), silently: nobody can rewrite it. A user's own words (a DAG's
arguments, a spec built by hand) are read with a ``FutureWarning`` naming the new word, for one release.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from mlrunway import check

__all__ = ["KIND_READ_UNTIL", "renamed_kind", "type_from_kind"]

# Issue 30 (0.2.0) took azure-ai-ml's word, type, for a policy's, an expression's and a distribution's kind.
KIND_READ_UNTIL = "0.4.0"


def type_from_kind(field: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with ``type`` for the ``kind`` a user still writes, warning once per place it is written; both
    given is a SpecError naming ``<field>.kind``."""
    fields = dict(data)
    if "kind" not in fields:
        return fields
    if "type" in fields:
        raise check.fail(f"{field}.kind", f"is given beside type {fields['type']!r}", "drop kind: type is its name")
    warnings.warn(f"{field}.kind is read as {field}.type until mlrunway {KIND_READ_UNTIL}: write type, "
                  "azure-ai-ml's word", FutureWarning, stacklevel=3)
    fields["type"] = fields.pop("kind")
    return fields


def renamed_kind(data: Any) -> Any:
    """A stored record's ``kind`` as ``type`` (no warning: see the module's docstring)."""
    return {"type" if key == "kind" else key: value for key, value in data.items()} if isinstance(data, dict) else data
