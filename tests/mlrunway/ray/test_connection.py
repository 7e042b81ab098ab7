"""The mlrunway_ray connection: its fields checked before anything is reached, each refusal naming the field and the
fix; the security rule for a cluster on another machine; the form's fields held to the declaration."""

from __future__ import annotations

import pytest

from mlrunway.backend.registry import connect
from mlrunway.errors import SpecError
from mlrunway.ray.connection import RayConnection, is_loopback

BASE = {"address": "http://127.0.0.1:8265", "storage": "/mnt/shared", "tracking_uri": "http://127.0.0.1:5000"}


def test_a_connection_as_airflow_gives_it_is_parsed_with_its_json_fields() -> None:
    conn = RayConnection.parse({**BASE, "namespace": "team-a", "profiles": '{"gpu1": {"num_cpus": 4, "num_gpus": 1}}',
                                "default_profile": "gpu1", "rates": '{"per_hour": {"gpu1": 2.5}}',
                                "budget": '{"max_cost": 5}'}, "secret")
    assert (conn.namespace, conn.token, conn.profiles["gpu1"].num_gpus) == ("team-a", "secret", 1.0)
    assert conn.profile(None)[0] == "gpu1" and conn.rates.per_hour == {"gpu1": 2.5}
    assert conn.profiles["gpu1"].entrypoint() == {"entrypoint_num_cpus": 4.0, "entrypoint_num_gpus": 1.0}


@pytest.mark.parametrize(("fields", "named"), [
    ({"address": "127.0.0.1:8265"}, "address"),
    ({"storage": "relative/path"}, "storage"),
    ({"tracking_uri": "file:///tmp/mlruns"}, "tracking_uri"),
    ({"namespace": "Team A"}, "namespace"),
    ({"profiles": {"cpu": {"num_cpus": -1}}}, "profiles"),
    ({"profiles": {"cpu": {"num_gpus": True}}}, "profiles"),
    ({"default_profile": "gpu9"}, "default_profile"),
    ({"rates": {"local_rate": 0.04}}, "rates.local_rate"),
    ({"rates": {"per_hour": {"gpu9": 1}}}, "rates.per_hour"),
    ({"profiles": "{not json"}, "profiles"),
    ({"accept_unauthenticated_cluster": "maybe"}, "accept_unauthenticated_cluster"),
], ids=["address", "storage", "tracking", "namespace", "cpus", "flag", "default", "local-rate", "rate-key", "json",
        "accept"])
def test_a_bad_field_is_refused_naming_it(fields: dict[str, object], named: str) -> None:
    with pytest.raises(SpecError, match=rf"mlrunway_ray connection\.{named}"):
        RayConnection.parse({**BASE, **fields})


def test_a_cluster_on_another_machine_without_a_token_is_refused_unless_accepted() -> None:
    remote = {**BASE, "address": "http://10.0.0.5:8265"}
    with pytest.raises(SpecError, match=r"connection\.address: .*no token.*RAY_AUTH_MODE=token"):
        RayConnection.parse(remote)
    assert RayConnection.parse(remote, "token").token == "token"
    assert RayConnection.parse({**remote, "accept_unauthenticated_cluster": "true"}).token is None
    assert RayConnection.parse(BASE).token is None  # loopback: this machine only


@pytest.mark.parametrize(("address", "loopback"), [("http://127.0.0.1:8265", True), ("http://localhost:1", True),
                                                   ("http://[::1]:8265", True), ("http://127.9.9.9:1", True),
                                                   ("http://10.0.0.5:8265", False), ("http://ray-head:8265", False)])
def test_loopback_is_this_machine_only(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_a_jobs_unknown_compute_or_environment_is_refused_naming_the_connections() -> None:
    conn = RayConnection.parse({**BASE, "profiles": {"cpu": {}, "gpu1": {"num_gpus": 1}},
                                "environments": {"torch": {"pip": ["torch==2.13.0"]}}})
    with pytest.raises(SpecError, match=r"command_job\.compute: 'gpu-cluster' .*cpu, gpu1"):
        conn.profile("gpu-cluster")
    with pytest.raises(SpecError, match=r"command_job\.environment: 'AzureML-x' .*torch"):
        conn.environment("AzureML-x")
    assert conn.environment("torch").runtime_env() == {"pip": ["torch==2.13.0"]}  # type: ignore[union-attr]


def test_the_fields_a_controller_reads_back_hold_no_token_and_parse_to_the_same_connection() -> None:
    conn = RayConnection.parse({**BASE, "rates": {"per_hour": {"cpu": 0.5}}}, "secret")
    fields = conn.fields()
    assert "token" not in fields and "secret" not in str(fields)
    assert RayConnection.parse(fields, "secret") == conn


def test_the_registry_connects_an_mlrunway_ray_connection_without_reaching_the_cluster() -> None:
    backend = connect("mlrunway_ray", dict(BASE), "secret")
    assert backend.kind == "ray" and backend.capabilities.endpoints is None  # it has endpoints (issue 81)


def test_the_forms_fields_are_the_connections() -> None:
    from dataclasses import fields

    from mlrunway.airflow.provider import RAY_FIELDS, get_provider_info

    declared = {f.name for f in fields(RayConnection)} - {"token"}  # the token is the password
    assert set(RAY_FIELDS) == declared
    form = next(t for t in get_provider_info()["connection-types"] if t["connection-type"] == "mlrunway_ray")
    assert set(form["conn-fields"]) == declared | {"budget"}
