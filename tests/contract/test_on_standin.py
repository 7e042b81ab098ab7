"""The costly-backend mechanism of conftest.py proved on a stand-in: the fake backend, registered under ``standin`` by
this file alone, runs every contract test from here, its set-ups counted."""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.conftest import COSTLY, Factory, collect_on, contract_modules, fake_backend

SET_UPS: list[Path] = []


@contextlib.contextmanager
def standin_set_up(root: Path) -> Iterator[Factory]:
    """The stand-in's costly set-up, counted: the fake backend's factory (a fresh fake per test)."""
    SET_UPS.append(root)
    yield fake_backend


COSTLY.setdefault("standin", standin_set_up)  # a test-only entry: no other file runs on it
collect_on("standin", globals())


@pytest.fixture(scope="module", autouse=True)
def set_up_once_for_the_file() -> Iterator[None]:
    """After this file's last test (each uses the stand-in): it was set up exactly once."""
    yield
    assert len(SET_UPS) == 1, f"the costly backend was set up {len(SET_UPS)} times for one file"


def cases(test: object) -> int:
    """How many cases a contract test has of its own (its ``parametrize`` marks), on one backend."""
    marks = [mark for mark in getattr(test, "pytestmark", []) if mark.name == "parametrize"]
    return math.prod(len(mark.args[1]) for mark in marks)


def test_each_contract_test_is_collected_here_once_per_case_with_the_costly_backends_id(
        backend: object, request: pytest.FixtureRequest) -> None:
    here = [item for item in request.session.items if item.path == request.path and item is not request.node]
    assert all(item.callspec.params["costly_set_up"] == "standin" for item in here)  # type: ignore[attr-defined]
    assert all(item.name.startswith(f"{item.originalname}[standin") for item in here)  # type: ignore[attr-defined]
    expected = {name: cases(test) for module in contract_modules() for name, test in vars(module).items()
                if name.startswith("test_") and callable(test)}
    found = Counter(item.originalname for item in here)  # type: ignore[attr-defined]
    assert set(found) <= set(expected) and all(found[name] <= expected[name] for name in found)
    selected = (request.config.option.keyword or request.config.option.deselect
                or any("::" in arg for arg in request.config.args))
    if not selected:  # the whole file was collected: every contract test, once per case of its own
        assert found == expected
    assert SET_UPS and len(SET_UPS) == 1
