"""The fake holds every request to a contract (issue 58): an ARM route and api-version no spec file has, or a
data-plane route on no allow-list entry, is its named 500; the service's rules beyond the schema (an asset
version's path never changes) are its answers. Each through the real ``MLClient`` and azure-core's pipeline."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError

from tests.mlrunway.azure.fake_azureml import (
    ARM,
    DATA_PLANE,
    RESOURCE_GROUP,
    SPEC,
    SUBSCRIPTION,
    WORKSPACE,
    WS_PATH,
    FakeCredential,
)

STORE = "azureml://datastores/workspaceblobstore/paths"


@pytest.fixture
def ml_client(fake):
    from azure.ai.ml import MLClient

    return MLClient(FakeCredential(), SUBSCRIPTION, RESOURCE_GROUP, WORKSPACE, transport=fake, show_progress=False)


def test_an_arm_route_without_a_schema_is_a_500_naming_it_and_its_api_version(fake, ml_client):
    """Environment versions are read with 2023-04-01-preview, whose file keeps only their PUT."""
    with pytest.raises(HttpResponseError) as refused:
        ml_client.environments.get("scoring", version="1")
    route = f"{WS_PATH}/environments/scoring/versions/1"
    message = (f"the fake has no schema for GET {route} at api-version 2023-04-01-preview: add one to "
               "tests/mlrunway/azure/spec")
    assert refused.value.status_code == 500 and message in str(refused.value)
    assert fake.take_no_schema() == [message]
    assert len(fake.sent("GET", "/environments/scoring/versions/1$")) > 1  # azure-core retried it, without waiting


def test_a_data_plane_route_on_no_allow_list_entry_is_a_500_naming_it(fake):
    from azure.core import PipelineClient
    from azure.core.rest import HttpRequest

    url = f"https://westeurope.api.azureml.ms/modelregistry/v1.0{WS_PATH}/models"
    response = PipelineClient(url, transport=fake).send_request(HttpRequest("POST", url, json={}))
    assert response.status_code == 500
    assert fake.take_no_schema() == [
        f"the fake has no schema for POST westeurope.api.azureml.ms/modelregistry/v1.0{WS_PATH}/models, which is on "
        "no data-plane allow-list: add a spec to tests/mlrunway/azure/spec, or an entry with its reason to "
        "DATA_PLANE in fake_azureml.py"]


def test_every_allow_list_entry_says_why():
    assert set(DATA_PLANE) == {"workspace discovery", "Run History", "MLflow tracking", "Blob Storage", "Retail Prices",
                               "scoring URI"}
    assert all(len(reason) > 80 for _, reason in DATA_PLANE.values())


def test_the_async_operation_urls_the_service_hands_out_need_no_schema(fake, ml_client):
    """A delete's Location is polled at the URL the fake gave (ARM's async contract, not a spec path)."""
    from azure.ai.ml.entities import ManagedOnlineEndpoint

    ml_client.online_endpoints.begin_create_or_update(ManagedOnlineEndpoint(name="digits", auth_mode="key")).result()
    ml_client.online_endpoints.begin_delete("digits").result()
    assert fake.sent("GET", f"{ARM}/subscriptions/[^/]+/providers/Microsoft.MachineLearningServices/locations/"
                            "westeurope/mfeOperationResults/")
    assert fake.no_schema == []
    assert ("DELETE", SPEC.route("DELETE", f"{WS_PATH}/onlineEndpoints/digits", "2022-02-01-preview"),
            "2022-02-01-preview") in fake.arm_routes


# -- an asset version's path never changes ------------------------------------------------------------------------
def asset_path_refused(refused: pytest.ExceptionInfo) -> bool:
    """The service's answer as the SDK hands it on. azure-ai-ml raises AssetPathException when ``str(error)`` is
    exactly its ASSET_PATH_ERROR; azure-core 1.41's HttpResponseError adds "Code: ... Message: ..." lines after it,
    so the service's own error reaches the caller, starting with that text."""
    from azure.ai.ml._artifacts._constants import ASSET_PATH_ERROR
    from azure.ai.ml.exceptions import AssetPathException

    error = refused.value
    return isinstance(error, AssetPathException) or (
        isinstance(error, HttpResponseError) and error.status_code == 400
        and str(error).startswith(ASSET_PATH_ERROR + "\n"))


def test_a_model_versions_path_cannot_change_and_the_sdk_names_the_services_answer(fake, ml_client):
    from azure.ai.ml.entities import Model

    first = ml_client.models.create_or_update(Model(name="digits", version="1", path=f"{STORE}/models/a/"))
    again = ml_client.models.create_or_update(Model(name="digits", version="1", path=f"{STORE}/models/a/",
                                                    description="the same path: an update the service takes"))
    assert first.path == again.path and again.description.startswith("the same path")
    with pytest.raises(Exception) as refused:
        ml_client.models.create_or_update(Model(name="digits", version="1", path=f"{STORE}/models/b/"))
    assert asset_path_refused(refused)
    store = (f"azureml://subscriptions/{SUBSCRIPTION}/resourcegroups/{RESOURCE_GROUP}/workspaces/{WORKSPACE}/"
             "datastores/workspaceblobstore/paths")  # the SDK sends a datastore path in full
    assert fake.refused[-1][2] == [f"properties.modelUri: digits version 1 is at '{store}/models/a/' and cannot move "
                                   f"to '{store}/models/b/': register a new version"]
    assert ml_client.models.create_or_update(Model(name="digits", version="2", path=f"{STORE}/models/b/")).version == "2"


def test_a_data_versions_path_cannot_change_either(fake, ml_client):
    from azure.ai.ml.entities import Data

    ml_client.data.create_or_update(Data(name="digits-inputs", version="1", type="uri_folder", path=f"{STORE}/d/a/"))
    with pytest.raises(Exception) as refused:
        ml_client.data.create_or_update(Data(name="digits-inputs", version="1", type="uri_folder",
                                             path=f"{STORE}/d/b/"))
    assert asset_path_refused(refused)
    assert fake.refused[-1][2][0].startswith("properties.dataUri: digits-inputs version 1 is at ")


def test_a_path_the_service_rewrote_may_be_sent_again_as_first_sent(fake, ml_client):
    """With ``rewrite_model_uris`` the stored URI is the artifact store's; the job URI it was created with is the
    same path, not a change."""
    from azure.ai.ml.entities import Model

    fake.rewrite_model_uris = True
    job_uri = "azureml://jobs/sweep-1_0/outputs/artifacts/paths/outputs/model/"
    ml_client.models.create_or_update(Model(name="digits", version="1", path=job_uri))
    assert "ExperimentRun/dcid.sweep-1_0" in fake.resource("models/versions", "digits", "1")["properties"]["modelUri"]
    ml_client.models.create_or_update(Model(name="digits", version="1", path=job_uri, description="again"))
    assert fake.refused == []


def test_an_api_version_no_spec_has_is_arms_400_not_a_transient_500(fake):
    """ARM answers an api-version it does not know with 400 InvalidApiVersionParameter, which no transient guard
    waits out (a 500 would be: 5xx is transient)."""
    from azure.core import PipelineClient
    from azure.core.rest import HttpRequest

    url = f"https://{ARM}{WS_PATH}/computes/gpu-cluster?api-version=2099-01-01"
    response = PipelineClient(url, transport=fake).send_request(HttpRequest("GET", url))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "InvalidApiVersionParameter"
    assert "The api-version '2099-01-01' is invalid" in response.json()["error"]["message"]
    assert len(fake.sent("GET", "/computes/gpu-cluster$")) == 1  # final: azure-core does not retry a 400
    assert fake.take_no_schema() == [f"the fake has no schema for GET {WS_PATH}/computes/gpu-cluster at api-version "
                                     "2099-01-01: add one to tests/mlrunway/azure/spec"]
