from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

HEAVY = ("torch", "onnx", "onnxruntime", "mlflow", "azure")


@pytest.mark.parametrize("module", ["train_sweep_deploy", "demand_forecast", "deploy_model", "batch_scoring",
                                    "monitor_endpoint", "prune_workspace"])
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
    assert bag.dags["monitor_endpoint"].task_ids == ["check_drift"]
    assert bag.dags["prune_workspace"].task_ids == ["prune"]


def test_a_production_endpoints_dag_also_runs_when_its_monitor_finds_drift_and_collects_by_default():
    probe = (f"import sys; sys.path.insert(0, {str(REPO / 'dags')!r}); import train_sweep_deploy as d; "
             "t = d.dag.timetable; print(type(t).__name__, [a.uri for a in t.asset_condition.objects], "
             "d.dag.params.get_param('data_collector').value['collections'])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "MLRUNWAY_ENDPOINT_NAME": "digits-prod"}).stdout.strip().splitlines()[-1]
    assert out.startswith("AssetOrTimeSchedule ['mlrunway://endpoints/digits-prod/drift']"), out
    assert "'model_inputs': {'enabled': 'true'}, 'model_outputs': {'enabled': 'true'}" in out
