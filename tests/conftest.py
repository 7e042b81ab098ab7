"""Shared fixtures: a workspace in tmp_path, the local job service, and the digits dataset written once."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrunway.local.jobs import LocalJobs
from mlrunway.local.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path / "ws")


@pytest.fixture
def jobs(workspace: Workspace) -> LocalJobs:
    return LocalJobs(workspace, kill_grace_s=2.0)


@pytest.fixture(scope="session")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlrunway.data import write_digits

    return write_digits(tmp_path_factory.mktemp("data") / "digits")


def write_script(folder: Path, body: str, name: str = "script.py") -> Path:
    """Write a job's code folder holding one script; return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(body)
    return folder
