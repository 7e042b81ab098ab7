"""A run's endpoint name is free in its Azure region (issue 57, 2): online endpoint names are unique per region,
across workspaces, and scheduled run ids are the same in every installation, so on Azure the endpoint's name
derives from the workspace too; the service's refusal of a taken name is named, with the setting that changes it."""

from __future__ import annotations

import pytest

from mlrunway.backend.naming import RunNames, endpoint_salt
from mlrunway.errors import SpecError
from tests.mlrunway.azure.conftest import CONNECTION
from tests.mlrunway.azure.fake_azureml import WS_PATH, FakeCredential

SCHEDULED = ("train_sweep_deploy", "scheduled__2026-11-29T00:00:00+00:00")


def backend_of(workspace: str, tmp_path):
    from mlrunway.azure.backend import AzureBackend

    return AzureBackend.from_connection({**CONNECTION, "workspace_name": workspace, "cache_dir": str(tmp_path)},
                                        credential=FakeCredential())


def test_two_workspaces_in_one_region_get_different_endpoint_names_for_the_same_scheduled_run(tmp_path):
    from mlrunway.local.backend import LocalBackend

    first, second = (RunNames.of(*SCHEDULED, "digits", endpoint_salt(backend_of(ws, tmp_path))) for ws in ("a", "b"))
    assert first.endpoint != second.endpoint  # both valid endpoint names (RunNames.of checks), of the same length
    assert len(first.endpoint) == len(second.endpoint) == len("digits-") + 8
    assert (first.train_job, first.sweep, first.model) == (second.train_job, second.sweep, second.model)
    assert endpoint_salt(backend_of("a", tmp_path)) == WS_PATH.replace("ws-mlrunway", "a").lower()
    local = RunNames.of(*SCHEDULED, "digits", endpoint_salt(LocalBackend.at(tmp_path / "ws")))
    assert local.endpoint == local.unsalted_endpoint == "digits-9cce90bf"  # the local backend's names as before
    assert first.endpoints == (first.endpoint, "digits-9cce90bf")  # the pre-upgrade name, tried after its own


def test_a_name_another_workspace_holds_in_the_region_is_refused_naming_the_setting(fake, azure):
    fake.region_endpoints["digits-0a1b2c3d"] = WS_PATH.replace("ws-mlrunway", "someone-elses")
    with pytest.raises(SpecError, match=r"endpoint_prefix: endpoint name 'digits-0a1b2c3d' is taken in this Azure "
                                        r"region by another workspace's endpoint .*; set endpoint_prefix"):
        azure.endpoints.begin_create_or_update("digits-0a1b2c3d")
    assert azure.endpoints.begin_create_or_update("digits-4e5f6a7b").name == "digits-4e5f6a7b"  # a free one
    assert fake.region_endpoints["digits-4e5f6a7b"] == WS_PATH
