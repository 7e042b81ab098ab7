"""A stable endpoint through the real DeployBlue and Cleanup operators on the shipped fake: created, promoted
after a staged rollout, held, rolled back, skipped (a backfill), the lease, and the asset events. The fake's
scorer answers as the model each deployment serves would; its metrics say what each deployment served."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mlrunway.airflow.triggers import WindowTrigger
from mlrunway.backend.fake import FakeBackend
from mlrunway.backend.naming import RunNames
from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import DeploymentMetrics, DeploymentSettings, Usage
from mlrunway.deploy import stable
from mlrunway.errors import EndpointError
from mlrunway.ledger.reports import CARDS
from mlrunway.operators import CleanupOperator, DeployBlueOperator
from mlrunway.specs import CommandJobSpec
from tests.mlrunway.airflow.test_triggers import first_event
from tests.operators.test_operators_on_fake import TaskInstance

ENDPOINT = "digits-prod"


class Events:
    """What the task adds to its alias outlet: ``outlet_events[alias].add(asset, extra=...)``."""

    def __init__(self) -> None:
        self.added: list[tuple[str, dict[str, Any]]] = []

    def add(self, asset: Any, extra: dict[str, Any]) -> None:
        self.added.append((asset.uri, extra))


@pytest.fixture
def team(tmp_path) -> Path:
    """A regressor's code folder: labelled requests and an RMSE metric, as a team writes them."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "score.py").write_text("def init(): pass\ndef run(raw): return {}\n")
    (code / "sample.json").write_text(json.dumps({"x": 1}))
    (code / "expected.json").write_text(json.dumps({"y": 3.0}))  # what version 1, which creates the endpoint, answers
    (code / "eval.jsonl").write_text("\n".join(json.dumps({"request": {"x": x}, "expected": 2 * x}) for x in range(20)))
    (code / "metrics.py").write_text(
        "def rmse(answers, expected):\n"
        "    return (sum((a['y'] - e) ** 2 for a, e in zip(answers, expected)) / len(expected)) ** 0.5\n")
    return code


ERROR = {1: 0.0, 2: 0.5, 3: 3.0, 4: 0.1}  # each model version's error on y = 2x: 2 beats 1, 3 is worse, 4 best


def scorer(backend: Any):
    def answer(payload: Any, deployment: str | None) -> str:
        record = backend.endpoints.endpoints[ENDPOINT]
        version = int(record.settings[deployment].model.partition(":")[2])
        return json.dumps({"y": 2 * payload["x"] + ERROR[version] + (1.0 if version == 1 else 0.0)})
    return answer


def run(fake, team, version: int, run_id: str, *, run_type: str = "manual", **kwargs: Any) -> tuple[dict, Events, TaskInstance]:
    events, ti = Events(), TaskInstance()
    context = {"dag": SimpleNamespace(dag_id="prod"), "run_id": run_id, "ti": ti,
               "dag_run": SimpleNamespace(run_type=run_type), "outlet_events": defaultdict(lambda: events)}
    production = {"endpoint_name": ENDPOINT, "evaluation": {"file": "eval.jsonl", "metric": "metrics.py:rmse",
                                                            "goal": "minimize", "min_samples": 20},
                  "rollout": {"steps": [10, 50, 100], "window_s": 0}}
    task = DeployBlueOperator(task_id="deploy", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=version, code_dir=str(team), deferrable=False, poll_interval_s=0.001,
                              smoke={"sample_request": "sample.json", "expected_response": "expected.json"},
                              production={**production, **{k: kwargs.pop(k) for k in list(kwargs) if k in production
                                                           or k in ("require_approval", "approval_timeout_s",
                                                                    "min_improvement", "rollback_to")}},
                              **kwargs)
    try:
        result = task.execute(context)
    finally:
        CleanupOperator(task_id="cleanup", backend_conn_id="fake", name_prefix="fk",
                        endpoint_name=ENDPOINT).execute(context)
    return result, events, ti


@pytest.fixture
def registered(request, tmp_path, monkeypatch, team):
    """A fake of this test's own behind the connection ``fake``, holding versions 1 to 4 of model ``m``."""
    monkeypatch.setenv("AIRFLOW_CONN_FAKE", json.dumps({"conn_type": "mlrunway_fake",
                                                        "extra": {"name": request.node.name}}))
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    fake = FakeBackend.named(request.node.name)
    request.addfinalizer(lambda: FakeBackend.forget(request.node.name))
    for _ in ERROR:
        fake.models.register("m", team / "score.py")
    fake.endpoints.scorer = scorer(fake)
    # A busy endpoint: every window has requests (a quiet one's windows hold no evidence, and never pass).
    fake.endpoints.metrics = lambda d, s, e: DeploymentMetrics(deployment=d, start=s, end=e, requests=40, errors=0,
                                                               p99_ms=12.0)
    return fake


def deployments(fake) -> list[str]:
    return sorted(fake.endpoints.endpoints[ENDPOINT].deployments)


def test_created_then_promoted_then_held_and_one_deployment_serves_after_each(registered, team):
    fake = registered
    first, events, ti = run(fake, team, 1, "manual__1")
    assert first["decision"] == "created" and first["live"] == {"deployment": "blue", "model": "m:1"}
    assert ti.pushed["decision"] == "created" and events.added[0][0] == f"mlrunway://endpoints/{ENDPOINT}"
    assert deployments(fake) == ["blue"] and fake.models.alias("m", "production").version == 1

    trained = RunNames.of("prod", "manual__2", "fk").train_job  # what the second run's training job ran on
    fake.jobs.submit(trained, CommandJobSpec(code=str(team), command="python fit.py"))
    fake.jobs.usages[trained] = Usage(started=0.0, ended=7200.0, size="Standard_NC6s_v3")
    fake.rate_card = RateCard(per_hour={"Standard_NC6s_v3": 3.0})
    second, events, pushed = run(fake, team, 2, "manual__2", budget={"max_cost": 10})
    assert second["decision"] == "promoted" and second["live"] == {"deployment": "green", "model": "m:2"}
    # What the new production model cost to make: the deploy task's XCom and the asset event's extra.
    assert pushed.pushed["cost"]["text"] == "6 USD for 2 node-hours in 1 job (an estimate)"
    assert events.added[0][1]["cost"] == pushed.pushed["cost"] == second["cost"]
    # The run's budget, the task's own argument (as Train and Sweep get it): the cost stated against it, on the card.
    assert second["cost"]["budget"]["limit"] == 10 and second["cost"]["budget"]["over"] == 0
    assert f"| budget | {second['cost']['budget']['text']} |" in (fake.reports / CARDS / "m" / "2" / "card.md").read_text()
    assert second["gate"]["champion"] == 1.0 and second["gate"]["challenger"] == 0.5 and second["gate"]["samples"] == 20
    # the staged path, each change read back: 10, 50, 100 to green, with blue taking the rest
    assert [t for t, _ in fake.endpoints.traffic_log[-3:]] == [{"blue": 90, "green": 10}, {"blue": 50, "green": 50},
                                                                 {"blue": 0, "green": 100}]
    assert deployments(fake) == ["green"] and fake.endpoints.get(ENDPOINT).traffic == {"green": 100}
    assert fake.models.alias("m", "production").version == 2 and fake.models.alias("m", "previous").version == 1
    assert [extra["decision"] for _, extra in events.added] == ["promoted"]
    assert fake.models.get("m", 2).tags["mlrunway.decision"] == "promoted"

    third, events, _ = run(fake, team, 3, "manual__3")
    assert third["decision"] == "held" and "not better" in third["reason"] and third["live"]["model"] == "m:2"
    assert deployments(fake) == ["green"] and events.added == []  # nothing changed: no asset event
    assert json.loads(fake.models.get("m", 3).tags["mlrunway.evidence"])["gate"]["challenger"] == 3.0


def test_a_challenger_out_of_bounds_at_a_step_is_rolled_back_and_the_task_fails_with_the_figures(registered, team):
    fake = registered
    run(fake, team, 1, "manual__1")

    def metrics(deployment: str, start: float, end: float) -> DeploymentMetrics:
        errors = 30 if deployment == "green" else 0  # green fails 30 of 100 requests
        return DeploymentMetrics(deployment=deployment, start=start, end=end, requests=100, errors=errors, p99_ms=5.0)

    fake.endpoints.metrics = metrics
    with pytest.raises(EndpointError, match=r"rolled_back: .* error rate 30.0% \(30 of 100\)"):
        run(fake, team, 4, "manual__2")
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100}
    assert fake.endpoints.traffic_log[-1] == ({"blue": 100, "green": 0}, {})  # back after the 10% step
    assert deployments(fake) == ["blue"] and fake.models.alias("m", "production").version == 1
    assert fake.models.get("m", 4).tags["mlrunway.decision"] == "rolled_back"


@pytest.mark.parametrize("deferrable", [False, True], ids=["in-the-task", "in-the-trigger"])
def test_a_failing_challenger_is_rolled_back_by_the_watch_within_its_window(registered, team, deferrable):
    """Issue 34: the window's watch reads the last watch_s seconds a quarter second apart and rolls a clearly
    failing challenger back at once (in the triggerer when the task defers), not at the window's end."""
    fake = registered
    run(fake, team, 1, "manual__1")
    fake.endpoints.metrics = lambda d, s, e: DeploymentMetrics(deployment=d, start=s, end=e, requests=12,
                                                               errors=4 if d == "green" else 0, p99_ms=5.0)
    window = {"steps": [10, 50, 100], "window_s": 60}
    started = time.monotonic()
    if not deferrable:
        with pytest.raises(EndpointError, match=r"rolled_back: .* at the 10% window: watched: 4 errors in 12 "):
            run(fake, team, 4, "manual__2", rollout=window)
    else:
        events, ti = Events(), TaskInstance()
        context = {"dag": SimpleNamespace(dag_id="prod"), "run_id": "manual__2", "ti": ti,
                   "dag_run": SimpleNamespace(run_type="manual"), "outlet_events": defaultdict(lambda: events)}
        task = DeployBlueOperator(task_id="deploy", backend_conn_id="fake", name_prefix="fk", model_name="m",
                                  model_version=4, code_dir=str(team), endpoint_name=ENDPOINT, rollout=window,
                                  evaluation={"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": "minimize",
                                              "min_samples": 20}, deferrable=True, poll_interval_s=0.001)
        with pytest.raises(TaskDeferred) as deferred:
            task.execute(context)
        while not isinstance(deferred.value.trigger, WindowTrigger):  # provisioning first, then the window
            event = first_event(deferred.value.trigger)
            with pytest.raises(TaskDeferred) as deferred:
                task.execute_complete(context, event)
        trigger = deferred.value.trigger
        assert trigger.serialize()[1]["backend_conn_id"] == "fake" and trigger.until > time.time() + 50
        event = first_event(trigger)
        live = {slot: weight for slot, weight in fake.endpoints.get(ENDPOINT).traffic.items() if weight}
        assert event["status"] == "rolled_back" and live == {"blue": 100}  # the trigger moved it back
        with pytest.raises(EndpointError, match=r"rolled_back: .* at the 10% window: watched: 4 errors in 12 "):
            task.execute_complete(context, event)
        CleanupOperator(task_id="cleanup", backend_conn_id="fake", name_prefix="fk",
                        endpoint_name=ENDPOINT).execute(context)
    assert time.monotonic() - started < 30, "rolled back at the window's end, not by the watch"
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100} and deployments(fake) == ["blue"]
    evidence = json.loads(fake.models.get("m", 4).tags["mlrunway.evidence"])
    assert evidence["windows"][-1]["phase"] == "10%" and evidence["windows"][-1]["reason"].startswith("watched: ")
    assert fake.models.get("m", 4).tags["mlrunway.decision"] == "rolled_back"


def test_a_quiet_challenger_proves_nothing_and_the_run_ends_held_with_the_champion_serving(registered, team):
    """Issue 29, 3: a window with fewer challenger requests than rollout.min_requests (20) is no evidence: held,
    traffic back on the champion, the slot deleted by cleanup; the task succeeds (nothing failed)."""
    fake = registered
    run(fake, team, 1, "manual__1")
    fake.endpoints.metrics = lambda d, s, e: DeploymentMetrics(deployment=d, start=s, end=e, errors=0, p99_ms=9.0,
                                                               requests=3 if d == "green" else 40)
    result, events, _ = run(fake, team, 4, "manual__2")
    assert result["decision"] == "held" and "3 requests reached the challenger" in result["reason"]
    assert "fewer than rollout.min_requests=20" in result["reason"] and "the champion serves 100%" in result["reason"]
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100} and deployments(fake) == ["blue"]
    assert fake.models.alias("m", "production").version == 1 and not events.added
    assert fake.models.get("m", 4).tags["mlrunway.decision"] == "held"


def test_a_short_window_is_extended_and_judged_once_the_requests_came(registered, team):
    fake = registered
    run(fake, team, 1, "manual__1")
    reads = []

    def metrics(deployment: str, start: float, end: float) -> DeploymentMetrics:
        reads.append(deployment)
        quiet = deployment == "green" and reads.count("green") == 1  # the first 10% window: 5 requests
        return DeploymentMetrics(deployment=deployment, start=start, end=end, requests=5 if quiet else 40, errors=0,
                                 p99_ms=9.0)

    fake.endpoints.metrics = metrics
    result, _, _ = run(fake, team, 4, "manual__2", rollout={"window_s": 0, "max_extension_s": 0.01})
    assert result["decision"] == "promoted" and "every rollout window within bounds" in result["reason"]
    assert [(w["phase"], w["extended_s"]) for w in result["windows"]] == [("10%", 0.01), ("50%", 0), ("100%", 0)]


def test_min_requests_0_promotes_without_evidence_and_says_so(registered, team):
    fake = registered
    run(fake, team, 1, "manual__1")
    fake.endpoints.metrics = lambda d, s, e: DeploymentMetrics(deployment=d, start=s, end=e, requests=0, errors=0,
                                                               p99_ms=None)
    result, _, _ = run(fake, team, 4, "manual__2", rollout={"window_s": 0, "min_requests": 0})
    assert result["decision"] == "promoted" and fake.endpoints.get(ENDPOINT).traffic == {"green": 100}
    assert "promoted without live evidence (rollout.min_requests=0; no request in the 10%, 50%, 100% window)" in \
        result["reason"]


def test_metrics_that_cannot_be_read_fail_the_window_and_roll_back(registered, team, monkeypatch):
    fake = registered
    run(fake, team, 1, "manual__1")
    monkeypatch.setattr(stable, "METRICS_RETRY_S", 0.0)

    def unreadable(deployment: str, start: float, end: float) -> DeploymentMetrics:
        if deployment == "green":  # the champion's baseline was read before traffic moved
            raise OSError("metrics store unreachable")
        return DeploymentMetrics(deployment=deployment, start=start, end=end, requests=40, errors=0, p99_ms=9.0)

    fake.endpoints.metrics = unreadable
    with pytest.raises(EndpointError, match=r"rolled_back: .*could not be read \(3 tries, the last: OSError"):
        run(fake, team, 4, "manual__2")
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100} and deployments(fake) == ["blue"]


def test_a_slow_challenger_is_rolled_back_on_p99(registered, team):
    fake = registered
    run(fake, team, 1, "manual__1")
    fake.endpoints.metrics = lambda d, s, e: DeploymentMetrics(deployment=d, start=s, end=e, requests=50, errors=0,
                                                               p99_ms=400.0 if d == "green" else 8.0)
    with pytest.raises(EndpointError, match="p99 latency 400.0 ms against the champion's 8.0 ms"):
        run(fake, team, 4, "manual__2")
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100}


def test_a_backfill_evaluates_and_records_but_never_moves_production(registered, team):
    fake = registered
    run(fake, team, 1, "manual__1")
    result, events, _ = run(fake, team, 4, "backfill__2026-01-01", run_type="backfill")
    assert result["decision"] == "skipped" and "backfill" in result["reason"] and result["gate"]["challenger"] == 0.1
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100} and deployments(fake) == ["blue"] and not events.added


def test_a_second_run_on_the_endpoint_fails_clearly_while_the_first_holds_its_lease(registered, team):
    fake = registered
    run(fake, team, 1, "manual__1")
    holder = RunNames.of("prod", "manual__9", "fk").run_key
    assert fake.endpoints.lease(ENDPOINT, holder, 600) is None  # another run is rolling out
    with pytest.raises(EndpointError, match=f"run {holder} is rolling out to it; rollouts on one endpoint never"):
        run(fake, team, 2, "manual__2")
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100} and deployments(fake) == ["blue"]


def test_deferred_between_steps_on_a_window_trigger_whose_event_carries_the_rollout(registered, team):
    fake = registered
    run(fake, team, 1, "manual__1")
    task = DeployBlueOperator(task_id="deploy", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=2, code_dir=str(team), endpoint_name=ENDPOINT,
                              evaluation={"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": "minimize", "min_samples": 20},
                              rollout={"window_s": 60}, poll_interval_s=0.001)
    context = {"dag": SimpleNamespace(dag_id="prod"), "run_id": "manual__2", "ti": TaskInstance(),
               "dag_run": SimpleNamespace(run_type="manual"), "outlet_events": defaultdict(Events)}
    trigger = None
    for expected in ({"blue": 90, "green": 10}, {"blue": 50, "green": 50}, {"blue": 0, "green": 100}):
        with pytest.raises(TaskDeferred) as deferred:
            task.execute(context) if trigger is None else task.execute_complete(context, first_event(trigger))
        trigger = deferred.value.trigger
        assert isinstance(trigger, WindowTrigger) and deferred.value.method_name == "execute_complete"
        assert 59 < trigger.until - time.time() <= 60 and fake.endpoints.get(ENDPOINT).traffic == expected
        trigger.until = 0  # the window has passed
        trigger = type(trigger)(**trigger.serialize()[1])  # as the triggerer rebuilds it
    # The last window's event comes back by the name the version before the seam deferred to: it resumes too.
    result = task.stable_resume(context, first_event(trigger))
    assert result["decision"] == "promoted" and [w["phase"] for w in result["windows"]] == ["10%", "50%", "100%"]


def test_a_backfill_before_any_production_creates_nothing(registered, team):
    fake = registered
    result, events, ti = run(fake, team, 2, "backfill__2026-01-01", run_type="backfill")
    assert result["decision"] == "skipped" and "only the newest run creates it" in result["reason"]
    assert ENDPOINT not in fake.endpoints.endpoints and result["live"] is None and not events.added
    assert ti.pushed["decision"] == "skipped" and fake.models.get("m", 2).tags["mlrunway.decision"] == "skipped"


def test_a_catch_up_run_is_not_the_newest_and_a_manual_one_is():
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 11, 24, tzinfo=UTC)
    assert stable.not_newest("scheduled", now - timedelta(days=7), now).startswith("the DAG's next run was due")
    assert stable.not_newest("scheduled", now + timedelta(days=7), now) is None
    assert stable.not_newest("manual", None, now) is None and "backfill" in stable.not_newest("backfill", None, now)


def test_with_approval_the_run_waits_before_traffic_moves_and_proceeds_on_approve(registered, team):
    import threading

    from mlrunway.airflow.approval import main as approval

    fake = registered
    run(fake, team, 1, "manual__1")
    seen: list[dict[str, int]] = []

    def person() -> None:  # looks at the evidence, sees traffic still on the champion, approves
        while fake.models.get("m", 2).tags.get("mlrunway.approval") != "pending":
            time.sleep(0.01)
        seen.append(dict(fake.endpoints.get(ENDPOINT).traffic))
        assert approval(["approve", "m", "2", "--conn", "fake", "--by", "alice"]) == 0

    answering = threading.Thread(target=person)
    answering.start()
    result, _, ti = run(fake, team, 2, "manual__2", require_approval=True, approval_timeout_s=30)
    answering.join()
    assert seen == [{"blue": 100}] and ti.pushed["approval"]["gate"]["challenger"] == 0.5
    assert result["decision"] == "promoted" and fake.models.get("m", 2).tags["mlrunway.approval_by"] == "alice"


def test_a_rejection_while_deferred_holds_the_challenger_and_nothing_moves(registered, team, capsys):
    from mlrunway.airflow.approval import main as approval
    from mlrunway.airflow.triggers import ApprovalTrigger

    fake = registered
    run(fake, team, 1, "manual__1")
    context = {"dag": SimpleNamespace(dag_id="prod"), "run_id": "manual__2", "ti": TaskInstance(),
               "dag_run": SimpleNamespace(run_type="manual"), "outlet_events": defaultdict(Events)}
    task = DeployBlueOperator(task_id="deploy", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=2, code_dir=str(team), endpoint_name=ENDPOINT, require_approval=True,
                              evaluation={"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": "minimize", "min_samples": 20},
                              poll_interval_s=0.001)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, ApprovalTrigger) and trigger.model == "m:2"
    assert approval(["show", "m", "2", "--conn", "fake"]) == 0 and "approval pending" in capsys.readouterr().out
    assert approval(["reject", "m", "2", "--conn", "fake", "--by", "bob"]) == 0
    event = first_event(type(trigger)(**trigger.serialize()[1]))
    assert (event["status"], event["by"], "error" in event) == ("rejected", "bob", False)  # who answered: no error
    result = task.execute_complete(context, event)
    assert result["decision"] == "held" and "rejected by bob" in result["reason"]
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100}
    assert approval(["approve", "m", "2", "--conn", "fake"]) == 1  # answered already: nothing changes


def test_no_answer_before_the_deadline_holds_the_challenger(registered, team):
    fake = registered
    run(fake, team, 1, "manual__1")
    result, _, _ = run(fake, team, 2, "manual__2", require_approval=True, approval_timeout_s=0.05)
    assert result["decision"] == "held" and "no answer within approval_timeout_s=0.05" in result["reason"]
    assert fake.models.get("m", 2).tags["mlrunway.approval"] == "expired"


def test_the_dags_own_timetable_tells_a_catch_up_run_from_the_newest():
    """The weekly DAG's deploy task, with its real timetable: a run three weeks old is a catch-up (its successor was
    due), this week's is the newest (its successor is not due yet)."""
    import sys
    from datetime import UTC, datetime, timedelta

    from tests.conftest import REPO

    sys.path.insert(0, str(REPO / "dags"))
    from train_sweep_deploy import dag

    task, now = dag.get_task("deploy_blue"), datetime.now(UTC)

    def context(logical: datetime) -> dict[str, Any]:  # Airflow 3's cron trigger: a zero-length interval
        return {"dag_run": SimpleNamespace(run_type="scheduled"), "data_interval_start": logical,
                "data_interval_end": logical, "dag": dag}

    assert "catch-up" in task.not_newest(context(now - timedelta(days=21)))
    latest = now.replace(hour=0, minute=0, second=0, microsecond=0)
    latest -= timedelta(days=(latest.weekday() + 1) % 7)  # @weekly's latest run: the last Sunday 00:00
    assert task.not_newest(context(latest)) is None


def test_a_rollout_cut_short_before_its_decision_was_recorded_gives_production_back_at_cleanup(registered, team):
    """Found by the soak: a full disk as the decision was written left the challenger serving 100% and the
    production alias on the champion; the record and what serves disagreed for good. Cleanup now puts the
    production model back (no decision, no promotion) and deletes the unrecorded challenger."""
    fake = registered
    run(fake, team, 1, "manual__1")
    fake.endpoints.create_or_update_deployment(ENDPOINT, "green", DeploymentSettings(model="m:2", code_dir=str(team)))
    fake.endpoints.set_traffic(ENDPOINT, {"blue": 0, "green": 100})  # the last step, and then the task died
    assert stable.serving(fake, ENDPOINT)["model"] == "m:2" and fake.models.alias("m", "production").version == 1
    CleanupOperator(task_id="cleanup", backend_conn_id="fake", name_prefix="fk", endpoint_name=ENDPOINT).execute(
        {"dag": SimpleNamespace(dag_id="prod"), "run_id": "manual__2", "ti": TaskInstance()})
    assert fake.endpoints.get(ENDPOINT).traffic == {"blue": 100} and deployments(fake) == ["blue"]
    assert stable.serving(fake, ENDPOINT) == {"deployment": "blue", "model": "m:1"}


def test_every_version_that_reaches_the_endpoint_gets_a_model_card_rebuilt_as_decisions_change(registered, team):
    """The card's history follows the decisions (created, then replaced by a promotion; promoted; held), each card
    is kept with the run's reports, and the version's tag and the task's link point to it."""
    from mlrunway.deploy import card

    fake = registered
    described = {"job": {"command": "python fit.py --lr ${{inputs.lr}}", "inputs": {"lr": 0.01, "history": {
        "type": "uri_file", "path": "/data/history.csv"}}}, "sweep": {"early_termination": {"type": "bandit"}}}
    _, _, ti = run(fake, team, 1, "manual__1", intended_use="Weekly demand per store; not for new stores.",
                   model_card=described)
    run(fake, team, 2, "manual__2", model_card=described)
    run(fake, team, 3, "manual__3")  # a task told nothing of the training: the card says what the registry knows
    folder = fake.reports / CARDS / "m"
    first, second, third = (card.load(folder / str(v)) for v in (1, 2, 3))
    assert [e["decision"] for e in first.history] == ["created", "replaced"]
    assert first.history[1]["reason"] == "m:2 promoted" and first.history[1]["at"] >= first.history[0]["at"]
    assert first.intended_use == "Weekly demand per store; not for new stores."
    assert ("input history", "uri_file /data/history.csv") in first.data  # kept when a later run rebuilt it
    assert ("sweep early_termination", '{"type": "bandit"}') in first.training
    assert [e["decision"] for e in second.history] == ["promoted"]
    assert dict(second.evaluation)["gate challenger"] == "0.5" and dict(second.evaluation)["gate samples"] == "20"
    assert [e["decision"] for e in third.history] == ["held"] and third.training == []
    assert fake.models.get("m", 2).tags[card.CARD_TAG] == str(folder / "2" / card.HTML_FILE)
    page = (folder / "1" / card.HTML_FILE).read_text()
    assert "<h2>Decision history</h2>" in page and "replaced on digits-prod: m:2 promoted" in page
    assert "| input lr | 0.01 |" in (folder / "1" / card.MARKDOWN).read_text()
    assert ti.pushed["model_card_url"].endswith("/mlrunway/report/fake/card/m/1")


CARRIES = json.loads((Path(__file__).parent.parent / "fixtures" / "carries-0.2.x.json").read_text())


def test_a_task_deferred_by_0_2_resumes_from_its_recorded_carries(registered, team):
    """Across the upgrade a deferred task comes back to new code with the carry the old one recorded: a stable
    endpoint's WindowTrigger (carry["rollout"], the progress with its policy dict) and a per-run blue's
    DeploymentTrigger (carry {"phase": "blue"}), as 0.2.x serialized them (tests/fixtures/carries-0.2.x.json)."""
    from mlrunway.airflow.triggers import DeploymentTrigger
    from mlrunway.backend.types import ProvisioningState

    fake = registered
    run(fake, team, 1, "manual__1")
    production = {"endpoint_name": ENDPOINT, "rollout": {"window_s": 60},
                  "evaluation": {"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": "minimize",
                                 "min_samples": 20}}
    task = DeployBlueOperator(task_id="deploy", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=2, code_dir=str(team), production=production, poll_interval_s=0.001)
    context = {"dag": SimpleNamespace(dag_id="prod"), "run_id": "manual__2", "ti": TaskInstance(),
               "dag_run": SimpleNamespace(run_type="manual"), "outlet_events": defaultdict(Events)}
    with pytest.raises(TaskDeferred):  # the endpoint as 0.2.x left it at its first window: green at 10%
        task.execute(context)
    recorded = CARRIES["window"]
    assert recorded["classpath"].endswith("WindowTrigger") and recorded["kwargs"]["carry"]["rollout"]["policy"]
    trigger: Any = WindowTrigger(**{**recorded["kwargs"], "until": 0})
    for _ in range(3):  # the recorded window, then the new code's own
        try:
            result = getattr(task, recorded["method"])(context, first_event(trigger))
            break
        except TaskDeferred as deferred:
            trigger = deferred.trigger
            trigger.until = 0
    assert result["decision"] == "promoted" and [w["phase"] for w in result["windows"]] == ["10%", "50%", "100%"]

    fake.endpoints.provisioning["blue"] = [ProvisioningState.CREATING] * 3 + [ProvisioningState.SUCCEEDED]
    blue = DeployBlueOperator(task_id="deploy", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=1, code_dir=str(team), defer_after_s=0, poll_interval_s=0.001,
                              smoke={"sample_request": "sample.json", "expected_response": "expected.json"})
    per_run = {"dag": SimpleNamespace(dag_id="prod"), "run_id": "manual__9", "ti": TaskInstance(),
               "dag_run": SimpleNamespace(run_type="manual"), "outlet_events": defaultdict(Events)}
    with pytest.raises(TaskDeferred):  # blue provisioning, as 0.2.x deferred on it
        blue.execute(per_run)
    recorded = CARRIES["blue"]
    assert recorded["kwargs"]["carry"] == {"phase": "blue"}
    old = DeploymentTrigger(**{**recorded["kwargs"], "deadline": time.time() + 60})
    done = getattr(blue, recorded["method"])(per_run, first_event(old))
    assert done["endpoint"] == recorded["kwargs"]["endpoint"] and fake.endpoints.get(done["endpoint"]).traffic == {
        "blue": 100}


@pytest.mark.parametrize("left", [{"blue": 50, "green": 50}, {"blue": 90, "green": 10}, {"blue": 0, "green": 100}])
def test_a_retry_of_a_try_killed_mid_rollout_puts_production_back_then_rolls_out_again_from_the_start(
        registered, team, left, caplog):
    """The try's worker died between two steps: traffic left split (or at the last step) with no decision, and the
    lease still the run's. Its retry (the same run) gives production back its 100% before anything else, never
    provisions into the slot production serves from, and rolls the challenger out from the first step."""
    fake = registered
    run(fake, team, 1, "manual__1")
    holder = RunNames.of("prod", "manual__2", "fk").run_key
    assert fake.endpoints.lease(ENDPOINT, holder, 600) is None  # the killed try's lease
    fake.endpoints.create_or_update_deployment(ENDPOINT, "green", DeploymentSettings(model="m:2", code_dir=str(team)))
    fake.endpoints.set_traffic(ENDPOINT, left)
    provisioned: list[tuple[str, str, dict[str, int]]] = []
    real = fake.endpoints.begin_create_or_update_deployment

    def provision(endpoint: str, name: str, settings: DeploymentSettings) -> Any:
        provisioned.append((name, settings.model, dict(fake.endpoints.get(endpoint).traffic)))
        return real(endpoint, name, settings)

    fake.endpoints.begin_create_or_update_deployment = provision
    result, _, _ = run(fake, team, 2, "manual__2")
    assert provisioned[0] == ("green", "m:2", {"blue": 100, "green": 0})  # production whole before anything moved
    assert "no decision recorded it (a rollout cut short); m:1, the production model, goes back to 100%" in caplog.text
    assert result["decision"] == "promoted" and [w["phase"] for w in result["windows"]] == ["10%", "50%", "100%"]
    assert fake.endpoints.get(ENDPOINT).traffic == {"green": 100} and deployments(fake) == ["green"]
