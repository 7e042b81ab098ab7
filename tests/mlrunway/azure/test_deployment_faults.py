"""Deployment failures and a busy endpoint on Azure ML, through the real MLClient against the fake service as the
spec has it: a failed first provisioning is deleted and made again (issue 29, 4); a failure's reason comes from
the operation the resource names when the PUT answered 200 without an operation header (5); 409s on the
rollback's traffic update are retried, and a rollback that still cannot land says so loudly (6)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import mlrunway.azure.writes as azure_writes
from mlrunway.backend.capture import DataCollector
from mlrunway.backend.types import DeploymentSettings, ProvisioningState
from mlrunway.deploy import stable
from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.errors import EndpointError
from tests.conftest import REPO
from tests.mlrunway.azure.conftest import ENDPOINT, provisioned
from tests.mlrunway.azure.fake_azureml import WS_PATH
from tests.mlrunway.azure.test_stable_endpoint_azure import ONE_IMAGE, live_traffic

SETTINGS = DeploymentSettings(model="digits:2", code_dir=str(REPO / "training"))


def settle(azure, slot: str):
    provisioned(azure, slot)
    return azure.endpoints.get_deployment(ENDPOINT, slot)


def test_a_failed_first_provisioning_is_deleted_and_made_again_and_its_reason_reaches_the_task(fake, production):
    azure = production
    fake.deployment_failure, fake.deployment_failure_code = "conda: package onnxruntime==9 not found", "ImageBuildFailure"
    azure.endpoints.begin_create_or_update_deployment(ENDPOINT, "green", SETTINGS)
    failed = settle(azure, "green")
    assert failed.provisioning_state is ProvisioningState.FAILED
    assert "ImageBuildFailure: conda: package onnxruntime==9 not found" in failed.error
    assert "--- storage-initializer log ---" in failed.error and "--- inference-server log ---" in failed.error

    fake.deployment_failure = None  # the team fixed its environment; the retry deploys to the same slot
    azure.endpoints.begin_create_or_update_deployment(ENDPOINT, "green", SETTINGS)
    assert settle(azure, "green").provisioning_state is ProvisioningState.SUCCEEDED
    assert fake.sent("DELETE", f"{WS_PATH}/onlineEndpoints/{ENDPOINT}/deployments/green$")
    assert not fake.refused


def test_a_failed_update_answered_200_names_its_reason_from_the_resources_operation(fake, production):
    """The spec declares no Azure-AsyncOperation on a PUT's 200: the reason is read from the operation URL the
    resource's free-form properties carry, even in a process that never saw the PUT (a trigger)."""
    azure = production
    fake.deployment_failure, fake.deployment_failure_code = "scoring container crashed at init()", "ResourceNotReady"
    azure.endpoints.begin_create_or_update_deployment(ENDPOINT, "blue", SETTINGS)  # an update of blue: a 200
    puts = [r for r in fake.sent("PUT", f"{WS_PATH}/onlineEndpoints/{ENDPOINT}/deployments/blue$")]
    assert len(puts) == 2  # created by the fixture, then this update
    info = azure.endpoints.get_deployment(ENDPOINT, "blue")  # as a trigger asks: no operation in hand
    while not info.provisioning_state.is_terminal():
        info = azure.endpoints.get_deployment(ENDPOINT, "blue")
    assert info.provisioning_state is ProvisioningState.FAILED
    assert "ResourceNotReady: scoring container crashed at init()" in info.error


def test_409s_on_the_rollbacks_traffic_update_are_retried_and_a_rollback_that_cannot_land_says_so(
        fake, production, digits, monkeypatch):
    azure = production
    monkeypatch.setattr(azure_writes, "WRITE_BACKOFF_S", 0.01)
    r = stable.begin(azure, ENDPOINT, "run-2", SETTINGS, RolloutPolicy(steps=(50, 100), window_s=0), 3600)
    provisioned(azure, "green")
    stable.next_phase(azure, r)
    for _ in range(6):  # 3 to the challenger: short of 20, held at once (no extension), traffic back to blue
        azure.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
    fake.conflict_writes = 3  # green is still updating: the service answers 409 three times
    after = stable.after_window(azure, r)
    assert after.decision == "held" and live_traffic(fake)["traffic"] == {"blue": 100}

    stable.next_phase(azure, r)  # the next step, 100%, and now the endpoint stays busy past the bound
    azure.endpoints.write.retry_s = 0.05
    fake.conflict_writes = 10**6
    with pytest.raises(EndpointError, match=r"ROLLBACK FAILED on endpoint digits-prod: traffic is still "
                                            r"\{'green': 100, 'blue': 0\}.*set blue to 100% by hand.*HTTP 409: Endpoint digits-prod "
                                            r"is busy"):
        stable.after_window(azure, r)


def test_a_data_collector_reaches_the_deployment_in_the_rest_apis_shape_and_survives_a_retried_write(
        fake, production, monkeypatch):
    """azure-ai-ml's DataCollector, checked by the fake against mfe.json: every collection enabled with the sampling
    rate, the rolling rate. The SDK deletes the entity's sampling_rate when it serializes it, so a PUT retried
    after a 409 must be a new entity (it was one entity: the retry raised AttributeError)."""
    azure = production
    monkeypatch.setattr(azure_writes, "WRITE_BACKOFF_S", 0.01)
    collector = DataCollector.parse({"collections": {"model_inputs": {"enabled": "true"}, "model_outputs": True,
                                                     "request": True}, "sampling_rate": 0.5, "rolling_rate": "minute"})
    fake.conflict_writes = 1
    azure.endpoints.begin_create_or_update_deployment(ENDPOINT, "green", replace(SETTINGS, data_collector=collector))
    puts = fake.sent("PUT", f"{WS_PATH}/onlineEndpoints/{ENDPOINT}/deployments/green$")
    assert len(puts) == 2 and not fake.refused  # the 409, then the same deployment again
    sent = puts[-1].json()["properties"]["dataCollector"]
    assert sent["rollingRate"].lower() == "minute"
    assert {name: (c["dataCollectionMode"].lower(), c["samplingRate"]) for name, c in sent["collections"].items()} == {
        "model_inputs": ("enabled", 0.5), "model_outputs": ("enabled", 0.5), "request": ("enabled", 0.5)}
    assert settle(azure, "green").provisioning_state is ProvisioningState.SUCCEEDED
    read = azure.endpoints.deployments.ml.online_deployments.get(name="green", endpoint_name=ENDPOINT).data_collector
    assert read.sampling_rate == 0.5 and set(read.collections) == {"model_inputs", "model_outputs", "request"}
