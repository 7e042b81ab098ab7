"""A stable endpoint's rollout on the Azure backend, through the real MLClient and azure-monitor-query against the
fake service: the challenger in the free slot, mirror traffic and traffic steps sent as the endpoint's own PUT
and read back, Azure Monitor's metrics queried per deployment, a rollback, the loser's deletion, the lease as an
endpoint tag and the aliases as model tags. Assertions are on the requests the SDKs sent and on what the service
holds."""

from __future__ import annotations

import json
import shutil

from mlrunway.backend.types import DeploymentSettings
from mlrunway.deploy import stable
from mlrunway.deploy.gate import GateSettings
from mlrunway.deploy.rollout import RolloutPolicy
from tests.conftest import REPO
from tests.mlrunway.azure.conftest import ENDPOINT, provisioned
from tests.mlrunway.azure.fake_azureml import WS_PATH
from tests.production.test_stable_endpoint_local import FAULTY

ONE_IMAGE = {"data": [[[[0.0] * 8] * 8]]}


def live_traffic(fake) -> dict:
    """What the service holds (zero weights left out: the SDK may send or drop them)."""
    properties = fake.resource("onlineEndpoints", ENDPOINT)["properties"]
    return {key: {k: v for k, v in (properties.get(field) or {}).items() if v}
            for key, field in (("traffic", "traffic"), ("mirror", "mirrorTraffic"))}


def test_mirror_then_steps_each_read_back_and_judged_on_azure_monitor_then_the_old_champion_is_deleted(
        fake, production, digits):
    azure = production
    assert live_traffic(fake)["traffic"] == {"blue": 100}
    assert json.loads(fake.resource("onlineEndpoints", ENDPOINT)["tags"]["mlrunway.lease"] if "mlrunway.lease" in
                      fake.resource("onlineEndpoints", ENDPOINT).get("tags", {}) else "null") is None  # released
    policy = RolloutPolicy(steps=(50, 100), window_s=0, mirror_percent=50, mirror_window_s=1, min_requests=4)
    r = stable.begin(azure, ENDPOINT, "run-2", DeploymentSettings(model="digits:2", code_dir=str(REPO / "training")),
                     policy, 3600)
    assert r.slot == "green" and r.champion == stable.Serving(deployment="blue", model="digits:1")
    lease = json.loads(fake.resource("onlineEndpoints", ENDPOINT)["tags"]["mlrunway.lease"])
    assert lease["holder"] == "run-2"  # the lease is the endpoint's own tag
    provisioned(azure, "green")
    evaluation = stable.evaluation_set(azure, r.model, REPO / "training", digits, None)
    assert stable.judge_challenger(azure, r, evaluation, GateSettings())

    phases = []
    while True:
        stable.next_phase(azure, r)
        phases.append(live_traffic(fake))
        for _ in range(8):  # live clients on the scoring URI
            azure.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
        assert stable.check_window(azure, r).ok
        if stable.done(r):
            break
    assert phases == [{"traffic": {"blue": 100}, "mirror": {"green": 50}},
                      {"traffic": {"blue": 50, "green": 50}, "mirror": {}},
                      {"traffic": {"green": 100}, "mirror": {}}]
    assert [w["challenger"]["requests"] for w in r.windows] == [4, 4, 8]  # mirrored, half, all
    queries = [r.query for r in fake.sent("GET", f"{WS_PATH}/onlineEndpoints/{ENDPOINT}/providers/Microsoft.Insights"
                                                   "/metrics$")]
    query = next(q for q in queries if "'green'" in q["$filter"])
    assert query["api-version"] == "2024-02-01" and query["interval"] == "PT1M"
    assert query["metricnames"] == "RequestsPerMinute" and query["aggregation"] == "Average"
    assert query["$filter"] == "deployment eq 'green' and statusCode eq '*' and modelStatusCode eq '*'"
    latency = [q for q in queries if q["metricnames"] == "RequestLatency_P99" and "'green'" in q["$filter"]]
    assert latency and latency[0]["aggregation"] == "Average" and latency[0]["$filter"] == "deployment eq 'green'"

    result = stable.conclude(azure, r, "promoted", "better, every window within bounds")
    assert result["live"] == {"deployment": "green", "model": "digits:2"}
    assert azure.models.get("digits", 2).tags["mlrunway.alias.production"]  # aliases are the versions' tags
    assert "mlrunway.alias.production" not in azure.models.get("digits", 1).tags
    assert azure.models.alias("digits", "previous").version == 1
    assert stable.clean_up(azure, ENDPOINT, "run-2") == ["blue"]
    assert fake.sent("DELETE", f"{WS_PATH}/onlineEndpoints/{ENDPOINT}/deployments/blue$")
    assert not fake.sent("DELETE", f"{WS_PATH}/onlineEndpoints/{ENDPOINT}$")  # never the endpoint
    assert "mlrunway.lease" not in fake.resource("onlineEndpoints", ENDPOINT)["tags"]


def test_a_challenger_failing_live_requests_is_rolled_back_from_azure_monitors_figures(fake, production, digits,
                                                                                        tmp_path):
    azure = production
    faulty = shutil.copytree(REPO / "training", tmp_path / "faulty")
    (faulty / "faulty_score.py").write_text(FAULTY)
    settings = DeploymentSettings(model="digits:2", code_dir=str(faulty), scoring_script="faulty_score.py")
    r = stable.begin(azure, ENDPOINT, "run-2", settings, RolloutPolicy(steps=(50, 100), window_s=0, min_requests=10),
                     3600)
    provisioned(azure, "green")
    evaluation = stable.evaluation_set(azure, r.model, faulty, digits, None)
    assert stable.judge_challenger(azure, r, evaluation, GateSettings())
    stable.next_phase(azure, r)
    failed = []
    for _ in range(24):
        try:
            azure.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
        except Exception as exc:  # noqa: BLE001 - the client sees the challenger's failures
            failed.append(str(exc))
    verdict = stable.check_window(azure, r)
    assert failed and all("424" in f for f in failed)
    assert not verdict.ok and f"({len(failed)} of {verdict.challenger['requests']})" in verdict.reason
    assert live_traffic(fake) == {"traffic": {"blue": 100}, "mirror": {}}  # rolled back, read back
    assert stable.clean_up(azure, ENDPOINT, "run-2") == ["green"]
    assert stable.serving(azure, ENDPOINT) == {"deployment": "blue", "model": "digits:1"}


def challenger_at_50(azure, digits, policy: RolloutPolicy):
    r = stable.begin(azure, ENDPOINT, "run-2", DeploymentSettings(model="digits:2", code_dir=str(REPO / "training")),
                     policy, 3600)
    provisioned(azure, "green")
    evaluation = stable.evaluation_set(azure, r.model, REPO / "training", digits, None)
    assert stable.judge_challenger(azure, r, evaluation, GateSettings())
    stable.next_phase(azure, r)
    return r


def test_metrics_azure_monitor_refuses_fail_the_window_and_the_champion_serves_again(fake, production, digits,
                                                                                      monkeypatch):
    """Issue 29, 3: a metrics read the service refuses (here: every aggregation refused) is tried again, then the
    window counts as failed: traffic goes back to the champion, never a pass."""
    import tests.mlrunway.azure.fake_azureml as service

    r = challenger_at_50(production, digits, RolloutPolicy(steps=(50, 100), window_s=0))
    assert live_traffic(fake)["traffic"] == {"blue": 50, "green": 50}
    for _ in range(40):
        production.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
    monkeypatch.setattr(stable, "METRICS_RETRY_S", 0.0)
    monkeypatch.setattr(service, "METRIC_AGGREGATIONS", {})
    after = stable.after_window(production, r)
    assert after.decision == "rolled_back" and "could not be read (3 tries" in after.reason
    assert "does not support requested aggregation" in after.reason
    assert live_traffic(fake)["traffic"] == {"blue": 100}


def test_a_quiet_challenger_is_extended_then_held_with_the_champion_at_100(fake, production, digits):
    """Issue 29, 3: fewer challenger requests than rollout.min_requests judge nothing: the window is extended
    up to max_extension_s, then the rollout ends held, traffic on the champion."""
    r = challenger_at_50(production, digits, RolloutPolicy(steps=(50, 100), window_s=0.05, max_extension_s=0.1))
    for _ in range(6):  # 3 to the challenger: short of the default 20
        production.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
    waits = []
    while (after := stable.after_window(production, r)).decision is None:
        waits.append(after.wait_s)
    assert waits == [0.05, 0.05]  # extended twice, up to max_extension_s
    assert after.decision == "held" and "fewer than rollout.min_requests=20" in after.reason
    assert live_traffic(fake)["traffic"] == {"blue": 100}
    assert r.windows[-1]["short"] and r.windows[-1]["extended_s"] == 0.1


def test_metrics_that_arrive_late_are_no_evidence_yet_and_the_rollout_holds(fake, production, digits):
    """Azure Monitor publishes a minute's figures minutes late: requests served but not yet counted judge nothing."""
    fake.metrics_lag_s = 3600
    r = challenger_at_50(production, digits, RolloutPolicy(steps=(50, 100), window_s=0, min_requests=5))
    for _ in range(40):
        production.endpoints.invoke(ENDPOINT, payload=ONE_IMAGE)
    after = stable.after_window(production, r)
    assert after.decision == "held" and "0 requests reached the challenger" in after.reason
    assert live_traffic(fake)["traffic"] == {"blue": 100}


def test_the_watch_looks_no_faster_than_azure_monitors_grain_and_reads_the_endpoints_id_once(fake, production,
                                                                                              digits):
    """Issue 57, 3: the watch looked every 0.25 s, each look an endpoint GET and Monitor queries (152 ARM reads in
    10 s); Azure Monitor's grain is a minute, and ARM throttles frequent metrics reads."""
    import time

    r = challenger_at_50(production, digits, RolloutPolicy(steps=(50, 100), window_s=600, watch_s=300))
    metrics = f"{WS_PATH}/onlineEndpoints/{ENDPOINT}/providers/Microsoft.Insights/metrics$"
    endpoint = f"{WS_PATH}/onlineEndpoints/{ENDPOINT}$"
    queries, reads = len(fake.sent("GET", metrics)), len(fake.sent("GET", endpoint))
    assert stable.watch_period(production) == 60.0
    assert stable.watch_window(production, r, time.time() + 2) is None  # a quiet challenger: nothing to condemn
    assert len(fake.sent("GET", metrics)) - queries == 2  # one look in 2 s: its requests and its latency
    assert len(fake.sent("GET", endpoint)) - reads <= 1  # the endpoint's id, at most once
    assert stable.watch_window(production, r, time.time() + 1) is None
    assert len(fake.sent("GET", endpoint)) - reads <= 1  # not read again for the next look
