"""Opt-in: the whole DAG on a real Azure ML workspace, with tiny settings.

Run with ``pytest -m azure tests/azure_live`` after setting:

- ``MLRUNWAY_AZURE_SUBSCRIPTION``, ``MLRUNWAY_AZURE_RESOURCE_GROUP``, ``MLRUNWAY_AZURE_WORKSPACE``;
- ``MLRUNWAY_AZURE_COMPUTE`` (an existing compute cluster; unset: serverless compute, with
  ``MLRUNWAY_AZURE_JOB_INSTANCE_TYPE`` as the VM size, default ``Standard_DS3_v2``);
- credentials that DefaultAzureCredential finds (``az login``, environment variables or a managed identity).

It creates jobs, two models and an endpoint in that workspace, and deletes the endpoint at the end; it costs
a few minutes of compute and of one ``Standard_DS3_v2`` instance. The second test covers what the fake can only
imitate: a model registered from a trial's outputs downloads from the artifact store, and a deployment update
(a second instance) passes through the service's own states, Scaling among them, to Succeeded. The third: a
team's AMLToken endpoint comes through a rollout's writes and the blob lease unchanged, and gives a token.
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
        "compute": os.environ.get("MLRUNWAY_AZURE_COMPUTE", ""),
        "job_instance_type": os.environ.get("MLRUNWAY_AZURE_JOB_INSTANCE_TYPE", "Standard_DS3_v2"),
        "credential": "default"}}
    monkeypatch.setenv("AIRFLOW_CONN_AZURE_LIVE", json.dumps(conn))
    sys.path.insert(0, str(REPO / "dags"))
    from train_sweep_deploy import dag

    run = dag.test(run_conf={"backend_conn_id": "azure_live", "data_dir": str(digits), "epochs": 3,
                             "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1,
                             "endpoint_prefix": "mlrlive"})
    assert str(run.state) == "success"


@pytest.mark.skipif(not all(os.environ.get(v) for v in NEEDED), reason=f"set {', '.join(NEEDED)} to run on Azure")
def test_artifact_store_download_and_an_update_through_scaling(tmp_path, digits) -> None:
    """Serverless training, the best trial's model downloaded from the artifact store, then `blue` scaled from
    one instance to two: every provisioning state the service reports is recorded and the last is Succeeded."""
    import time

    from mlrunway.azure.backend import AzureBackend
    from mlrunway.backend.types import DeploymentSettings, ProvisioningState
    from mlrunway.deploy.blue import deploy_blue
    from mlrunway.onnx_export import export_registered
    from training.tutorial import train_job

    azure = AzureBackend.from_connection({
        "subscription_id": os.environ["MLRUNWAY_AZURE_SUBSCRIPTION"],
        "resource_group": os.environ["MLRUNWAY_AZURE_RESOURCE_GROUP"],
        "workspace_name": os.environ["MLRUNWAY_AZURE_WORKSPACE"],
        "job_instance_type": os.environ.get("MLRUNWAY_AZURE_JOB_INSTANCE_TYPE", "Standard_DS3_v2")})
    name = f"mlrlive-{int(time.time())}"
    spec = train_job(str(REPO / "training"), str(digits), num_epochs=2)
    azure.jobs.validate(spec)
    assert azure.jobs.wait(azure.jobs.submit(f"{name}-train", spec).name, timeout=3600, poll_s=30).status.value == \
        "Completed"
    model = azure.models.register(name, "model", base=azure.job_outputs(f"{name}-train"))
    assert (azure.models.download(name, model.version, tmp_path / "model") / "signature.json").is_file()
    onnx, _ = export_registered(azure, name, model.version, job_name=f"{name}-export", data_dir=str(digits),
                                timeout=3600)
    settings = DeploymentSettings(model=f"{onnx.name}:{onnx.version}", code_dir=str(REPO / "training"),
                                  instance_count=1)
    try:
        deploy_blue(azure, name[:32], settings, digits)
        started = azure.endpoints.begin_create_or_update_deployment(
            name[:32], "blue", DeploymentSettings(model=settings.model, code_dir=settings.code_dir, instance_count=2))
        states = [started.provisioning_state]
        while not states[-1].is_terminal():
            time.sleep(15)
            states.append(azure.endpoints.get_deployment(name[:32], "blue", operation=started.operation)
                          .provisioning_state)
        print("provisioning states of the update:", [s.value for s in states])
        assert states[-1] is ProvisioningState.SUCCEEDED
    finally:
        azure.endpoints.delete(name[:32])


@pytest.mark.skipif(not all(os.environ.get(v) for v in NEEDED), reason=f"set {', '.join(NEEDED)} to run on Azure")
def test_a_teams_token_endpoint_is_kept_as_it_is_and_gives_a_token() -> None:
    """Issue 29: an endpoint a team made (AMLToken auth, its own description and tags) goes through what a rollout
    does to it (the endpoint's create-or-update, the lease taken and given back), and comes out as it was; its
    credentials are a token with an expiry. No deployment: an endpoint alone costs nothing."""
    import time

    from azure.ai.ml.entities import ManagedOnlineEndpoint

    from mlrunway.azure.backend import AzureBackend

    azure = AzureBackend.from_connection({
        "subscription_id": os.environ["MLRUNWAY_AZURE_SUBSCRIPTION"],
        "resource_group": os.environ["MLRUNWAY_AZURE_RESOURCE_GROUP"],
        "workspace_name": os.environ["MLRUNWAY_AZURE_WORKSPACE"]})
    name = f"mlrtok-{int(time.time())}"[:32]
    team = ManagedOnlineEndpoint(name=name, auth_mode="aml_token", description="the team's own endpoint",
                                 tags={"cost-center": "4711"})
    azure.client.online_endpoints.begin_create_or_update(team).result()
    try:
        azure.endpoints.create_or_update(name)
        assert azure.endpoints.lease(name, "live-run", 600) is None
        assert azure.endpoints.lease(name, "another-run", 600) is not None  # the blob lease (or the tag) holds
        azure.endpoints.release(name, "live-run")
        kept = azure.client.online_endpoints.get(name)
        assert kept.auth_mode == "aml_token" and kept.description == "the team's own endpoint"
        assert kept.tags["cost-center"] == "4711" and "mlrunway.lease" not in kept.tags
        keys = azure.endpoints.get_keys(name)
        assert keys["token"] and float(keys["expires"]) > time.time()
    finally:
        azure.endpoints.delete(name)
