from __future__ import annotations

import json
import re

import pytest

from mlrunway.airflow.hook import MlrunwayHook
from mlrunway.backend.fake import FakeBackend
from mlrunway.errors import SpecError
from mlrunway.ledger.budget import Budget


def test_default_connection_is_the_local_backend_with_no_setup(tmp_path, monkeypatch):
    from mlrunway.airflow.hook import MlrunwayHook

    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    backend = MlrunwayHook().get_backend()
    assert backend.kind == "local" and backend.workspace.root == (tmp_path / "ws").resolve()


def test_local_connection_names_its_workspace(tmp_path, monkeypatch):
    from mlrunway.airflow.hook import MlrunwayHook

    conn = {"conn_type": "mlrunway_local", "extra": {"workspace": str(tmp_path / "team")}}
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_LOCAL", json.dumps(conn))
    assert MlrunwayHook("team_local").get_backend().workspace.root == (tmp_path / "team").resolve()


def test_unknown_connection_id_is_a_clear_error():
    from mlrunway.airflow.hook import MlrunwayHook

    with pytest.raises(SpecError, match="backend_conn_id: no Airflow connection 'nope'; create it"):
        MlrunwayHook("nope").get_backend()


def test_azure_connection_builds_the_azure_backend_from_its_fields(monkeypatch, tmp_path):
    from azure.identity import ClientSecretCredential

    from mlrunway.airflow.hook import MlrunwayHook

    extra = {"extra__azure_ml__subscription_id": "6a3c9f1e-0b7d-4e8a-9c2f-1d5e7b3a9c40",
             "extra__azure_ml__resource_group": "rg", "extra__azure_ml__workspace_name": "ws",
             "extra__azure_ml__credential": "client_secret", "extra__azure_ml__tenant_id": "t",
             "extra__azure_ml__client_id": "c", "extra__azure_ml__compute": "gpu-cluster",
             "extra__azure_ml__instance_count": "3", "extra__azure_ml__instance_type": "",
             "extra__azure_ml__reports_folder": str(tmp_path / "reports"), "cache_dir": str(tmp_path)}
    conn = {"conn_type": "azure_ml", "password": "s3cret-value", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_AML", json.dumps(conn))
    backend = MlrunwayHook("aml").get_backend()
    assert backend.kind == "azure" and isinstance(backend.credential, ClientSecretCredential)
    assert (backend.client.subscription_id, backend.client.resource_group_name, backend.client.workspace_name) == (
        "6a3c9f1e-0b7d-4e8a-9c2f-1d5e7b3a9c40", "rg", "ws")
    assert (backend.compute, backend.instance_count, backend.instance_type) == ("gpu-cluster", 3, "Standard_DS3_v2")
    assert backend.reports == tmp_path / "reports"  # the runs' reports: where the connection says, not a local workspace
    assert "s3cret-value" not in repr(vars(backend))


def test_azure_connection_without_a_workspace_names_the_field(monkeypatch):
    from mlrunway.airflow.hook import MlrunwayHook

    monkeypatch.setenv("AIRFLOW_CONN_AML", json.dumps({"conn_type": "azure_ml", "extra": {
        "subscription_id": "6a3c9f1e-0b7d-4e8a-9c2f-1d5e7b3a9c40", "resource_group": "rg"}}))
    with pytest.raises(SpecError, match="azure_ml connection.workspace_name: is missing"):
        MlrunwayHook("aml").get_backend()


def test_every_operator_has_the_links_and_each_backend_its_own(tmp_path):
    from mlrunway.airflow.links import ALL_LINKS, links_for
    from mlrunway.local.backend import LocalBackend
    from mlrunway.operators import (
        CleanupOperator,
        DeployBlueOperator,
        ExportOnnxOperator,
        MonitorEndpointOperator,
        PickBestModelOperator,
        SweepOperator,
        TrainModelOperator,
    )

    for op in (TrainModelOperator, SweepOperator, PickBestModelOperator, ExportOnnxOperator, DeployBlueOperator,
               CleanupOperator, MonitorEndpointOperator):
        assert op.operator_extra_links == ALL_LINKS
    assert [link.name for link in ALL_LINKS] == ["Azure ML studio", "MLflow run", "Sweep report", "Endpoint",
                                                 "Model card", "Monitoring report"]

    class Studio(FakeBackend):  # a backend with a UI of its own (the Studio protocol), as Azure ML's studio
        def link(self, kind, name, version=None):
            return f"https://ml.azure.com/{kind}/{name}/{version}"

    local = LocalBackend.at(tmp_path)
    assert links_for(local, "mlrunway_default", "model", "m", 1) == {}  # a local model has no page: the report shows it
    assert links_for(local, "mlrunway_default", "sweep", "d-0123abcd-sweep") == {
        "report_url": "/mlrunway/report/mlrunway_default/d-0123abcd-sweep",
        "mlflow_url": "/mlrunway/mlflow/mlrunway_default/d-0123abcd-sweep"}
    assert links_for(local, "mlrunway_default", "endpoint", "d-0123abcd") == {
        "endpoint_url": "/mlrunway/endpoint/mlrunway_default/d-0123abcd"}
    assert links_for(Studio(), "aml", "model", "m", 2) == {"studio_url": "https://ml.azure.com/model/m/2"}
    assert links_for(Studio(), "aml", "sweep", "s") == {"studio_url": "https://ml.azure.com/sweep/s/None",
                                                       "report_url": "/mlrunway/report/aml/s"}
    for backend, conn in ((local, "mlrunway_default"), (Studio(), "aml")):  # the plugin's page on both backends
        assert links_for(backend, conn, "model_card", "m-onnx", 3) == {
            "model_card_url": f"/mlrunway/report/{conn}/card/m-onnx/3"}


def test_both_connection_types_are_registered_with_their_form_fields():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert {"mlrunway_local", "azure_ml"} <= set(manager.hooks)
    widgets = manager.connection_form_widgets
    assert "extra__mlrunway_local__workspace" in widgets
    assert {f"extra__azure_ml__{f}" for f in ("subscription_id", "resource_group", "workspace_name", "credential")} <= set(widgets)


FORM = {"extra__azure_ml__subscription_id": "6a3c9f1e-0b7d-4e8a-9c2f-1d5e7b3a9c40",
        "extra__azure_ml__resource_group": "rg", "extra__azure_ml__workspace_name": "ws"}


@pytest.mark.parametrize(("kind", "fields", "cls", "keyword"), [
    ("client_secret", {"tenant_id": "t"}, "ClientSecretCredential", "client_id"),
    ("certificate", {"tenant_id": "t", "certificate_path": "/certs/sp.pem"}, "CertificateCredential", "client_id"),
    ("managed_identity", {}, "ManagedIdentityCredential", "client_id"),
    ("workload_identity", {"tenant_id": "t", "token_file_path": "/var/run/token"}, "WorkloadIdentityCredential",
     "client_id"),
    ("default", {}, "DefaultAzureCredential", "managed_identity_client_id"),
])
def test_each_credential_kind_filled_through_the_form_signs_in_as_its_client_id(monkeypatch, tmp_path, kind, fields,
                                                                                cls, keyword):
    """The form's one "Client ID" field is the connection's login; before, it was never read: a client_secret
    connection was refused and a managed identity signed in as the system-assigned one."""
    import azure.identity

    from mlrunway.airflow.hook import MlrunwayHook

    made: dict = {}

    class Recorded:  # the credential as azure-identity was asked for it; no token is requested here either
        def __init__(self, **kwargs) -> None:
            made.update(kwargs, cls=cls)

    monkeypatch.setattr(azure.identity, cls, Recorded)
    extra = {**FORM, "extra__azure_ml__credential": kind, "cache_dir": str(tmp_path),
             **{f"extra__azure_ml__{k}": v for k, v in fields.items()}}
    monkeypatch.setenv("AIRFLOW_CONN_AML", json.dumps({"conn_type": "azure_ml", "login": "5d7e8a0c-sp",
                                                        "password": "pw", "extra": extra}))
    backend = MlrunwayHook("aml").get_backend()
    assert isinstance(backend.credential, Recorded) and made["cls"] == cls and made[keyword] == "5d7e8a0c-sp"


def test_a_client_id_given_twice_with_two_values_is_refused_naming_both(monkeypatch, tmp_path):
    from mlrunway.airflow.hook import MlrunwayHook, connection_fields

    assert connection_fields("azure_ml", {"client_id": "same"}, "same")["client_id"] == "same"
    assert connection_fields("mlrunway_local", {}, "someone") == {}  # a type whose form hides the login
    monkeypatch.setenv("AIRFLOW_CONN_AML", json.dumps({"conn_type": "azure_ml", "login": "from-the-form", "extra": {
        **FORM, "extra__azure_ml__credential": "managed_identity", "client_id": "from-json"}}))
    with pytest.raises(SpecError, match=r"azure_ml connection.login: 'from-the-form' \(the form's Client ID\) and the "
                                        r"extra field client_id 'from-json' differ"):
        MlrunwayHook("aml").get_backend()


def test_the_azure_form_has_one_client_id_field_the_login():
    from mlrunway.airflow.provider import get_provider_info

    (azure,) = [c for c in get_provider_info()["connection-types"] if c["connection-type"] == "azure_ml"]
    assert "client_id" not in azure["conn-fields"] and "login" not in azure["ui-field-behaviour"]["hidden-fields"]
    assert azure["ui-field-behaviour"]["relabeling"]["login"] == "Client ID"


@pytest.mark.parametrize(("conn_type", "field"), [("mlrunway_local", "budget"),
                                                  ("azure_ml", "azure_ml connection.budget")], ids=["local", "azure"])
def test_the_connections_budget_is_the_hooks_and_a_bad_one_is_refused_naming_it(monkeypatch, conn_type, field):
    monkeypatch.setenv("AIRFLOW_CONN_BUDGETED", json.dumps({"conn_type": conn_type,
                                                            "extra": {"budget": '{"max_cost": 3}'}}))
    assert MlrunwayHook("budgeted").get_budget() == Budget(max_cost=3.0)
    monkeypatch.setenv("AIRFLOW_CONN_BUDGETED", json.dumps({"conn_type": conn_type,
                                                            "extra": {"budget": '{"max_cost": 0}'}}))
    with pytest.raises(SpecError, match=rf"^backend_conn_id 'budgeted': {re.escape(field)}\.max_cost: 0 is not an "
                                        "amount above 0"):
        MlrunwayHook("budgeted").get_budget()


def test_the_default_connection_missing_has_no_budget():
    assert MlrunwayHook().get_budget() is None
