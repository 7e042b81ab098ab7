from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

HEAVY = ("torch", "onnx", "onnxruntime", "mlflow", "azure")


@pytest.mark.parametrize("module", ["train_sweep_deploy", "demand_forecast", "deploy_model", "batch_scoring"])
def test_dag_file_imports_no_heavy_module(module):
    probe = (f"import sys; sys.path.insert(0, {str(REPO / 'dags')!r}); import {module}; "
             f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_dagbag_loads_the_dag_without_errors():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags["train_sweep_deploy"]
    assert dag.task_ids == ["train", "sweep", "pick_best", "export_onnx", "deploy_blue", "cleanup"]
    assert [sorted(dag.get_task(t).downstream_task_ids) for t in dag.task_ids[:-1]] == [
        ["sweep"], ["pick_best"], ["export_onnx"], ["deploy_blue"], ["cleanup"]]
    assert dag.get_task("cleanup").trigger_rule == "all_done"
    assert dag.catchup is False
    second = bag.dags["demand_forecast"]  # a team's own project through the same operators
    assert second.task_ids == dag.task_ids
    assert bag.dags["deploy_model"].task_ids == ["deploy_blue", "cleanup"]
    assert type(bag.dags["batch_scoring"].timetable).__name__ == "AssetTriggeredTimetable"  # on production
