"""The fake Azure ML service and an AzureBackend on the real MLClient that talks to it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mlrunway.backend.types import DeploymentSettings
from mlrunway.deploy import stable
from mlrunway.deploy.blue import promote_blue
from mlrunway.deploy.rollout import RolloutPolicy
from tests.conftest import REPO
from tests.mlrunway.azure import fake_azureml
from tests.mlrunway.azure.fake_azureml import (
    RESOURCE_GROUP,
    SUBSCRIPTION,
    WORKSPACE,
    FakeAzureML,
    FakeCredential,
    route_blob_storage,
)
from tests.production.test_stable_endpoint_local import perturbed

ENDPOINT = "digits-prod"
CONNECTION = {"subscription_id": SUBSCRIPTION, "resource_group": RESOURCE_GROUP, "workspace_name": WORKSPACE,
              "compute": "gpu-cluster", "instance_type": "Standard_F2s_v2", "instance_count": "2"}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The service. A test whose requests reached a route the fake holds to no contract errors at teardown,
    naming each: a backend that retries or swallows the fake's named 500 would otherwise hide it. A test that
    provokes one on purpose takes it with ``fake.take_no_schema()``."""
    service = FakeAzureML(tmp_path / "service")
    (tmp_path / "service").mkdir()
    route_blob_storage(service, monkeypatch)
    yield service
    assert not service.no_schema, "\n".join(service.no_schema)


@pytest.fixture(scope="session", autouse=True)
def arm_routes_have_schemas():
    """The session's Azure tests, taken together: no request was left refused for want of a schema or an
    allow-list entry (``fake_azureml.NO_SCHEMA``); every ARM request answered fitted a spec operation of its
    api-version, counted in ``SEEN_ARM_ROUTES``, which ``pytest_terminal_summary`` lists with ``-v``."""
    yield
    assert not fake_azureml.NO_SCHEMA, "requests without a schema:\n" + "\n".join(fake_azureml.NO_SCHEMA)


def pytest_terminal_summary(terminalreporter, config) -> None:
    """With ``-v``: every ARM route the Azure fake served this session, its api-version and how many requests."""
    seen = fake_azureml.SEEN_ARM_ROUTES
    if not seen or config.get_verbosity() < 1:
        return
    terminalreporter.write_sep("-", f"ARM routes the Azure fake served, each with a schema: {len(seen)}")
    for (method, template, version), count in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        terminalreporter.write_line(f"{method:6} {version:18} {count:5}  .../{template.rsplit('/providers/', 1)[1]}")


@pytest.fixture
def azure(fake: FakeAzureML, tmp_path: Path):
    from mlrunway.azure.backend import AzureBackend

    # polling_interval: the SDK's pollers wait 30 s between reads of a resource whose update (a PUT answered 200,
    # which carries no operation header) is still Updating; the fake's updates finish within a read or two.
    backend = AzureBackend.from_connection({**CONNECTION, "cache_dir": str(tmp_path / "cache")},
                                           credential=FakeCredential(), transport=fake, polling_interval=0)
    backend.jobs.poll_s = backend.endpoints.provision_poll_s = 0.0
    return backend


@pytest.fixture
def production(fake, azure, onnx_model, digits, tmp_path):
    """Azure with models digits:1 (fair) and digits:2 (better), digits:1 live as blue at 100%."""
    azure.capabilities = dataclasses.replace(azure.capabilities, metrics_lag_s=0.0)  # the fake's metrics are current
    for noise in (0.6, 0.0):
        azure.models.register("digits", str(perturbed(onnx_model, tmp_path / f"noise-{noise}", noise)))
    first = stable.begin(azure, ENDPOINT, "run-1", DeploymentSettings(model="digits:1", code_dir=str(REPO / "training")),
                         RolloutPolicy(), 3600)
    provisioned(azure, "blue")
    promote_blue(azure, ENDPOINT, "digits", 1, digits)
    stable.conclude(azure, first, "created", "the endpoint's first model")
    stable.clean_up(azure, ENDPOINT, "run-1")
    return azure


def provisioned(azure, slot: str) -> None:
    for _ in range(50):
        if azure.endpoints.get_deployment(ENDPOINT, slot).provisioning_state.is_terminal():
            return
    raise AssertionError(f"{slot} never provisioned")
