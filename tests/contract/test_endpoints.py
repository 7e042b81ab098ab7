"""Online endpoints and their deployments, as the contract (:class:`mlrunway.backend.protocol.Endpoints`) says every
backend serves them. An endpoint is costly to set up (a server process locally), so each backend's tests share one,
``ctr-ep``, with ``blue`` live at 100%; a test that changes it puts it back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from mlrunway.backend.protocol import Backend, MeteredEndpoints, Rollout, Shadow
from mlrunway.backend.types import DeploymentSettings, ProvisioningState
from mlrunway.errors import NotFound, SpecError
from tests.contract.conftest import Driver, require

ENDPOINT = "ctr-ep"


def deploy(backend: Backend, driver: Driver, name: str, weights: str) -> None:
    """Register a model of ``weights`` and deploy it as ``name`` of the shared endpoint, waiting until it serves."""
    model = backend.models.register(f"ctr-{name}", driver.model_folder(name, text=weights))
    settings = DeploymentSettings(model=f"{model.name}:{model.version}", code_dir=str(driver.score_code()),
                                  instance_count=1)
    info = backend.endpoints.create_or_update_deployment(ENDPOINT, name, settings, timeout_s=120)
    assert info.provisioning_state is ProvisioningState.SUCCEEDED


def live(weights: dict[str, int]) -> dict[str, int]:
    """The weights that send requests (a 0 is no traffic, kept by some backends and dropped by others)."""
    return {name: weight for name, weight in weights.items() if weight}


@pytest.fixture(scope="module")
def served(module_backend: tuple[Backend, Driver]) -> Iterator[Backend]:
    """The module's backend with ``ctr-ep`` made (and waited on until provisioned) and ``blue`` live at 100%."""
    backend, driver = module_backend
    if backend.capabilities.endpoints is not None:  # a backend built in parts: a declared skip naming the part
        pytest.skip(f"{backend.kind}: {backend.capabilities.endpoints}")
    backend.endpoints.create_or_update(ENDPOINT)
    try:
        deploy(backend, driver, "blue", "blue weights")
        backend.endpoints.set_traffic(ENDPOINT, {"blue": 100})
        yield backend
    finally:
        backend.endpoints.delete(ENDPOINT)


def test_a_created_endpoint_is_provisioned_and_found_first_among_names(served: Backend) -> None:
    info = served.endpoints.get(ENDPOINT)
    assert (info.name, info.provisioning_state, info.traffic) == (ENDPOINT, ProvisioningState.SUCCEEDED, {"blue": 100})
    assert info.scoring_uri
    found = served.endpoints.first_existing("ctr-missing", ENDPOINT)
    assert found is not None and found.name == ENDPOINT
    assert served.endpoints.first_existing("ctr-missing", "ctr-missing-too") is None
    with pytest.raises(NotFound, match="ctr-missing"):
        served.endpoints.get("ctr-missing")


def test_keys_are_a_primary_and_a_secondary_key_or_a_token(served: Backend) -> None:
    keys = served.endpoints.get_keys(ENDPOINT)
    assert (keys.get("primary") and keys.get("secondary") and keys["primary"] != keys["secondary"]) or keys["token"]


def test_invoke_answers_with_the_live_deployments_score_py_and_its_logs_are_text(served: Backend) -> None:
    answer = json.loads(served.endpoints.invoke(ENDPOINT, payload={"data": [1, 2]}))
    assert answer == {"weights": "blue weights", "echo": {"data": [1, 2]}}
    assert [d.name for d in served.endpoints.list_deployments(ENDPOINT)] == ["blue"]
    assert served.endpoints.get_deployment(ENDPOINT, "blue").model.startswith("ctr-blue:")
    assert isinstance(served.endpoints.get_logs(ENDPOINT, "blue", lines=10), str)


def test_traffic_and_mirror_traffic_are_set_and_a_deployment_is_invoked_by_name(
        served: Backend, module_backend: tuple[Backend, Driver]) -> None:
    deploy(served, module_backend[1], "green", "green weights")
    try:
        info = served.endpoints.set_traffic(ENDPOINT, {"blue": 100, "green": 0}, mirror_traffic={"green": 20})
        # A weight of 0 is no traffic: Azure ML's endpoint reads back without it, the others keep it.
        assert (live(info.traffic), info.mirror_traffic) == ({"blue": 100}, {"green": 20})
        assert served.endpoints.get(ENDPOINT).mirror_traffic == {"green": 20}
        answer = json.loads(served.endpoints.invoke(ENDPOINT, payload={"data": 3}, deployment="green"))
        assert answer["weights"] == "green weights"
        with pytest.raises(SpecError, match="traffic"):
            served.endpoints.set_traffic(ENDPOINT, {"blue": 60, "green": 10})
        info = served.endpoints.set_traffic(ENDPOINT, {"blue": 100, "green": 0}, mirror_traffic={})
        assert live(info.mirror_traffic) == {}
    finally:
        served.endpoints.set_traffic(ENDPOINT, {"blue": 100}, mirror_traffic={})
        served.endpoints.delete_deployment(ENDPOINT, "green")
    assert [d.name for d in served.endpoints.list_deployments(ENDPOINT)] == ["blue"]
    with pytest.raises(NotFound, match="green"):
        served.endpoints.get_deployment(ENDPOINT, "green")


def test_a_deleted_endpoint_is_gone_and_a_second_delete_says_so(served: Backend) -> None:
    served.endpoints.create_or_update("ctr-gone")
    assert served.endpoints.delete("ctr-gone") is True
    with pytest.raises(NotFound, match="ctr-gone"):
        served.endpoints.get("ctr-gone")
    assert served.endpoints.delete("ctr-gone") is False


def test_rollout_reports_a_deployments_window_and_lets_one_holder_lease_the_endpoint(served: Backend) -> None:
    rollout = require(served, Rollout)
    now = time.time()
    metrics = rollout.deployment_metrics(ENDPOINT, "blue", now - 60, now)
    assert metrics.deployment == "blue" and metrics.requests >= 0 and metrics.errors >= 0
    assert rollout.lease(ENDPOINT, "ctr-run-1", 60) is None
    holder = rollout.lease(ENDPOINT, "ctr-run-2", 60)  # who holds it, first (local and Azure add until when)
    assert holder is not None and holder.split(" ")[0] == "ctr-run-1"
    assert rollout.lease(ENDPOINT, "ctr-run-1", 60) is None  # renewed by its holder
    rollout.release(ENDPOINT, "ctr-run-1")
    assert rollout.lease(ENDPOINT, "ctr-run-2", 60) is None
    rollout.release(ENDPOINT, "ctr-run-2")


def test_shadow_keeps_no_answers_for_a_deployment_never_mirrored(served: Backend) -> None:
    assert require(served, Shadow).mirrored_answers(ENDPOINT, "blue", 0.0, time.time() + 1) == []


def test_metered_endpoints_say_each_deployment_serves_since_its_creation(served: Backend) -> None:
    usage = require(served, MeteredEndpoints).serving_usage(ENDPOINT)
    assert set(usage) == {"blue"} and usage["blue"].ended is None
    assert usage["blue"].started is not None and usage["blue"].started <= time.time()
