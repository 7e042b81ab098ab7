from __future__ import annotations

import json

import pytest

from mlrunway.errors import NotSupportedOnBackend, SpecError


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


def test_azure_connection_says_it_is_not_in_this_version(monkeypatch):
    from mlrunway.airflow.hook import MlrunwayHook

    monkeypatch.setenv("AIRFLOW_CONN_AML", json.dumps({"conn_type": "azure_ml"}))
    with pytest.raises(NotSupportedOnBackend, match="Azure ML backend is not in this version"):
        MlrunwayHook("aml").get_backend()


def test_both_connection_types_are_registered_with_their_form_fields():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert {"mlrunway_local", "azure_ml"} <= set(manager.hooks)
    widgets = manager.connection_form_widgets
    assert "extra__mlrunway_local__workspace" in widgets
    assert {f"extra__azure_ml__{f}" for f in ("subscription_id", "resource_group", "workspace_name", "credential")} <= set(widgets)
