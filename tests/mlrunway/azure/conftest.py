"""The fake Azure ML service and an AzureBackend on the real MLClient that talks to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mlrunway.azure.fake_azureml import (
    RESOURCE_GROUP,
    SUBSCRIPTION,
    WORKSPACE,
    FakeAzureML,
    FakeCredential,
    route_blob_storage,
)

CONNECTION = {"subscription_id": SUBSCRIPTION, "resource_group": RESOURCE_GROUP, "workspace_name": WORKSPACE,
              "compute": "gpu-cluster", "instance_type": "Standard_F2s_v2", "instance_count": "2"}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeAzureML:
    service = FakeAzureML(tmp_path / "service")
    (tmp_path / "service").mkdir()
    route_blob_storage(service, monkeypatch)
    return service


@pytest.fixture
def azure(fake: FakeAzureML, tmp_path: Path):
    from mlrunway.azure.backend import AzureBackend

    backend = AzureBackend.from_connection({**CONNECTION, "cache_dir": str(tmp_path / "cache")},
                                           credential=FakeCredential(), transport=fake)
    backend.jobs.poll_s = backend.endpoints.poll_s = 0.0
    return backend
