"""Import rules for the folders import-linter cannot see (they are not packages): ``dags/`` and ``training/``. A
DAG file is parsed by every scheduler loop, so it imports no heavy library at parse time and reaches a backend
only through the operators; the scripts that run on compute (train.py, score.py) import nothing of the project,
which is not installed there. (The UI plugin is ``mlrunway.airflow.plugin``, under import-linter's contracts.)"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

HEAVY = ("torch", "onnx", "onnxruntime", "mlflow", "sklearn", "scipy", "optuna", "azure")


def imports(path: Path) -> list[tuple[str, bool]]:
    """Every module ``path`` imports, and whether at the module's top level (parse time)."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, id(node) in top))
    return found


def under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names or module == "__future__"


@pytest.mark.parametrize("path", sorted((REPO / "dags").glob("*.py")), ids=lambda p: p.name)
def test_a_dag_file_imports_nothing_heavy_at_parse_time_and_no_backend(path):
    for module, top in imports(path):
        assert not under(module, "mlrunway.local", "mlrunway.azure", "mlrunway.backend"), \
            f"{path.name} imports {module}: a DAG reaches a backend through the operators"
        if top:
            assert not under(module, *HEAVY), f"{path.name} imports {module} at parse time"
            assert stdlib(module) or under(module, "airflow", "mlrunway.operators", "mlrunway.airflow", "mlrunway.lifecycle",
                                           "mlrunway.specs",
                                           "mlrunway.check", "mlrunway.data", "mlrunway.early_termination",
                                           "mlrunway.errors"), f"{path.name} imports {module} at parse time"


@pytest.mark.parametrize("script", ["train.py", "score.py"])
def test_what_runs_on_compute_imports_nothing_of_the_project(script):
    for module, _ in imports(REPO / "training" / script):
        assert not under(module, "mlrunway", "operators", "airflow"), f"training/{script} imports {module}"


def test_the_rules_see_a_forbidden_import(tmp_path):
    source = tmp_path / "dag.py"
    source.write_text("import torch\n\ndef f():\n    from mlrunway.local.backend import X\n")
    assert imports(source) == [("torch", True), ("mlrunway.local.backend", False)]
