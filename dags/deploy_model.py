"""Deploy a registered model version to a stable production endpoint, or roll it back: the deploy half of
train_sweep_deploy, for a model trained elsewhere or a person's rollback.

Trigger it with ``{"model_version": 7}`` (through the champion/challenger gate and the staged rollout, as a
scheduled run's model goes) or ``{"rollback_to": "previous"}`` (the version production replaced last, through the
same staged rollout, without the gate). The decision (``created``, ``promoted``, ``held``, ``rolled_back`` or
``skipped``) is the deploy task's XCom, and a change of the live model is an event of the endpoint's asset.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, Param

from mlrunway.airflow.params import backend_param
from mlrunway.operators import CleanupOperator, DeployBlueOperator

PROJECT = Path(__file__).resolve().parent.parent
P = "{{ params.%s }}"
NULLABLE_STRING = ["null", "string"]

with DAG(
    dag_id="deploy_model",
    description="A registered model to the stable endpoint through the gate and a staged rollout, or a rollback",
    schedule=None,
    start_date=datetime(2026, 1, 5),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["mlrunway", "production"],
    params={
        "endpoint_name": Param(os.environ.get("MLRUNWAY_ENDPOINT_NAME") or "digits-prod", type="string",
                               pattern="^[A-Za-z][A-Za-z0-9-]{2,31}$", description="The stable endpoint."),
        "model_name": Param("digits-onnx", type="string", minLength=1, description="The registered ONNX model."),
        "model_version": Param(None, type=["null", "integer"], minimum=1,
                               description="The version to deploy (empty with rollback_to)."),
        "rollback_to": Param(None, type=NULLABLE_STRING, enum=[None, "previous"],
                             description="previous: redeploy the version production replaced last."),
        "code_dir": Param(str(PROJECT / "training"), type="string", minLength=1, description="Folder of score.py."),
        "data_dir": Param(os.environ.get("MLRUNWAY_DATA_DIR") or str(PROJECT / "data" / "digits"), type="string",
                          description="A classifier's data: the gate scores on its test/ split."),
        "require_approval": Param(False, type="boolean",
                                  description="Stable endpoint: wait for a person's approval (python -m "
                                              "mlrunway.airflow.approval) after the gate, before traffic moves."),
        "min_improvement": Param(0.0, type="number", minimum=0, description="How much better the model must score."),
        "rollout": Param(None, type=["null", "object"], description="As train_sweep_deploy's rollout."),
        "backend_conn_id": backend_param(),
    },
) as dag:
    common = {"backend_conn_id": P % "backend_conn_id", "name_prefix": "deploy"}
    deploy = DeployBlueOperator(
        task_id="deploy_blue", model_name=P % "model_name", model_version="{{ params.model_version or 0 }}",
        code_dir=P % "code_dir", data_dir=P % "data_dir", production={name: P % name for name in (
            "endpoint_name", "min_improvement", "require_approval", "rollout", "rollback_to")}, **common,
    )
    deploy >> CleanupOperator(task_id="cleanup", endpoint_name=P % "endpoint_name", **common)
