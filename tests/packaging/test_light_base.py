"""The base install orchestrates without the heavy packages (issue 61, 3): in a process where torch, onnx,
onnxruntime, mlflow, optuna, pandas and sklearn cannot be imported (a meta-path hook refuses them), the Airflow
adapter, the operators and the builder import, every DAG of dags/ parses, and what needs an extra says which
``pip install`` fixes it; the export task, which submits its job and reads its verdict, needs none of them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.conftest import REPO

HEAVY = ("torch", "onnx", "onnxruntime", "onnxscript", "mlflow", "optuna", "pandas", "sklearn")
PROBE = textwrap.dedent('''
    import importlib, json, pkgutil, sys

    HEAVY = {heavy!r}

    class Refuse:
        """As if the base install had none of them."""
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HEAVY:
                raise ModuleNotFoundError(f"No module named {{name!r}} (refused: not in the base install)", name=name)
            return None

    sys.meta_path.insert(0, Refuse())
    import mlrunway.airflow, mlrunway.operators
    imported = []
    for package in (mlrunway.airflow, mlrunway.operators):
        for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
            imported.append(module.name)
    importlib.import_module("mlrunway.lifecycle")  # the DAG builder, above the operators
    imported.append("mlrunway.lifecycle")
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag({dags!r})
    from mlrunway.backend.registry import connect
    from mlrunway.backend.fake import FakeBackend
    from mlrunway.onnx_export import export_registered
    fake = FakeBackend()
    folder = fake.root / "model"
    folder.mkdir()
    (folder / "signature.json").write_text(json.dumps({{"inputs": [{{"name": "x", "shape": [None, 4]}}]}}))
    fake.models.register("m", folder)
    errors = {{}}
    for name, call in (("local", lambda: connect("mlrunway_local", {{}})),
                       ("export", lambda: export_registered(fake, "m", 1, job_name="m-export"))):
        try:
            call()
        except Exception as exc:
            errors[name] = f"{{type(exc).__name__}}: {{exc}}"
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    print(json.dumps({{"imported": imported, "dags": sorted(bag.dag_ids), "import_errors": bag.import_errors,
                      "heavy": heavy, "errors": errors}}))
''')


def test_the_adapter_the_operators_and_every_dag_need_no_heavy_package(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY, dags=str(REPO / "dags"))],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "AIRFLOW_HOME": str(tmp_path), "PYTHONPATH": str(REPO),
                               "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "MLRUNWAY_WORKSPACE": str(tmp_path / "ws")})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["import_errors"] == {} and len(found["dags"]) >= 7, found
    assert "mlrunway.operators.export_onnx" in found["imported"] and "mlrunway.lifecycle" in found["imported"]
    assert found["heavy"] == []
    # What needs an extra names it, before anything imports it.
    assert found["errors"]["local"].startswith("MissingExtra: the mlrunway_local backend needs mlflow, which is not "
                                               'installed here: pip install "mlrunway[local]"'), found["errors"]
    assert "export" not in found["errors"]  # export is a job on the backend: its task here builds it and reads it
