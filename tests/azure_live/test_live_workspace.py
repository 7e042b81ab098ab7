"""Opt-in: the whole DAG on a real Azure ML workspace, with tiny settings.

Run with ``pytest -m azure tests/azure_live`` after setting:

- ``MLRUNWAY_AZURE_SUBSCRIPTION``, ``MLRUNWAY_AZURE_RESOURCE_GROUP``, ``MLRUNWAY_AZURE_WORKSPACE``;
- ``MLRUNWAY_AZURE_COMPUTE`` (an existing compute cluster; default ``cpu-cluster``);
- credentials that DefaultAzureCredential finds (``az login``, environment variables or a managed identity).

It creates jobs, two models and an endpoint in that workspace, and deletes the endpoint at the end; it costs
a few minutes of the cluster and of one ``Standard_DS3_v2`` instance.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.azure, pytest.mark.e2e]
NEEDED = ("MLRUNWAY_AZURE_SUBSCRIPTION", "MLRUNWAY_AZURE_RESOURCE_GROUP", "MLRUNWAY_AZURE_WORKSPACE")


@pytest.mark.skipif(not all(os.environ.get(v) for v in NEEDED), reason=f"set {', '.join(NEEDED)} to run on Azure")
def test_dag_runs_on_a_real_workspace(airflow_db, monkeypatch, digits) -> None:

    conn = {"conn_type": "azure_ml", "extra": {
        "subscription_id": os.environ["MLRUNWAY_AZURE_SUBSCRIPTION"],
        "resource_group": os.environ["MLRUNWAY_AZURE_RESOURCE_GROUP"],
        "workspace_name": os.environ["MLRUNWAY_AZURE_WORKSPACE"],
        "compute": os.environ.get("MLRUNWAY_AZURE_COMPUTE", "cpu-cluster"), "credential": "default"}}
    monkeypatch.setenv("AIRFLOW_CONN_AZURE_LIVE", json.dumps(conn))
    sys.path.insert(0, str(REPO / "dags"))
    from train_sweep_deploy import dag

    run = dag.test(run_conf={"backend_conn_id": "azure_live", "data_dir": str(digits), "epochs": 3,
                             "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1,
                             "endpoint_prefix": "mlrlive"})
    assert str(run.state) == "success"
