"""The REST spec validator, on the bodies azure-ai-ml itself builds and on what the service would refuse.

Valid bodies come from the SDK the way its operations send them: the entity's ``_to_rest_*`` object, encoded by
the generated client's ``SdkJSONEncoder(exclude_readonly=True)``; each is checked against the api-version the
SDK sends it with (spec/README.md).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.mlrunway.azure.spec_validator import SpecValidator

WS = "/subscriptions/6a3c9f1e-0b7d-4e8a-9c2f-1d5e7b3a9c40/resourceGroups/rg-mlrunway/providers/" \
     "Microsoft.MachineLearningServices/workspaces/ws-mlrunway"
ENDPOINT = f"{WS}/onlineEndpoints/digits"
DEPLOYMENT = f"{ENDPOINT}/deployments/blue"
ENDPOINTS_API, DEPLOYMENTS_API = "2022-02-01-preview", "2023-04-01-preview"
SWEEP_API, COMMAND_API = "2024-01-01-preview", "2025-01-01-preview"


@pytest.fixture(scope="module")
def validator() -> SpecValidator:
    return SpecValidator()


def wire(rest_object: Any) -> dict[str, Any]:
    """The JSON the generated client puts on the wire for a REST model."""
    from azure.ai.ml._restclient.arm_ml_service._utils.model_base import SdkJSONEncoder

    return json.loads(json.dumps(rest_object, cls=SdkJSONEncoder, exclude_readonly=True))


def endpoint_body(**kwargs: Any) -> dict[str, Any]:
    from azure.ai.ml.entities import ManagedOnlineEndpoint

    endpoint = ManagedOnlineEndpoint(**{"name": "digits", "auth_mode": "key", **kwargs})
    return wire(endpoint._to_rest_online_endpoint(location="westeurope"))


def deployment_body(kind: str = "managed", **kwargs: Any) -> dict[str, Any]:
    from azure.ai.ml.entities import (
        CodeConfiguration,
        KubernetesOnlineDeployment,
        ManagedOnlineDeployment,
        OnlineRequestSettings,
        ProbeSettings,
        ResourceRequirementsSettings,
        ResourceSettings,
    )

    common = {"name": "blue", "endpoint_name": "digits", "model": f"{WS}/models/digits/versions/1",
              "environment": f"{WS}/environments/scoring/versions/1", "instance_count": 2,
              "code_configuration": CodeConfiguration(code=f"{WS}/codes/c0de/versions/1", scoring_script="score.py")}
    if kind == "kubernetes":
        resources = ResourceRequirementsSettings(requests=ResourceSettings(cpu="1", memory="1Gi"))
        deployment: Any = KubernetesOnlineDeployment(**common, resources=resources, **kwargs)
    else:
        deployment = ManagedOnlineDeployment(
            **common, instance_type="Standard_DS3_v2", environment_variables={"OMP_NUM_THREADS": "1"},
            request_settings=OnlineRequestSettings(request_timeout_ms=5000, max_concurrent_requests_per_instance=2),
            liveness_probe=ProbeSettings(initial_delay=10, period=5), egress_public_network_access="disabled",
            **kwargs)
    return wire(deployment._to_rest_object(location="westeurope"))


def command_job() -> Any:
    from azure.ai.ml import Input, Output, PyTorchDistribution, command

    return command(
        name="train-1", code=f"{WS}/codes/c0de/versions/1",
        command="python train.py --lr ${{inputs.lr}} --data ${{inputs.data}}",
        inputs={"lr": 0.1, "data": Input(type="uri_folder", path="azureml://datastores/workspaceblobstore/paths/d/")},
        outputs={"model": Output(type="uri_folder")}, environment=f"{WS}/environments/train/versions/1",
        compute=f"{WS}/computes/gpu-cluster", distribution=PyTorchDistribution(process_count_per_instance=2),
        instance_count=2, experiment_name="digits", display_name="train", tags={"mlrunway": "1"},
        environment_variables={"OMP_NUM_THREADS": "4"}, timeout=3600)


def job_body(kind: str) -> dict[str, Any]:
    """The body ``JobOperations.create_or_update`` sends once ARM ids are resolved: ``to_rest_job_object``."""
    from azure.ai.ml.entities._job.to_rest_functions import to_rest_job_object
    from azure.ai.ml.sweep import BanditPolicy, Choice, Uniform

    job = command_job()
    if kind == "sweep":
        job = job(lr=Uniform(min_value=0.01, max_value=0.1)).sweep(
            compute=f"{WS}/computes/gpu-cluster", sampling_algorithm="random", primary_metric="accuracy",
            goal="Maximize", early_termination_policy=BanditPolicy(slack_factor=0.1, evaluation_interval=1))
        job.search_space["batch"] = Choice(values=[16, 32])
        job.set_limits(max_total_trials=4, max_concurrent_trials=2, timeout=7200, trial_timeout=600)
        job.name = "sweep-1"
    return wire(to_rest_job_object(job))


# -- operations ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "version", "operation_id"),
    [
        pytest.param("PUT", ENDPOINT, ENDPOINTS_API, "OnlineEndpoints_CreateOrUpdate", id="endpoint-put"),
        pytest.param("put", ENDPOINT.replace("onlineEndpoints", "ONLINEENDPOINTS"), ENDPOINTS_API,
                     "OnlineEndpoints_CreateOrUpdate", id="literal-segments-ignore-case"),
        pytest.param("POST", f"{ENDPOINT}/listKeys", ENDPOINTS_API, "OnlineEndpoints_ListKeys", id="list-keys"),
        pytest.param("PUT", DEPLOYMENT, DEPLOYMENTS_API, "OnlineDeployments_CreateOrUpdate", id="deployment-put"),
        pytest.param("PUT", f"{WS}/jobs/sweep-1", SWEEP_API, "Jobs_CreateOrUpdate", id="job-put"),
        pytest.param("POST", f"{WS}/jobs/train-1/cancel?api-version={DEPLOYMENTS_API}", DEPLOYMENTS_API,
                     "Jobs_Cancel", id="query-ignored"),
    ],
)
def test_operation_is_found_by_the_actual_path(validator, method, path, version, operation_id):
    assert validator.operation(method, path, version)["operationId"] == operation_id


@pytest.mark.parametrize(
    ("method", "path", "version"),
    [
        pytest.param("PUT", f"{WS}/models/digits/versions/1", DEPLOYMENTS_API, id="path-not-kept"),
        pytest.param("PUT", f"{WS}/jobs/train-1", ENDPOINTS_API, id="path-not-in-this-version"),
        pytest.param("PUT", ENDPOINT, "2023-10-01", id="version-without-a-file"),
        pytest.param("POST", ENDPOINT, ENDPOINTS_API, id="method-not-in-spec"),
        pytest.param("PUT", f"{DEPLOYMENT}/extra", DEPLOYMENTS_API, id="one-segment-too-many"),
    ],
)
def test_operation_is_none_where_the_files_have_none(validator, method, path, version):
    assert validator.operation(method, path, version) is None
    assert validator.check_request(method, path, version, {"anything": 1}) == []


# -- what the SDK sends is valid -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "path", "version"),
    [
        pytest.param(lambda: endpoint_body(), ENDPOINT, ENDPOINTS_API, id="endpoint-key"),
        pytest.param(lambda: endpoint_body(auth_mode="aml_token", traffic={"blue": 90, "green": 10},
                                           mirror_traffic={"green": 10}, public_network_access="disabled",
                                           tags={"mlrunway": "1"}, description="digits"),
                     ENDPOINT, ENDPOINTS_API, id="endpoint-traffic-mirror-tags"),
        pytest.param(lambda: deployment_body(), DEPLOYMENT, DEPLOYMENTS_API, id="managed-deployment"),
        pytest.param(lambda: deployment_body("kubernetes"), DEPLOYMENT, DEPLOYMENTS_API, id="kubernetes-deployment"),
        pytest.param(lambda: job_body("command"), f"{WS}/jobs/train-1", COMMAND_API, id="command-job"),
        pytest.param(lambda: job_body("sweep"), f"{WS}/jobs/sweep-1", SWEEP_API, id="sweep-job"),
    ],
)
def test_sdk_bodies_are_valid_for_the_version_the_sdk_sends_them_with(validator, build, path, version):
    body = build()
    assert validator.check_request("PUT", path, version, body) == []
    assert validator.read_only_fields("PUT", path, version, body) == []


def test_sdk_sends_enums_in_other_cases_and_they_pass(validator):
    """Goal "maximize" and publicNetworkAccess "disabled" go out lower-cased; the service's enums ignore case."""
    sweep = job_body("sweep")
    endpoint = endpoint_body(public_network_access="disabled")
    assert sweep["properties"]["objective"]["goal"] == "maximize"
    assert endpoint["properties"]["publicNetworkAccess"] == "disabled"
    assert validator.check_request("PUT", f"{WS}/jobs/sweep-1", SWEEP_API, sweep) == []
    assert validator.check_request("PUT", ENDPOINT, ENDPOINTS_API, endpoint) == []


def test_a_field_the_version_lacks_is_refused(validator):
    """The SDK sends sweeps with 2024-01-01-preview: SweepJob.resources is not in 2023-04-01-preview."""
    body = job_body("sweep")
    assert validator.check_request("PUT", f"{WS}/jobs/sweep-1", DEPLOYMENTS_API, body) == [
        "properties.resources: unknown field, not in SweepJob"]


# -- what the service refuses --------------------------------------------------------------------------------------
def changed(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy with the dotted path set to value (removed when value is ``...``)."""
    body = copy.deepcopy(body)
    *parents, key = path.split(".")
    target = body
    for parent in parents:
        target = target.setdefault(parent, {})
    if value is ...:
        del target[key]
    else:
        target[key] = value
    return body


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        pytest.param("properties.authMode", "Token",
                     "properties.authMode: 'Token' is not one of AMLToken, Key, AADToken", id="auth-mode"),
        pytest.param("properties.authMode", ..., "properties: required field 'authMode' is missing",
                     id="auth-mode-missing"),
        pytest.param("properties.authMode", None, "properties.authMode: null is not allowed", id="auth-mode-null"),
        pytest.param("location", ..., "body: required field 'location' is missing", id="location-missing"),
        pytest.param("properties.traffic.blue", "x", "properties.traffic.blue: 'x' is not an integer",
                     id="traffic-string"),
        pytest.param("properties.traffic.blue", 2**31, "properties.traffic.blue: 2147483648 is out of range for int32",
                     id="traffic-int32"),
        pytest.param("properties.traffic.blue", True, "properties.traffic.blue: True is not an integer",
                     id="traffic-bool"),
        pytest.param("properties.mirrorTraffic", [10], "properties.mirrorTraffic: [10] is not an object",
                     id="mirror-traffic-list"),
        pytest.param("tags.team", 1, "tags.team: 1 is not a string", id="tag-not-string"),
        pytest.param("properties.replicas", 2, "properties.replicas: unknown field, not in OnlineEndpoint",
                     id="unknown-field"),
        pytest.param("identity.type", "Magic", "identity.type: 'Magic' is not one of None, SystemAssigned, "
                     "UserAssigned, SystemAssigned,UserAssigned", id="identity-type"),
    ],
)
def test_endpoint_problems_name_the_field(validator, field, value, problem):
    body = changed(endpoint_body(traffic={"blue": 100}), field, value)
    assert validator.check_request("PUT", ENDPOINT, ENDPOINTS_API, body) == [problem]


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        pytest.param("properties.endpointComputeType", ...,
                     "properties: required field 'endpointComputeType' is missing", id="compute-type-missing"),
        pytest.param("properties.endpointComputeType", "Serverless",
                     "properties.endpointComputeType: 'Serverless' is not one of Kubernetes, Managed",
                     id="compute-type-unknown"),
        pytest.param("properties.endpointComputeType", "AzureMLCompute",
                     "properties.endpointComputeType: 'AzureMLCompute' is not one of Kubernetes, Managed",
                     id="compute-type-in-enum-without-subtype"),
        pytest.param("properties.containerResourceRequirements", {},
                     "properties.containerResourceRequirements: unknown field, not in ManagedOnlineDeployment",
                     id="kubernetes-field-on-managed"),
        pytest.param("properties.livenessProbe.failureThreshold", "3",
                     "properties.livenessProbe.failureThreshold: '3' is not an integer", id="nested-type"),
        pytest.param("properties", ..., "body: required field 'properties' is missing", id="properties-missing"),
        pytest.param("sku.capacity", 1.5, "sku.capacity: 1.5 is not an integer", id="sku-capacity"),
    ],
)
def test_deployment_problems_name_the_field(validator, field, value, problem):
    body = changed(deployment_body(), field, value)
    assert validator.check_request("PUT", DEPLOYMENT, DEPLOYMENTS_API, body) == [problem]


def test_nullable_fields_take_null(validator):
    body = changed(changed(endpoint_body(), "properties.description", None), "properties.traffic", None)
    assert validator.check_request("PUT", ENDPOINT, ENDPOINTS_API, body) == []


def test_a_job_input_is_checked_as_its_discriminated_subtype(validator):
    body = changed(job_body("command"), "properties.inputs.lr.value", ...)
    assert validator.check_request("PUT", f"{WS}/jobs/train-1", COMMAND_API, body) == [
        "properties.inputs.lr: required field 'value' is missing"]


def test_a_job_type_the_file_trimmed_is_not_checked_but_an_unknown_one_is(validator):
    path = f"{WS}/jobs/automl-1"
    automl = {"properties": {"jobType": "AutoML", "taskDetails": {"taskType": "Classification"}}}
    assert validator.check_request("PUT", path, SWEEP_API, automl) == []
    bogus = {"properties": {"jobType": "Bogus"}}
    assert validator.check_request("PUT", path, SWEEP_API, bogus) == [
        "properties.jobType: 'Bogus' is not one of Command, Sweep"]


def test_path_parameter_patterns_are_checked(validator):
    body = deployment_body()
    bad = DEPLOYMENT.replace("deployments/blue", "deployments/-blue")
    assert validator.check_request("PUT", bad, DEPLOYMENTS_API, body) == [
        "path parameter deploymentName: '-blue' does not match the pattern ^[a-zA-Z0-9][a-zA-Z0-9\\-_]{0,254}$"]
    short = DEPLOYMENT.replace("workspaces/ws-mlrunway", "workspaces/ws")
    assert validator.check_request("PUT", short, DEPLOYMENTS_API, body) == [
        "path parameter workspaceName: 'ws' does not match the pattern ^[a-zA-Z0-9][a-zA-Z0-9_-]{2,32}$"]


def test_a_missing_required_body_is_a_problem(validator):
    assert validator.check_request("PUT", ENDPOINT, ENDPOINTS_API, None) == [
        "body: required body parameter 'body' is missing"]


# -- read-only and create-only ---------------------------------------------------------------------------------------
def test_read_only_fields_are_listed_apart_not_refused(validator):
    body = endpoint_body()
    body["properties"] |= {"provisioningState": "Succeeded", "scoringUri": "https://digits.westeurope.inference.ml"
                                                                           ".azure.com/score"}
    body |= {"id": ENDPOINT, "name": "digits"}
    assert validator.check_request("PUT", ENDPOINT, ENDPOINTS_API, body) == []
    assert sorted(validator.read_only_fields("PUT", ENDPOINT, ENDPOINTS_API, body)) == [
        "id", "name", "properties.provisioningState", "properties.scoringUri"]


def test_create_only_fields_include_the_instance_type_not_the_tags(validator):
    fields = validator.create_only_fields("PUT", DEPLOYMENT, DEPLOYMENTS_API, deployment_body())
    assert "properties.instanceType" in fields and "location" in fields
    assert not any(f.startswith("tags") or f.startswith("sku") for f in fields)
    assert validator.create_only_fields("PUT", ENDPOINT, ENDPOINTS_API, endpoint_body()) == ["location"]


# -- the asset, datastore, workspace and metrics routes (issue 58) ---------------------------------------------------
MODELS_API, ASSETS_API, CODES_API, DATASTORES_API, METRICS_API = (
    "2023-08-01-preview", "2023-04-01-preview", "2023-04-01", "2024-10-01-preview", "2024-02-01")
STORE = "azureml://datastores/workspaceblobstore/paths"


def asset_body(kind: str) -> dict[str, Any]:
    """The body each asset's operations PUT, from the entity's own ``_to_rest_object``."""
    from azure.ai.ml.entities import Data, Environment, Model
    from azure.ai.ml.entities._assets._artifacts.code import Code

    if kind == "model":
        asset: Any = Model(name="digits", version="1", path=f"{STORE}/models/a/", type="custom_model",
                           tags={"mlrunway": "1"}, properties={"run": "sweep-1"}, description="digits")
    elif kind == "data":
        asset = Data(name="inputs", version="1", type="uri_folder", path=f"{STORE}/d/", tags={"mlrunway": "1"})
    elif kind == "environment":
        asset = Environment(name="scoring", version="1", image="mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04",
                            conda_file={"dependencies": ["python=3.11"]})
    else:
        asset = Code(name="c0de", version="1", path=f"{STORE}/LocalUpload/c0de/")
        asset._hash_sha256 = "0" * 64  # set by the SDK when it hashes a local snapshot; it adds hash_version then
    return wire(asset._to_rest_object())


@pytest.mark.parametrize(
    ("method", "path", "version", "operation_id"),
    [
        pytest.param("PUT", f"{WS}/models/digits/versions/1", MODELS_API, "ModelVersions_CreateOrUpdate", id="model"),
        pytest.param("GET", f"{WS}/models", MODELS_API, "ModelContainers_List", id="model-containers"),
        pytest.param("GET", f"{WS}/computes/gpu-cluster", MODELS_API, "Compute_Get", id="compute"),
        pytest.param("PUT", f"{WS}/data/inputs/versions/1", ASSETS_API, "DataVersions_CreateOrUpdate", id="data"),
        pytest.param("PUT", f"{WS}/codes/c0de/versions/1", CODES_API, "CodeVersions_CreateOrUpdate", id="code"),
        pytest.param("GET", WS, DATASTORES_API, "Workspaces_Get", id="workspace"),
        pytest.param("POST", f"{WS}/datastores/workspaceblobstore/listSecrets", DATASTORES_API,
                     "Datastores_ListSecrets", id="list-secrets"),
        pytest.param("GET", f"{ENDPOINT}/providers/Microsoft.Insights/metrics", METRICS_API, "Metrics_List",
                     id="metrics-resource-uri-spans-segments"),
    ],
)
def test_the_new_routes_are_found(validator, method, path, version, operation_id):
    assert validator.operation(method, path, version)["operationId"] == operation_id


def test_route_is_the_template_or_none(validator):
    assert validator.route("GET", f"{ENDPOINT}/providers/Microsoft.Insights/metrics", METRICS_API) == \
        "/{resourceUri}/providers/Microsoft.Insights/metrics"
    assert validator.route("GET", f"{ENDPOINT}/providers/Microsoft.Insights/metrics", ENDPOINTS_API) is None
    assert validator.route("GET", "/providers/Microsoft.Insights/metrics", METRICS_API) is None  # no resource
    assert validator.route("GET", f"{WS}/environments/scoring/versions/1", ASSETS_API) is None  # only its PUT kept


@pytest.mark.parametrize(
    ("kind", "path", "version"),
    [
        pytest.param("model", f"{WS}/models/digits/versions/1", MODELS_API, id="model-version"),
        pytest.param("data", f"{WS}/data/inputs/versions/1", ASSETS_API, id="data-version"),
        pytest.param("environment", f"{WS}/environments/scoring/versions/1", ASSETS_API, id="environment-version"),
        pytest.param("code", f"{WS}/codes/c0de/versions/1", CODES_API, id="code-version"),
    ],
)
def test_sdk_asset_bodies_are_valid_for_the_version_the_sdk_sends_them_with(validator, kind, path, version):
    assert validator.check_request("PUT", path, version, asset_body(kind)) == []


def test_the_code_hash_version_the_sdk_sends_as_a_number_passes_and_nothing_else_of_its_kind(validator):
    path = f"{WS}/codes/c0de/versions/1"
    body = asset_body("code")
    assert body["properties"]["properties"]["hash_version"] == 202208
    assert validator.check_request("PUT", path, CODES_API, changed(body, "properties.properties.team", 1)) == [
        "properties.properties.team: 1 is not a string"]
    assert validator.check_request("PUT", path, CODES_API, changed(body, "properties.tags.team", 1)) == [
        "properties.tags.team: 1 is not a string"]


@pytest.mark.parametrize(
    ("kind", "path", "version", "field", "value", "problem"),
    [
        pytest.param("model", f"{WS}/models/digits/versions/1", MODELS_API, "properties.flavour", {},
                     "properties.flavour: unknown field, not in ModelVersion", id="model-unknown-field"),
        pytest.param("data", f"{WS}/data/inputs/versions/1", ASSETS_API, "properties.dataType", "uri_thing",
                     "properties.dataType: 'uri_thing' is not one of uri_folder, mltable, uri_file",
                     id="data-type"),
        pytest.param("data", f"{WS}/data/inputs/versions/1", ASSETS_API, "properties.dataUri", "/",
                     "properties.dataUri: '/' does not match the pattern [a-zA-Z0-9_]", id="data-uri-pattern"),
        pytest.param("environment", f"{WS}/environments/scoring/versions/1", ASSETS_API, "properties.osType",
                     "Solaris", "properties.osType: 'Solaris' is not one of Linux, Windows", id="environment-os"),
    ],
)
def test_asset_problems_name_the_field(validator, kind, path, version, field, value, problem):
    assert validator.check_request("PUT", path, version, changed(asset_body(kind), field, value)) == [problem]


def test_the_datastore_secrets_body_is_secret_expiry_and_optional(validator):
    path = f"{WS}/datastores/workspaceblobstore/listSecrets"
    assert validator.check_request("POST", path, DATASTORES_API, None) == []
    assert validator.check_request("POST", path, DATASTORES_API, {"expireAfterHours": 2}) == []
    assert validator.check_request("POST", path, DATASTORES_API, {"expiresAfter": "PT2H"}) == [
        "expiresAfter: unknown field, not in SecretExpiry"]
