"""One namespace (issue 61, 1): the repository's operators/ ships and is checked as mlrunway.operators, through the
mlrunway/operators -> ../operators link; nothing imports a top-level ``operators``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_the_operators_are_mlrunway_operators_through_the_link():
    link = REPO / "mlrunway" / "operators"
    assert link.is_symlink() and link.resolve() == (REPO / "operators").resolve()
    import mlrunway.operators as operators

    assert Path(operators.__file__).parent == link  # imported by the namespace's path, not the folder's own
    assert operators.TrainModelOperator.__module__ == "mlrunway.operators.train"


def test_the_import_contracts_see_an_operator_import_a_backend(tmp_path):
    """A forbidden import planted in an operator is caught by the project's own contracts (pyproject.toml): grimp
    follows the link, so the operators are checked as mlrunway.operators."""
    for part in ("mlrunway", "operators"):
        shutil.copytree(REPO / part, tmp_path / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with open(tmp_path / "operators" / "train.py", "a") as source:
        source.write("\nimport mlrunway.local.backend  # planted\n")
    done = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "Operators reach a backend only through the hook BROKEN" in done.stdout
    assert "mlrunway.operators.train -> mlrunway.local.backend" in done.stdout


def test_a_top_level_operators_import_is_refused_by_the_linter(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from operators import TrainModelOperator\nimport operators._base\n")
    done = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--no-cache", "--config",
                           str(REPO / "pyproject.toml"), str(probe)], capture_output=True, text=True)
    assert done.stdout.count("TID251") == 2 and "import mlrunway.operators" in done.stdout, done.stdout
