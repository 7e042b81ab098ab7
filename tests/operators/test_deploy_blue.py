"""DeployBlueOperator on a real local backend: it defers while `blue` provisions past ``defer_after_s``,
resumes into the smoke test and the traffic change, and turns a failed or late provisioning into the
deployment's own error."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mlrunway.airflow.triggers import DeploymentTrigger
from mlrunway.backend.naming import RunNames
from mlrunway.errors import EndpointError
from mlrunway.local.backend import LocalBackend
from mlrunway.operators import DeployBlueOperator
from tests.conftest import REPO
from tests.mlrunway.airflow.test_triggers import first_event

pytestmark = pytest.mark.slow


class TaskInstance:
    """What the operator touches of Airflow's task instance: the XComs its links are pushed to."""

    def __init__(self) -> None:
        self.pushed: dict[str, str] = {}

    def xcom_push(self, key: str, value: str) -> None:
        self.pushed[key] = value


CONTEXT = {"dag": SimpleNamespace(dag_id="deploy_test"), "run_id": "manual__1", "ti": TaskInstance()}
ENDPOINT = RunNames.of("deploy_test", "manual__1", "digits").endpoint


@pytest.fixture
def backend(tmp_path, monkeypatch, onnx_model):
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    local = LocalBackend.at(tmp_path / "ws")
    local.models.register("digits-onnx", onnx_model)
    yield local
    for state in local.endpoints.list():
        local.endpoints.delete(state.name)


def operator(digits, **kwargs) -> DeployBlueOperator:
    return DeployBlueOperator(task_id="deploy_blue", model_name="digits-onnx", model_version=1,
                              code_dir=str(REPO / "training"), data_dir=str(digits), name_prefix="digits", workers=1,
                              poll_interval_s=0.1, **kwargs)


def test_defers_while_blue_provisions_then_smoke_tests_and_moves_all_traffic(backend, digits):
    task = operator(digits, defer_after_s=0)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(CONTEXT)  # the endpoint answers at once locally: the wait is on blue
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeploymentTrigger) and (trigger.endpoint, trigger.deployment) == (ENDPOINT, "blue")
    assert deferred.value.method_name == "execute_complete"
    assert backend.endpoints.get(ENDPOINT).traffic == {}
    assert CONTEXT["ti"].pushed == {"endpoint_url": f"/mlrunway/endpoint/mlrunway_default/{ENDPOINT}"}

    resumed = operator(digits, defer_after_s=0)  # a resumed task is a new process: a new operator
    result = resumed.execute_complete(CONTEXT, first_event(trigger))
    assert [link.get_link(resumed, ti_key=None) for link in resumed.operator_extra_links] == [
        "", "", "", f"/mlrunway/endpoint/mlrunway_default/{ENDPOINT}",  # what the UI shows: the endpoint's page
        "/mlrunway/report/mlrunway_default/card/digits-onnx/1", ""]  # and the served version's model card
    assert result["endpoint"] == ENDPOINT and result["smoke_label"] in [str(i) for i in range(10)]
    assert backend.endpoints.get(ENDPOINT).traffic == {"blue": 100}
    answer = json.loads(backend.endpoints.invoke(ENDPOINT, payload={"data": [[[[0.0] * 8] * 8]]}))
    assert len(answer["predictions"]) == 1


def test_a_deployment_up_within_defer_after_s_is_not_deferred(backend, digits):
    started = time.monotonic()
    result = operator(digits, defer_after_s=60).execute(CONTEXT)  # no TaskDeferred: it was up before then
    assert result["deployment"] == "blue" and backend.endpoints.get(ENDPOINT).traffic == {"blue": 100}
    assert time.monotonic() - started < 60


def test_blocking_mode_waits_in_the_worker(backend, digits):
    result = operator(digits, deferrable=False).execute(CONTEXT)
    assert result["deployment"] == "blue" and backend.endpoints.get(ENDPOINT).traffic == {"blue": 100}


@pytest.mark.parametrize(
    ("event", "match"),
    [
        pytest.param({"outcome": "ended", "status": "Failed", "error": "score.py init() raised; log tail: KeyError"},
                     "score.py init\\(\\) raised; log tail: KeyError", id="failed"),
        pytest.param({"outcome": "ended", "status": "Canceled", "error": None}, f"deployment {ENDPOINT}/blue ended Canceled", id="canceled"),
        pytest.param({"outcome": "timeout", "status": "Creating", "error": "still Creating at the deadline; it was deleted"},
                     f"deployment {ENDPOINT}/blue: still Creating at the deadline; it was deleted \\(max_wait_s=60\\)",
                     id="timeout"),
    ],
)
def test_a_provisioning_that_did_not_succeed_fails_the_task_with_its_reason(digits, event, match):
    with pytest.raises(EndpointError, match=match):
        operator(digits, max_wait_s=60).execute_complete(CONTEXT, {"endpoint": ENDPOINT, "deployment": "blue",
                                                                   "carry": {"phase": "blue"}, **event})
