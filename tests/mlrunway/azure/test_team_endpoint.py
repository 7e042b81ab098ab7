"""A team's own production endpoint on Azure ML, through the real MLClient against the validating fake: a rollout
reads, changes and writes it back, never rebuilds it (issue 29, 1); token auth scores (2); and the fake refuses
with the service's 400 what the REST spec and the docs refuse (10)."""

from __future__ import annotations

import time

import pytest
from azure.core.rest import HttpRequest

from mlrunway.backend.types import DeploymentSettings
from mlrunway.deploy import stable
from mlrunway.deploy.gate import GateSettings
from mlrunway.deploy.rollout import RolloutPolicy
from tests.conftest import REPO
from tests.mlrunway.azure.conftest import ENDPOINT, provisioned
from tests.mlrunway.azure.fake_azureml import ARM, WS_PATH
from tests.mlrunway.azure.test_stable_endpoint_azure import ONE_IMAGE, live_traffic

IDENTITY = ("/subscriptions/6a3c9f1e-0b7d-4e8a-9c2f-1d5e7b3a9c40/resourceGroups/rg-mlrunway/providers/"
            "Microsoft.ManagedIdentity/userAssignedIdentities/digits-scorer")


def made_by_the_team(fake, auth_mode: str) -> dict:
    """What the team set on its endpoint in the portal, beside what the first run made."""
    endpoint = fake.resource("onlineEndpoints", ENDPOINT)
    endpoint["identity"] = {"type": "UserAssigned", "userAssignedIdentities": {IDENTITY: {
        "principalId": "0b7d4e8a-0000-4e8a-9c2f-1d5e7b3a9c40", "clientId": "1c8e5f9b-0000-4e8a-9c2f-1d5e7b3a9c40"}}}
    endpoint["properties"].update(authMode=auth_mode, publicNetworkAccess="Disabled",
                                  description="digits for the mobile app; owner: team-vision")
    endpoint["tags"] = {**endpoint.get("tags", {}), "cost-center": "4711"}
    return endpoint


def endpoint_puts(fake) -> list[dict]:
    return [r.json() for r in fake.sent("PUT", f"{WS_PATH}/onlineEndpoints/{ENDPOINT}$")]


@pytest.mark.parametrize("auth_mode", ["AMLToken", "AADToken"])
def test_a_rollout_on_a_teams_endpoint_keeps_its_auth_identity_network_and_description_and_scores_with_its_auth(
        fake, production, digits, auth_mode):
    azure = production
    made_by_the_team(fake, auth_mode)
    before = len(endpoint_puts(fake))
    r = stable.begin(azure, ENDPOINT, "run-2", DeploymentSettings(model="digits:2", code_dir=str(REPO / "training")),
                     RolloutPolicy(steps=(50, 100), window_s=0, min_requests=4), 3600)
    provisioned(azure, "green")
    # the gate and every window's probes score through the endpoint's own auth: an AMLToken from the service's
    # token route, an AADToken from the credential, a key otherwise
    evaluation = stable.evaluation_set(azure, r.model, REPO / "training", digits, None)
    assert stable.judge_challenger(azure, r, evaluation, GateSettings())
    while True:
        stable.next_phase(azure, r)
        for _ in range(8):
            azure.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
        assert stable.check_window(azure, r).ok
        if stable.done(r):
            break
    stable.conclude(azure, r, "promoted", "better")
    stable.clean_up(azure, ENDPOINT, "run-2")

    puts = endpoint_puts(fake)[before:]
    assert len(puts) >= 4 and not fake.refused  # the lease, two traffic steps, the release: all accepted
    for body in puts:
        assert body["properties"]["authMode"] == auth_mode
        assert body["identity"]["type"] == "UserAssigned" and list(body["identity"]["userAssignedIdentities"]) == [IDENTITY]
        assert body["properties"]["publicNetworkAccess"] == "Disabled"
        assert body["properties"]["description"] == "digits for the mobile app; owner: team-vision"
        assert body["tags"]["cost-center"] == "4711"
    assert live_traffic(fake)["traffic"] == {"green": 100}
    token_calls = fake.sent("POST", f"{WS_PATH}/onlineEndpoints/{ENDPOINT}/token$")
    assert (len(token_calls) == 1) if auth_mode == "AMLToken" else not token_calls  # one token, reused


def test_an_expired_token_is_renewed_before_scoring_and_a_refused_one_once_after(fake, production):
    azure = production
    made_by_the_team(fake, "AMLToken")
    fake.token_lifetime_s = 2  # to be refreshed after 1 s
    azure.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
    azure.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
    assert len(fake.sent("POST", "/token$")) == 1
    time.sleep(1.1)  # past refreshAfterTimeUtc
    azure.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
    assert len(fake.sent("POST", "/token$")) == 2
    fake.tokens.clear()  # the service revoked every token: a 401, then one retry with a new token
    azure.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
    assert len(fake.sent("POST", "/token$")) == 3
    assert azure.endpoints.get_keys(ENDPOINT)["token"] in fake.tokens


def put_endpoint(azure, body: dict):
    url = f"https://{ARM}{WS_PATH}/onlineEndpoints/{ENDPOINT}?api-version=2022-02-01-preview"
    return azure.client.online_endpoints._online_operation._client.send_request(
        HttpRequest("PUT", url, json=body))


@pytest.mark.parametrize("change, problem", [
    (lambda b: b["properties"].update(authMode="Token"), "properties.authMode: 'Token' is not one of"),
    (lambda b: b.pop("location"), "required field 'location' is missing"),
    (lambda b: b["properties"].update(traffic={"blue": 60}), "properties.traffic: {'blue': 60} must sum to 100"),
    (lambda b: b["properties"].update(mirrorTraffic={"blue": 60}), "mirrorTraffic: {'blue': 60} must sum to at most 50"),
    (lambda b: b.update(identity={"type": "SystemAssigned"}), "identity: the UserAssigned identity of digits-prod "
                                                              "cannot be changed to SystemAssigned"),
])
def test_the_fake_refuses_what_the_service_refuses_with_its_400(fake, production, change, problem):
    made_by_the_team(fake, "Key")
    stored = fake.resource("onlineEndpoints", ENDPOINT)
    body = {k: v for k, v in stored.items() if k in ("location", "identity", "tags", "properties")}
    body = {**body, "properties": {k: v for k, v in body["properties"].items()
                                   if k not in ("provisioningState", "scoringUri", "swaggerUri")}}
    assert put_endpoint(production, body).status_code in (200, 201)  # as read: accepted
    change(body)
    answer = put_endpoint(production, body)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "UserError"
    assert problem in answer.json()["error"]["message"]


def test_a_rebuilt_endpoint_as_the_backend_sent_it_before_is_refused(fake, production):
    """What the old backend sent for an existing endpoint (a new ManagedOnlineEndpoint with key auth and a
    system-assigned identity) reaches the fake's identity rule, so a test of the old code fails."""
    from azure.ai.ml.entities import ManagedOnlineEndpoint

    made_by_the_team(fake, "AMLToken")
    with pytest.raises(Exception, match="cannot be changed to SystemAssigned"):
        production.client.online_endpoints.begin_create_or_update(
            ManagedOnlineEndpoint(name=ENDPOINT, auth_mode="key", description="mlrunway")).result()
