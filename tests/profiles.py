"""The Hypothesis profiles of a generated test: one bounded for the test suite, one long for ``make test-long`` (or a
Makefile target of its own), both derandomized, so a run draws the same cases every time."""

from __future__ import annotations

import os
from collections.abc import Sequence

from hypothesis import HealthCheck, settings


def suite_and_long(name: str, *, suite: int, long: int, env: str, suppress: Sequence[HealthCheck] = ()) -> str:
    """Register ``<name>-suite`` (``suite`` examples) and ``<name>-long`` (``$env`` examples, ``long`` when it is
    set but empty); the name of the one this run uses: the long one when ``env`` is set."""
    settings.register_profile(f"{name}-suite", max_examples=suite, derandomize=True, database=None, deadline=None,
                              suppress_health_check=list(suppress))
    settings.register_profile(f"{name}-long", settings.get_profile(f"{name}-suite"),
                              max_examples=int(os.environ.get(env) or long))
    return f"{name}-long" if os.environ.get(env) else f"{name}-suite"
