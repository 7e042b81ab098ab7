"""The real operators and triggers over the shipped FakeBackend, reached through an ``mlrunway_fake`` Airflow
connection and the backend registry: no process starts, so every case runs in milliseconds.

Job operators: returns / defers / raises, finished before deferral, ``execute_complete`` for every outcome,
``on_kill``, retry semantics (re-attach or a new attempt) and a retried sweep's carry-over. Triggers:
serialization, every terminal state, the deadline, an exception as an error event. And pick-best, deploy and
cleanup through the real operators on a backend that is neither local nor Azure.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mlrunway import check
from mlrunway.airflow.triggers import DeploymentTrigger, JobTrigger
from mlrunway.backend.attempts import Action
from mlrunway.backend.fake import FakeBackend
from mlrunway.backend.naming import RunNames
from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import JobStatus, ProvisioningState, TrialInfo, Usage
from mlrunway.backend.waiting import Outcome
from mlrunway.deploy import STRATEGIES, strategy
from mlrunway.deploy.base import DeployRequest, Done, Provisioning, Resumed, Step, Window
from mlrunway.errors import EndpointError, JobFailed, JobTimedOut, MlrunwayError, NotFound, ParityError, SpecError
from mlrunway.operators import (
    CleanupOperator,
    DeployBlueOperator,
    PickBestModelOperator,
    SweepOperator,
    TrainModelOperator,
)
from mlrunway.specs.sweep import SweepSpec
from tests.conftest import REPO
from tests.mlrunway.airflow.test_triggers import first_event
from tests.tutorial import OBJECTIVE, SPACE, bandit, tutorial_job

DAG, RUN = "fake_dag", "manual__1"
NAMES = RunNames.of(DAG, RUN, "fk")


class TaskInstance:
    """What the operators touch of Airflow's task instance: XComs for links, the run's task states."""

    stats_tags: dict[str, str] = {}

    def __init__(self, states: dict[str, str] | None = None) -> None:
        self.pushed: dict[str, Any] = {}
        self.states = states or {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict[str, dict[str, str]]:
        return {RUN: self.states}


class StateStore(dict):
    """Airflow's task state store, as ResumableJobMixin uses it."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


def context(**extra: Any) -> dict[str, Any]:
    return {"dag": SimpleNamespace(dag_id=DAG), "run_id": RUN, "ti": TaskInstance(), **extra}


@pytest.fixture
def fake(request, tmp_path, monkeypatch) -> FakeBackend:
    """A fake of this test's own, behind the connection ``fake`` (extra ``name``)."""
    name = request.node.name
    monkeypatch.setenv("AIRFLOW_CONN_FAKE", json.dumps({"conn_type": "mlrunway_fake", "extra": {"name": name}}))
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    yield FakeBackend.named(name)
    FakeBackend.forget(name)


def train(**kwargs: Any) -> TrainModelOperator:
    return TrainModelOperator(**{"task_id": "train", "backend_conn_id": "fake", "name_prefix": "fk",
                                 "job": tutorial_job("/data"), "poll_interval_s": 0.01, **kwargs})


def sweep(**kwargs: Any) -> SweepOperator:
    return SweepOperator(**{"task_id": "sweep", "backend_conn_id": "fake", "name_prefix": "fk",
                            "trial": tutorial_job("/data"), "search_space": SPACE, "objective": OBJECTIVE, "seed": 7,
                            "early_termination": bandit(), "limits": {"max_total_trials": 4, "max_concurrent_trials": 2},
                            "poll_interval_s": 0.01, **kwargs})


def trial(name: str, status: JobStatus, history: tuple[float, ...], **params: float) -> TrialInfo:
    return TrialInfo(name=name, params=params, status=status, history=history,
                     metrics={"best_val_acc": max(history)} if history else {})


# -- job operators ----------------------------------------------------------------------------------------------
def test_a_job_that_ended_before_the_deferral_returns_without_deferring(fake):
    result = train(defer_after_s=0).execute(context())
    assert result == {"job_name": NAMES.train_job, "status": "Completed", "metrics": {}}
    assert "${{inputs.learning_rate}}" in fake.jobs.spec(NAMES.train_job).command


def test_a_running_job_defers_on_a_serializable_trigger_and_resumes_with_its_result(fake):
    fake.jobs.script(NAMES.train_job, JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RUNNING, JobStatus.COMPLETED)
    task = train(defer_after_s=0)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(context())
    trigger = deferred.value.trigger
    path, kwargs = trigger.serialize()
    module, _, cls = path.rpartition(".")
    assert getattr(importlib.import_module(module), cls)(**kwargs).serialize() == (path, kwargs)
    event = first_event(trigger)
    assert event == {"job_name": NAMES.train_job, "outcome": "ended", "status": "Completed", "error": None}
    assert task.execute_complete(context(), event)["status"] == "Completed"


@pytest.mark.parametrize(("event", "raises", "match"), [
    pytest.param({"outcome": "ended", "status": "Failed", "error": "exit code 1"}, JobFailed,
                 "training job .* ended Failed: exit code 1", id="failed"),
    pytest.param({"outcome": "ended", "status": "Canceled", "error": "canceled by user"}, JobFailed,
                 "ended Canceled: canceled by user", id="canceled"),
    pytest.param({"outcome": "timeout", "status": "Running", "error": "still Running at the deadline; it was canceled"},
                 JobTimedOut, r"still Running at the deadline; it was canceled \(max_wait_s=3600\)", id="timeout"),
    pytest.param({"outcome": "error", "status": None, "error": "ConnectionError: refused"}, MlrunwayError,
                 r"job .* may still be running on the fake backend: waiting on it failed \(ConnectionError: refused\); "
                 r"cleanup now cancels it \(raise the connection's transient_outage_s", id="error"),
    pytest.param({"outcome": "lost", "status": None, "error": "job x may still be running on the fake backend: its "
                  "status could not be read for 900 s (HTTP 503)"}, MlrunwayError,
                 r"could not be read for 900 s \(HTTP 503\); cleanup now cancels it", id="lost"),
])
def test_execute_complete_turns_every_outcome_into_its_result_or_exception(fake, event, raises, match):
    """A job that ended (Failed, Canceled, past its deadline) fails the task for good: AirflowFailException, never
    retried into a new attempt; a lost watch is an ordinary error (retried, and the retry re-attaches)."""
    from airflow.sdk.exceptions import AirflowFailException

    status = JobStatus(event["status"]) if event["outcome"] == "ended" else JobStatus.RUNNING
    fake.jobs.script(NAMES.train_job, status, error=event["error"])
    fake.jobs.submit(NAMES.train_job, _any_spec())
    with pytest.raises(raises, match=match) as raised:
        train().execute_complete(context(), {"job_name": NAMES.train_job, **event})
    assert isinstance(raised.value, AirflowFailException) is (event["outcome"] in ("ended", "timeout"))


def test_a_lost_watch_before_the_last_try_says_the_retry_re_attaches_and_on_kill_leaves_the_job(fake):
    fake.jobs.script(NAMES.train_job, JobStatus.RUNNING)
    fake.jobs.submit(NAMES.train_job, _any_spec())
    task = train(retries=2)
    first = context()
    first["ti"].try_number = 1
    with pytest.raises(MlrunwayError, match=r"could not be read for 900 s \(HTTP 503\); the next try re-attaches "
                                            r"to it$"):
        task.execute_complete(first, {"job_name": NAMES.train_job, "outcome": "lost", "status": None,
                                      "error": "its status could not be read for 900 s (HTTP 503)"})
    task.on_kill()  # a worker stopped between tries: the job goes on for the retry
    assert fake.jobs.canceled == []
    task.last_try(context(ti=SimpleNamespace(try_number=3)))
    task.on_kill()
    assert [name for name, _ in fake.jobs.canceled] == [NAMES.train_job]


def _any_spec():
    from training.tutorial import train_job

    return train_job(str(REPO / "training"), "/data")


def test_on_kill_cancels_the_job_the_task_waits_on(fake):
    fake.jobs.script(NAMES.train_job, JobStatus.RUNNING)
    task = train(defer_after_s=0)
    with pytest.raises(TaskDeferred):
        task.execute(context())
    task.on_kill()
    assert fake.jobs.canceled == [(NAMES.train_job, "the Airflow task was killed")]


def test_waiting_in_the_worker_keeps_the_job_in_the_task_state_store(fake):
    fake.jobs.script(NAMES.train_job, JobStatus.RUNNING, JobStatus.COMPLETED)
    store = StateStore()
    assert train(deferrable=False).execute(context(task_state_store=store))["status"] == "Completed"
    assert store == {"mlrunway_job_name": NAMES.train_job}


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.COMPLETED])
def test_a_retry_reattaches_to_a_job_that_can_still_succeed(fake, status):
    fake.jobs.script(NAMES.train_job, status)
    fake.jobs.submit(NAMES.train_job, _any_spec())
    task = train()
    assert task.submit_job(context()) == NAMES.train_job and list(fake.jobs.records) == [NAMES.train_job]
    assert task.attempt.action is Action.REATTACHED
    assert task.attempt.describe() == f"Re-attaching to {NAMES.train_job}, already {status.value}: nothing new is submitted"


@pytest.mark.parametrize("status", [JobStatus.FAILED, JobStatus.CANCELED])
def test_a_retry_after_a_failed_or_canceled_job_submits_the_next_attempt(fake, status):
    fake.jobs.script(NAMES.train_job, status, error="node preempted")
    fake.jobs.submit(NAMES.train_job, _any_spec())
    task = train()
    assert task.submit_job(context()) == f"{NAMES.train_job}-a2"
    assert task.attempt.describe() == (f"{NAMES.train_job} ended {status.value} (node preempted); submitted attempt 2 "
                                       f"as {NAMES.train_job}-a2")
    fake.jobs.script(f"{NAMES.train_job}-a3", JobStatus.COMPLETED)
    fake.jobs.records[f"{NAMES.train_job}-a2"].script = [JobStatus.FAILED]
    assert train().submit_job(context()) == f"{NAMES.train_job}-a3"  # the newest attempt is the one that counts
    assert train().submit_job(context()) == f"{NAMES.train_job}-a3"  # and it completed: re-attach


def test_a_retried_sweep_carries_over_its_completed_trials_and_runs_only_the_rest(fake):
    first = NAMES.sweep
    fake.jobs.script(first, JobStatus.FAILED, error="the sweep's controller died")
    sweep().submit(first, context())
    fake.jobs.set_trials(first, [trial(f"{first}_trial_0", JobStatus.COMPLETED, (0.5, 0.9), learning_rate=0.01),
                                 trial(f"{first}_trial_1", JobStatus.FAILED, (0.2,), learning_rate=0.1)])
    second = sweep().submit_job(context())
    assert second == f"{first}-a2"
    spec = fake.jobs.spec(second)
    assert isinstance(spec, SweepSpec) and spec.limits.max_total_trials == 3 and spec.seed == 8
    fake.jobs.set_trials(second, [trial(f"{second}_trial_0", JobStatus.COMPLETED, (0.6, 0.7), learning_rate=0.02)])
    result = sweep().finish(context(), fake.jobs.get(second))
    assert result["carried_over"] == [f"{first}_trial_0"] and result["trials"] == 2
    assert result["best_trial"] == f"{first}_trial_0"  # the carried trial is still the best


# -- triggers -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED])
def test_the_job_trigger_fires_once_on_each_terminal_state(fake, status):
    fake.jobs.script("j", JobStatus.RUNNING, status, error=None if status is JobStatus.COMPLETED else "why")
    fake.jobs.submit("j", _any_spec())
    event = first_event(JobTrigger("fake", "j", poll_interval_s=0.001))
    assert (event["outcome"], event["status"]) == ("ended", status.value)


def test_the_job_trigger_cancels_the_job_at_its_deadline(fake):
    fake.jobs.script("j", JobStatus.RUNNING)
    fake.jobs.submit("j", _any_spec())
    event = first_event(JobTrigger("fake", "j", poll_interval_s=0.001, deadline=0))
    assert event["outcome"] == Outcome.TIMEOUT and fake.jobs.canceled == [("j", "the task's maximum wait passed")]


def test_an_exception_while_waiting_becomes_an_error_event(fake):
    event = first_event(JobTrigger("fake", "never-submitted", poll_interval_s=0.001))
    assert event["outcome"] == "error" and "NotFound: job 'never-submitted' does not exist" in event["error"]


def test_the_deployment_trigger_carries_a_failed_provisioning(fake):
    fake.endpoints.create_or_update("ep-x")
    fake.endpoints.provisioning["blue"] = [ProvisioningState.CREATING, ProvisioningState.FAILED]
    fake.models.register("m", REPO / "training" / "score.py")
    from mlrunway.backend.types import DeploymentSettings

    fake.endpoints.begin_create_or_update_deployment("ep-x", "blue", DeploymentSettings(model="m:1", code_dir="c"))
    event = first_event(DeploymentTrigger("fake", "ep-x", "blue", poll_interval_s=0.001))
    assert (event["outcome"], event["status"], event["error"]) == ("ended", "Failed", "deployment ep-x/blue failed")


# -- pick-best, deploy and cleanup on a third backend -----------------------------------------------------------
def scorer(payload: Any, deployment: str | None) -> str:
    probabilities = [0.0] * 10
    probabilities[3] = 1.0
    return json.dumps({"predictions": [{"label": "3", "probability": 1.0, "probabilities": probabilities}]})


def test_pick_best_deploy_and_cleanup_run_through_the_real_operators_on_the_fake(fake, digits, tmp_path):
    fake.jobs.submit_sweep(NAMES.sweep, sweep().spec())
    fake.jobs.set_trials(NAMES.sweep, [trial(f"{NAMES.sweep}_trial_{i}", JobStatus.COMPLETED, h, learning_rate=lr)
                                       for i, (h, lr) in enumerate([((0.5, 0.7), 0.01), ((0.6, 0.95), 0.03)])])
    best_outputs = Path(fake.job_outputs(f"{NAMES.sweep}_trial_1")) / "model"
    best_outputs.mkdir(parents=True)
    (best_outputs / "signature.json").write_text(json.dumps({
        "classes": [str(i) for i in range(10)],
        "preprocessing": {"color": "L", "size": [8, 8], "scale": 1 / 255, "mean": 0.5, "std": 0.5}}))

    picked = PickBestModelOperator(task_id="pick_best", backend_conn_id="fake", name_prefix="fk",
                                   sweep_name=NAMES.sweep).execute(context())
    assert (picked["trial"], picked["model_version"], picked["value"]) == (f"{NAMES.sweep}_trial_1", 1, 0.95)

    fake.endpoints.scorer = scorer
    fake.endpoints.provisioning["blue"] = [ProvisioningState.CREATING, ProvisioningState.SUCCEEDED]
    deployed = DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk",
                                  model_name=picked["model_name"], model_version=picked["model_version"],
                                  code_dir=str(REPO / "training"), data_dir=str(digits), defer_after_s=1,
                                  poll_interval_s=0.001).execute(context())
    assert deployed["smoke_label"] == "3" and fake.endpoints.get(NAMES.endpoint).traffic == {"blue": 100}
    assert [deployment for _, deployment, _ in fake.endpoints.invocations] == ["blue", "blue"]  # header, then traffic

    done = CleanupOperator(task_id="cleanup", backend_conn_id="fake", name_prefix="fk").execute(context())
    assert done["endpoint_deleted"] is True and NAMES.endpoint not in fake.endpoints.endpoints
    assert (fake.reports / NAMES.sweep / "report.html").is_file()  # the run's report, where its backend keeps them
    run = json.loads((fake.reports / NAMES.sweep / "run.json").read_text())  # what pruning keeps each DAG's runs by
    assert (run["dag_id"], run["run_id"]) == (DAG, RUN) and run["created"] > 0


def test_cleanup_after_a_failed_task_fails_the_run_in_one_readable_line(fake):
    task = CleanupOperator(task_id="cleanup", backend_conn_id="fake", name_prefix="fk")
    with pytest.raises(JobFailed) as failed:
        task.execute(context(ti=TaskInstance({"train": "failed", "sweep": "upstream_failed", "cleanup": "running"})))
    assert str(failed.value) == ("the run failed at train (its log says why; not run: sweep); cleanup itself "
                                 "succeeded: no endpoint to delete; no job left running")


def test_killing_deploy_blue_while_blue_provisions_deletes_it(fake, digits):
    fake.models.register("m", REPO / "training" / "score.py")
    fake.endpoints.provisioning["blue"] = [ProvisioningState.CREATING]
    task = DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=1, code_dir=str(REPO / "training"), data_dir=str(digits), defer_after_s=0)
    with pytest.raises(TaskDeferred):
        task.execute(context())
    with pytest.raises(TaskDeferred):  # the endpoint is up (an event without carry, as before the seam): now blue
        task.execute_complete(context(), {"endpoint": NAMES.endpoint, "deployment": None, "outcome": "ended",
                                          "status": "Succeeded", "error": None})
    task.on_kill()
    assert "blue" not in fake.endpoints.endpoints[NAMES.endpoint].deployments


def test_deploy_blue_raises_the_waits_error_event(fake, digits):
    task = DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=1, code_dir=str(REPO / "training"), data_dir=str(digits))
    with pytest.raises(EndpointError, match="deployment .*/blue: waiting on it failed: TimeoutError"):
        task.execute_complete(context(), {"endpoint": NAMES.endpoint, "deployment": "blue", "outcome": "error",
                                          "status": None, "error": "TimeoutError: ARM", "carry": {"phase": "blue"}})


def test_pick_best_registers_the_backends_pick_and_warns_when_the_ranking_differs(fake, caplog):
    from mlrunway.pipeline import pick_best

    fake.jobs.submit_sweep("s", sweep().spec())
    fake.jobs.set_trials("s", [trial("s_0", JobStatus.COMPLETED, (0.9,)), trial("s_1", JobStatus.COMPLETED, (0.8,))],
                         best="s_1")  # the service ranked otherwise (its own rounding, a different metric read)
    for name in ("s_0", "s_1"):
        (Path(fake.job_outputs(name)) / "model").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        assert pick_best(fake, "s", "m")["trial"] == "s_1"
    assert "the backend picked s_1" in caplog.text and "the ranking s_0" in caplog.text


def test_cleanup_cancels_every_attempt_and_the_trials_a_dead_sweep_left_running(fake, caplog):
    from mlrunway.pipeline import cleanup

    fake.jobs.script(NAMES.sweep, JobStatus.FAILED, error="the sweep's controller died")
    fake.jobs.submit_sweep(NAMES.sweep, sweep().spec())
    fake.jobs.set_trials(NAMES.sweep, [trial(f"{NAMES.sweep}_trial_0", JobStatus.RUNNING, (0.5,))])
    fake.jobs.script(f"{NAMES.sweep}_trial_0", JobStatus.RUNNING)
    fake.jobs.submit(f"{NAMES.sweep}_trial_0", _any_spec())
    fake.jobs.script(f"{NAMES.sweep}-a2", JobStatus.RUNNING)
    fake.jobs.submit_sweep(f"{NAMES.sweep}-a2", sweep().spec())
    fake.jobs.submit("someone-elses-job", _any_spec())
    with caplog.at_level(logging.WARNING):
        done = cleanup(fake, NAMES)
    assert sorted(done["canceled_jobs"]) == sorted([f"{NAMES.sweep}_trial_0", f"{NAMES.sweep}-a2"])
    assert [name for name, _ in fake.jobs.canceled] == done["canceled_jobs"]
    assert f"Job {NAMES.sweep}-a2 was still running on the fake backend when the run ended: canceling it" in caplog.text


def test_a_retry_resumes_what_the_backend_can_recover_instead_of_submitting_anew(fake):
    """A local sweep whose controller died is resumed by ``jobs.recover``: the retry re-attaches to it."""
    from dataclasses import replace

    from mlrunway.backend.attempts import submit_or_reattach

    fake.jobs.script("swp", JobStatus.FAILED, error="sweep controller (pid 7) killed by SIGKILL")
    fake.jobs.submit_sweep("swp", sweep().spec())
    resumed = replace(fake.jobs.get("swp"), status=JobStatus.RUNNING, error=None)
    fake.jobs.recover = lambda name: resumed  # what LocalJobs.recover does for a killed sweep
    attempt = submit_or_reattach(fake.jobs, "swp", lambda n: pytest.fail(f"{n} must not be submitted"))
    assert attempt.action is Action.REATTACHED and attempt.job.status is JobStatus.RUNNING


# -- the team's own job ----------------------------------------------------------------------------------------
SIGNATURE = json.dumps({"inputs": [{"name": "features", "dtype": "float32", "shape": [None, 8]}]})
TOKENS = json.dumps({"inputs": [{"name": "tokens", "dtype": "int64", "shape": [None, None]}]})


def npy(array: Any) -> bytes:
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize(("files", "model_path", "problem"), [
    pytest.param({}, "outputs/model", "nothing is there", id="no-model"),
    pytest.param({"model/model.pt2": "x"}, "outputs/model", "signature.json is missing", id="no-signature"),
    pytest.param({"model/signature.json": '{"file": "model.onnx"}', "model/model.pt2": "x"}, "outputs/model",
                 "signature.json names 'model.onnx', which is not there", id="names-a-missing-file"),
    pytest.param({"model/signature.json": "{}", "model/model.pt2": "x"}, "outputs/weights", "nothing is there",
                 id="elsewhere"),
    pytest.param({"model/signature.json": '["model.pt2"]', "model/model.pt2": "x"}, "outputs/model",
                 "signature.json is list, not an object", id="not-an-object"),
])
def test_a_training_job_without_the_model_contract_fails_before_the_sweep(fake, files, model_path, problem):
    fake.jobs.output_files = files
    with pytest.raises(JobFailed, match=f"no model at {model_path}: {re.escape(problem)}"):
        train(defer_after_s=0, model_path=model_path).execute(context())


def test_a_model_in_a_named_output_passes_the_contract(fake):
    fake.jobs.output_files = {"model/signature.json": SIGNATURE, "model/model.pt2": "x"}
    job = {**tutorial_job("/data"), "outputs": {"model": {"type": "uri_folder"}}}
    job["command"] += " --output-dir ${{outputs.model}}"
    assert train(job=job, model_path="${{outputs.model}}", defer_after_s=0).execute(context())["status"] == "Completed"


def test_a_failed_preflight_is_the_first_line_of_the_tasks_own_log_and_starts_nothing(fake, capfd):
    def preflight(context: dict) -> None:
        raise check.fail("lr_min", "0.1 is not less than lr_max 0.01", "make lr_min < lr_max")

    capfd.readouterr()
    with pytest.raises(SpecError, match="lr_min: 0.1"):
        train(preflight=preflight, defer_after_s=0).execute(context())
    written = capfd.readouterr()
    first = next(line for line in (written.out + written.err).splitlines()  # the task logger's (structlog's)
                 if "TrainModelOperator" in line and "outside of the Task Runner" not in line)  # (a test's call)
    assert "PREFLIGHT FAILED, nothing was started: lr_min: 0.1 is not less than lr_max 0.01; make lr_min < lr_max" \
        in first
    assert fake.jobs.list() == []


def test_keyword_arguments_override_the_jobs_fields_and_reach_the_backend(fake):
    train(command="torchrun fit.py --lr ${{inputs.lr}}", inputs={"lr": 0.3}, tags={"team": "vision"},
          distribution={"type": "pytorch", "process_count_per_instance": 2}, defer_after_s=0).execute(context())
    spec = fake.jobs.spec(NAMES.train_job)
    assert spec.command == "torchrun fit.py --lr ${{inputs.lr}}" and dict(spec.inputs) == {"lr": 0.3}
    assert spec.distribution.process_count_per_instance == 2 and dict(spec.tags) == {"team": "vision"}
    assert spec.code == str(REPO / "training")  # kept from job=


def test_a_sweep_in_the_sdks_words_reaches_the_backend_as_a_spec(fake):
    task = sweep(search_space={**SPACE, "batch_size": {"type": "choice", "values": [16, 32]}},
                 early_termination={"type": "median_stopping", "evaluation_interval": 1, "delay_evaluation": 2},
                 trial={**tutorial_job("/data"), "inputs": {**tutorial_job("/data")["inputs"], "batch_size": 8},
                        "command": tutorial_job("/data")["command"] + " --batch-size ${{inputs.batch_size}}"})
    spec = task.spec()
    assert spec.search_space["batch_size"].values == (16, 32)
    assert spec.early_termination.type == "median_stopping" and spec.limits.max_total_trials == 4
    with pytest.raises(SpecError, match="search_space.batch_size.values: empty"):
        sweep(search_space={"batch_size": {"type": "choice", "values": []}}).spec()


def test_a_model_that_is_not_an_image_classifier_is_smoke_tested_with_its_sample_request(fake, tmp_path):
    """Azure's invoke(request_file=...): the request goes by header, then through traffic; no images needed."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "sample_request.json").write_text(json.dumps({"data": [[0.1] * 8]}))
    (code / "expected.json").write_text(json.dumps({"predictions": [0.8]}))
    fake.models.register("reg", REPO / "training" / "score.py")
    fake.endpoints.scorer = lambda payload, deployment: json.dumps({"predictions": [sum(payload["data"][0])]})
    deployed = DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="reg",
                                  model_version=1, code_dir=str(code), sample_request="sample_request.json",
                                  expected_response="expected.json", defer_after_s=1,
                                  poll_interval_s=0.001).execute(context())
    assert deployed["smoke_request"] == "sample_request.json" and deployed["smoke_answer"].startswith('{"predictions"')
    assert deployed["smoke_expected"] == '{"predictions": [0.8]}' and "(expected.json:" in deployed["smoke_matched"]
    assert [(d, p) for _, d, p in fake.endpoints.invocations] == [("blue", {"data": [[0.1] * 8]})] * 2
    assert fake.endpoints.get(NAMES.endpoint).traffic == {"blue": 100}


def test_a_long_smoke_answer_is_shown_whole_up_to_a_stated_size_then_cut_with_a_marker(fake, tmp_path):
    """Before: the log line and the XCom held the answer's first 200 characters, cut mid-number, unmarked."""
    from mlrunway.deploy.smoke import SHOWN_CHARS

    code = tmp_path / "code"
    code.mkdir()
    (code / "sample_request.json").write_text(json.dumps({"data": [[0.1] * 8]}))
    answer = {"predictions": [0.123456789 + k for k in range(60)]}
    (code / "expected.json").write_text(json.dumps(answer))
    fake.models.register("reg", REPO / "training" / "score.py")
    fake.endpoints.scorer = lambda payload, deployment: json.dumps(answer)
    deployed = DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="reg",
                                  model_version=1, code_dir=str(code), sample_request="sample_request.json",
                                  expected_response="expected.json", defer_after_s=1,
                                  poll_interval_s=0.001).execute(context())
    whole = json.dumps(answer)
    assert len(whole) > SHOWN_CHARS and len(deployed["smoke_answer"]) <= SHOWN_CHARS
    head, cut, tail = re.match(r"^(.*) \.\.\. \[(\d+) characters cut\] \.\.\. (.*)$", deployed["smoke_answer"]).groups()
    assert whole.startswith(head) and whole.endswith(tail) and len(head) + int(cut) + len(tail) == len(whole)


def test_a_sample_request_the_endpoint_answers_with_no_json_fails_and_leaves_traffic(fake, tmp_path):
    (tmp_path / "req.json").write_text("{}")
    (tmp_path / "score.py").write_text("def init():\n    pass\n\ndef run(raw):\n    return {}\n")
    fake.models.register("reg", REPO / "training" / "score.py")
    fake.endpoints.scorer = lambda payload, deployment: "<html>oops</html>"
    with pytest.raises(EndpointError, match="smoke test: the endpoint answered '<html>oops</html>' to req.json"):
        DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="reg",
                           model_version=1, code_dir=str(tmp_path), sample_request=str(tmp_path / "req.json"),
                           defer_after_s=1, poll_interval_s=0.001).execute(context())
    assert fake.endpoints.get(NAMES.endpoint).traffic in ({}, {"blue": 0})


def test_azure_placeholders_survive_jinja_while_airflow_templates_render(fake):
    """``${{inputs.lr}}`` is azure-ai-ml's, ``{{ params.epochs }}`` Airflow's: both in one job, as a DAG writes it."""
    task = train(job={"command": "python fit.py --epochs {{ params.epochs }} --lr ${{inputs.lr}} --out ${{ outputs.model }}",
                      "code": "{{ params.code }}", "inputs": {"lr": 0.1}})
    rendered = task.render_template(task.job, {"params": {"epochs": 3, "code": "/src"}})
    assert rendered["command"] == "python fit.py --epochs 3 --lr ${{inputs.lr}} --out ${{ outputs.model }}"
    assert rendered["code"] == "/src"
    assert task.render_template("${{outputs.model}}", {}) == "${{outputs.model}}"


def test_a_librarys_huge_message_leaves_the_task_a_screen_long(fake, monkeypatch):
    """A recursive copy's OSError carries its whole path: the task's exception, as Airflow logs it, is short."""
    from mlrunway.errors import SCREEN_CHARS

    def refuse(name: str, spec: Any) -> Any:
        raise OSError(36, "File name too long", "/code/.workspace" * 600_000)

    monkeypatch.setattr(fake.jobs, "submit", refuse)
    with pytest.raises(OSError, match="File name too long") as raised:
        train().execute(context())
    assert len(str(raised.value)) <= SCREEN_CHARS


def test_a_resumed_task_s_huge_message_is_a_screen_long_too(fake):
    """Whichever method a deferral resumes in (execute_complete, execute_complete), its exceptions are shortened."""
    from mlrunway.errors import SCREEN_CHARS
    from mlrunway.operators._base import MlrunwayWaitingOperator

    class Resumed(MlrunwayWaitingOperator):
        def later(self, context: Any, event: dict[str, Any]) -> None:
            raise OSError(36, "File name too long", event["path"] * 600_000)

    with pytest.raises(OSError, match="File name too long") as raised:
        Resumed(task_id="resumed").resume_execution("later", {"event": {"path": "/code/.workspace"}}, context())
    assert len(str(raised.value)) <= SCREEN_CHARS


# -- the deployment seam: a strategy is one class and one registry line; the deploy task only hosts it ----------
class Straight:
    """A strategy of the test's own: `green` provisioned and put at 100% at once, then a quiet minute's window
    before it reports; no smoke test, no gate."""

    name: ClassVar[str] = "straight"

    def validate(self, backend: Backend | None, deployment: Mapping[str, Any]) -> None:
        if deployment.get("sample_request"):
            raise SpecError("deployment.sample_request: the straight strategy sends no request; leave it empty")

    def settings(self, backend: Backend, given: Mapping[str, Any]) -> None:
        return None  # no settings of its own

    def start(self, backend: Backend, request: DeployRequest) -> Step:
        backend.endpoints.create_or_update(request.endpoint, request.endpoint_settings)
        started = backend.endpoints.begin_create_or_update_deployment(request.endpoint, "green", request.settings)
        return Provisioning(state={"at": "green"}, endpoint=request.endpoint, deployment="green",
                            operation=started.operation)

    def resume(self, backend: Backend, request: DeployRequest, state: dict[str, Any], event: Resumed) -> Step:
        if state["at"] == "green":
            event.provisioned(f"deployment {request.endpoint}/green", request.max_wait_s)
            backend.endpoints.set_traffic(request.endpoint, {"green": 100})
            return Window(state={"at": "watched"}, seconds=0.01)
        return Done(result={"endpoint": request.endpoint, "traffic": backend.endpoints.get(request.endpoint).traffic})

    def abandon(self, backend: Backend, request: DeployRequest) -> None:
        backend.endpoints.delete_deployment(request.endpoint, "green")

    def clean_up(self, backend: Backend, endpoint: str, run_key: str) -> dict[str, Any]:
        backend.endpoints.set_traffic(endpoint, {})
        return {"green_deleted": backend.endpoints.delete_deployment(endpoint, "green")}


def test_a_new_strategy_is_one_class_and_one_registry_line(fake, monkeypatch):
    monkeypatch.setitem(STRATEGIES, Straight.name, Straight)
    fake.models.register("m", REPO / "training" / "score.py")
    task = DeployBlueOperator(task_id="deploy", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=1, code_dir=str(REPO / "training"), strategy="straight",
                              deferrable=False, poll_interval_s=0.001)
    result = task.execute(context())
    assert result.pop("model_card").endswith("model-cards/m/1/card.html")  # the host writes the card, any strategy
    assert result == {"endpoint": NAMES.endpoint, "traffic": {"green": 100}}
    assert sorted(fake.endpoints.endpoints[NAMES.endpoint].deployments) == ["green"]
    chosen = strategy("straight")  # what preflight and the cleanup task call, through the same registry
    with pytest.raises(SpecError, match="the straight strategy sends no request"):
        chosen.validate(fake, {"code_dir": str(REPO / "training"), "sample_request": "r.json"})
    assert chosen.clean_up(fake, NAMES.endpoint, NAMES.run_key) == {"green_deleted": True}


def test_an_unknown_strategy_is_named_with_the_ones_there_are(fake):
    task = DeployBlueOperator(task_id="deploy", backend_conn_id="fake", name_prefix="fk", model_name="m",
                              model_version=1, code_dir=str(REPO / "training"), strategy="canary-by-header")
    with pytest.raises(SpecError, match="strategy: 'canary-by-header' is not supported; use one of blue, "
                                        "champion_challenger"):
        task.execute(context())


@pytest.mark.parametrize(("files", "export", "message"), [
    pytest.param({"model/signature.json": TOKENS}, None,
                 r"signature.json inputs\[0\].dtype: int64 input 'tokens' has no safe random values .* pass "
                 r"export.inputs_file", id="int-input-without-an-inputs-file"),
    pytest.param({"model/signature.json": TOKENS}, {"inputs_file": "ids.npy"},
                 r"export.inputs_file: .*ids.npy does not exist", id="inputs-file-missing"),
    pytest.param({"model/signature.json": TOKENS, "model/ids.npy": "float32"}, {"inputs_file": "ids.npy"},
                 r"inputs\[0\].dtype: int64, and export.inputs_file ids.npy holds float32", id="inputs-file-cast"),
    pytest.param({"model/signature.json": json.dumps({"inputs": [{"name": "x", "dtype": "float16", "shape": [None, 2]}]})},
                 {"atol": None}, r"float16 is refused by default", id="float16-default-tolerance"),
    pytest.param({"model/signature.json": json.dumps({"inputs": [{"name": "x", "shape": [None, "8"]}]})}, None,
                 r"inputs\[0\].shape: \[None, '8'\] is not a list of sizes", id="bad-shape"),
])
def test_the_train_task_refuses_a_model_export_would_refuse_before_the_sweep(fake, files, export, message):
    """Static checks only (the worker has no torch): the signature against export's rules, the inputs file from
    its header, with export's own settings; before, these failed at export after the whole sweep."""
    import numpy as np

    arrays = {"float32": npy(np.zeros((4, 7), np.float32))}
    fake.jobs.output_files = {"model/model.pt2": "x", **{k: arrays.get(v, v) for k, v in files.items()}}
    with pytest.raises(SpecError, match=message):
        train(defer_after_s=0, export=export).execute(context())
    assert fake.jobs.get(NAMES.train_job).status is JobStatus.COMPLETED  # the job ran; nothing after it did


def test_the_train_task_passes_a_model_whose_inputs_file_matches_and_a_float16_model_with_a_tolerance(fake):
    import numpy as np

    fake.jobs.output_files = {"model/signature.json": TOKENS, "model/model.pt2": "x",
                              "model/ids.npy": npy(np.ones((4, 7), np.int64))}
    assert train(defer_after_s=0, export={"inputs_file": "ids.npy", "opset": 18}).execute(context())["status"] == \
        "Completed"
    fake.jobs.output_files = {"model/model.pt2": "x", "model/signature.json": json.dumps(
        {"inputs": [{"name": "x", "dtype": "float16", "shape": [None, 2]}]})}
    assert train(defer_after_s=0, export={"rtol": 1e-2}, name_prefix="fk2").execute(context())["status"] == "Completed"


def test_the_train_task_fails_when_its_job_never_logged_the_sweeps_metric_naming_what_it_logged(fake):
    logged = {"val_loss": (0.5, 0.4), "val_acc": (0.8,)}
    fake.jobs.logged = {NAMES.train_job: logged, RunNames.of(DAG, RUN, "fk2").train_job: logged}
    with pytest.raises(JobFailed, match=rf"job {NAMES.train_job}: it logged no 'val_f1' \(it logged: val_acc, "
                                        r"val_loss\); the sweep ranks its trials by it"):
        train(defer_after_s=0, required_metrics=["val_f1"]).execute(context())
    result = train(defer_after_s=0, required_metrics=["val_acc"], name_prefix="fk2").execute(context())
    assert result["status"] == "Completed"
    with pytest.raises(SpecError, match=r"required_metrics: 'val_f1' is not a list of metric names"):
        train(defer_after_s=0, required_metrics="val_f1", name_prefix="fk3").execute(context())


def test_a_run_deployed_before_names_were_salted_finds_its_endpoint_and_cleanup_deletes_it(fake, monkeypatch):
    """Issue 57, 2: a run in flight across the upgrade neither deploys again under the new name nor leaks the
    endpoint it made under the old one; looked up by name, never by listing."""
    from mlrunway.pipeline import cleanup

    monkeypatch.setattr(fake, "endpoint_salt", "/subscriptions/s/resourcegroups/rg/providers/x/workspaces/w",
                        raising=False)
    names = RunNames.of(DAG, RUN, "fk", fake.endpoint_salt)
    assert names.endpoint != names.unsalted_endpoint == NAMES.endpoint
    deploy = DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="m",
                                model_version=1, code_dir=str(REPO / "training"))
    assert deploy.run_endpoint(context()) == names.endpoint  # a new run: the salted name
    fake.endpoints.create_or_update(names.unsalted_endpoint)  # what a try before the upgrade made
    assert deploy.run_endpoint(context()) == names.unsalted_endpoint
    assert cleanup(fake, names)["endpoint_deleted"] is True
    with pytest.raises(NotFound):
        fake.endpoints.get(names.unsalted_endpoint)


def test_a_completed_train_whose_log_copy_fails_succeeds_and_says_the_copy_was_skipped(fake, monkeypatch, capfd):
    """Issue 57, 1: a Run History 5xx on the log read after the job Completed failed the Train task."""
    from mlrunway.errors import Unavailable

    def unreadable(name):
        raise Unavailable("HTTP 503: the service is busy")

    monkeypatch.setattr(fake.jobs, "logs", unreadable)
    capfd.readouterr()
    assert train(defer_after_s=0).execute(context())["status"] == "Completed"
    written = capfd.readouterr()
    assert "could not be read (Unavailable: HTTP 503: the service is busy); its copy here was skipped" in \
        written.out + written.err


def test_cleanup_says_a_run_endpoint_is_kept_only_when_it_was_made(fake):
    """Issue 59, 5: a stable-endpoint run (no per-run endpoint) read "endpoint kept"."""
    from mlrunway.operators.cleanup import cleaned
    from mlrunway.pipeline import cleanup

    assert cleanup(fake, NAMES, delete_endpoint=False)["endpoint_kept"] is False
    assert cleaned(cleanup(fake, NAMES, delete_endpoint=False)).startswith("no endpoint to delete")
    fake.endpoints.create_or_update(NAMES.endpoint)
    assert cleanup(fake, NAMES, delete_endpoint=False)["endpoint_kept"] is True


def test_the_tasks_0_2_keywords_are_read_into_its_two_objects_with_a_warning_naming_them():
    """``smoke=`` and ``production=`` group the smoke test's and a stable endpoint's settings (the task takes 14
    arguments); 0.2.x's keywords are read into them until 0.4.0, with a FutureWarning that shows the new call."""
    with pytest.warns(FutureWarning, match=r"DeployBlueOperator\(sample_request=, endpoint_name=\) is read as smoke= "
                                           r"and production= until mlrunway 0\.4\.0: pass \{'smoke': \{'sample_request'"):
        old = DeployBlueOperator(task_id="deploy", model_name="m", model_version=1, code_dir="/c",
                                 sample_request="r.json", endpoint_name="digits-prod")
    new = DeployBlueOperator(task_id="deploy", model_name="m", model_version=1, code_dir="/c",
                             smoke={"sample_request": "r.json"}, production={"endpoint_name": "digits-prod"})
    assert (old.smoke, old.production) == (new.smoke, new.production) == ({"sample_request": "r.json"},
                                                                          {"endpoint_name": "digits-prod"})
    assert new.endpoint_name == "digits-prod"
    own = [p for p in inspect.signature(DeployBlueOperator.__init__).parameters if p not in ("self", "kwargs")]
    assert len(own) == 15, own
    stray = DeployBlueOperator(task_id="deploy", model_name="m", model_version=1, code_dir="/c",
                               production={"endpoint": "digits-prod"})
    with pytest.raises(SpecError, match=r"^deploy\.production\.endpoint: is not a production endpoint setting; use "
                                        "endpoint_name, "):
        stray.chosen()


# -- export as a job ----------------------------------------------------------------------------------------------
def export(**kwargs: Any):
    from mlrunway.operators import ExportOnnxOperator

    return ExportOnnxOperator(**{"task_id": "export_onnx", "backend_conn_id": "fake", "name_prefix": "fk",
                                 "model_name": "fk-model", "model_version": 1, "poll_interval_s": 0.01, **kwargs})


def registered(fake: FakeBackend, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "signature.json").write_text(json.dumps({"inputs": [{"name": "x", "shape": [None, 4]}]}))
    (folder / "model.pt2").write_text("a torch.export program")
    fake.models.register("fk-model", folder)


def test_export_runs_as_a_job_whose_onnx_output_is_registered_with_its_parity(fake, tmp_path):
    """The worker builds the job (the exporter's code folder, the model version's folder as an input), reads its
    parity.json and registers its onnx output: no model is downloaded here."""
    registered(fake, tmp_path)
    result = export(data_dir="/data/digits", atol=1e-3, defer_after_s=0).execute(context())
    assert result["job_name"] == NAMES.export_job and (result["model_name"], result["model_version"]) == ("fk-model-onnx", 1)
    spec = fake.jobs.spec(NAMES.export_job)
    assert spec.command.startswith("python -m mlrunway_export.job --model ${{inputs.model}}")
    assert "--atol 0.001" in spec.command and "--rtol" not in spec.command and "--data-dir ${{inputs.data}}" in spec.command
    assert spec.inputs["model"].path == fake.models.get("fk-model", 1).path and spec.inputs["data"].path == "/data/digits"
    assert spec.tags["mlrunway.role"] == "export" and set(spec.outputs) == {"onnx", "report"}
    model = fake.models.get("fk-model-onnx", 1)
    assert model.properties["source_job"] == NAMES.export_job and model.properties["parity"] == result["parity"]
    assert json.loads((Path(model.path) / "signature.json").read_text())["format"] == "onnx"
    # A retry (the same settings) re-attaches to the completed job and finds the version it registered.
    again = export(data_dir="/data/digits", atol=1e-3).execute(context())
    assert again["model_version"] == 1 and list(fake.jobs.records) == [NAMES.export_job]


@pytest.mark.parametrize(("verdict", "raises", "match"), [
    pytest.param({"passed": False, "error": "ParityError", "message": "onnx parity: worst output used 4.2x the tolerance"},
                 ParityError, "export job fk-.*-export: onnx parity: worst output used 4.2x", id="gate"),
    pytest.param({"passed": False, "error": "SpecError", "message": "signature.json inputs[0].dtype: 'int8' is not"},
                 SpecError, "signature.json inputs\\[0\\].dtype", id="model"),
    pytest.param({"passed": False, "error": "environment", "missing": ["onnx", "onnxruntime"],
                  "message": "the export job's environment lacks onnx, onnxruntime"}, SpecError,
                 r"^export.environment \(ExportOnnxOperator\(environment=\), or the connection's export_environment\): "
                 r"export job .* lacks onnx, onnxruntime; name an environment", id="environment"),
])
def test_a_refused_export_is_the_jobs_verdict_raised_for_good_and_registers_nothing(fake, tmp_path, verdict, raises,
                                                                                     match):
    """A gate that fails is the job's answer (it completed): the task raises it, not retried, and registers nothing."""
    from airflow.sdk.exceptions import AirflowFailException

    registered(fake, tmp_path)
    fake.jobs.export_verdict = verdict
    with pytest.raises(raises, match=match) as raised:
        export(retries=2).execute(context())
    assert isinstance(raised.value, AirflowFailException)
    assert fake.jobs.get(NAMES.export_job).status is JobStatus.COMPLETED and fake.models.list("fk-model-onnx") == []


def test_a_bad_tolerance_or_environment_fails_before_the_export_job(fake, tmp_path):
    registered(fake, tmp_path)
    with pytest.raises(SpecError, match=r"onnx parity atol: -1 is not a number >= 0"):
        export(atol=-1).execute(context())
    with pytest.raises(SpecError, match=r"^export.environment: 'x+ \.\.\. \[261 characters cut\] \.\.\. x+' is not an "
                                        r"environment name; name an environment"):  # a long value echoed shortened
        export(environment="x" * 300).execute(context())
    assert fake.jobs.records == {}


def test_cleanup_cancels_a_running_export_job(fake, tmp_path):
    registered(fake, tmp_path)
    fake.jobs.script(NAMES.export_job, JobStatus.RUNNING)
    with pytest.raises(TaskDeferred):
        export(defer_after_s=0).execute(context())
    done = CleanupOperator(task_id="cleanup", backend_conn_id="fake", name_prefix="fk").execute(context())
    assert done["canceled_jobs"] == [NAMES.export_job]
    assert [name for name, _ in fake.jobs.canceled] == [NAMES.export_job]


def test_a_missing_score_py_for_the_reference_answer_fails_before_anything_is_provisioned(fake, tmp_path):
    """No expected_response: the reference job needs the team's score.py, checked as the deploy task starts it."""
    (tmp_path / "req.json").write_text("{}")
    fake.models.register("reg", REPO / "training" / "score.py")
    with pytest.raises(SpecError, match=r"deploy.expected_response: is missing, and there is no .*score.py to compute"):
        DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="reg",
                           model_version=1, code_dir=str(tmp_path), sample_request="req.json",
                           defer_after_s=1, poll_interval_s=0.001).execute(context())
    assert fake.endpoints.endpoints == {} and fake.jobs.records == {}


def test_the_reference_job_starts_before_provisioning_and_cleanup_cancels_it_while_it_runs(fake, tmp_path):
    (tmp_path / "req.json").write_text('{"x": 1}')
    (tmp_path / "score.py").write_text("def init():\n    pass\n\ndef run(raw):\n    return {}\n")
    fake.models.register("reg", REPO / "training" / "score.py")
    fake.endpoints.scorer = lambda payload, deployment: '{"y": 2}'
    fake.jobs.script(NAMES.reference_job, JobStatus.QUEUED, JobStatus.RUNNING)
    fake.endpoints.provisioning["blue"] = [ProvisioningState.CREATING]
    task = DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="reg",
                              model_version=1, code_dir=str(tmp_path), sample_request="req.json", defer_after_s=0,
                              poll_interval_s=0.001)
    with pytest.raises(TaskDeferred):
        task.execute(context())
    spec = fake.jobs.spec(NAMES.reference_job)
    assert spec.tags["mlrunway.role"] == "reference" and spec.inputs["code"].path == str(tmp_path.resolve())
    assert spec.inputs["request"].path == str((tmp_path / "req.json").resolve())
    done = CleanupOperator(task_id="cleanup", backend_conn_id="fake", name_prefix="fk").execute(context())
    assert NAMES.reference_job in done["canceled_jobs"]


def test_with_expected_response_no_reference_job_is_started(fake, tmp_path):
    (tmp_path / "req.json").write_text('{"x": 1}')
    (tmp_path / "expected.json").write_text('{"y": 2}')
    fake.models.register("reg", REPO / "training" / "score.py")
    fake.endpoints.scorer = lambda payload, deployment: '{"y": 2}'
    deployed = DeployBlueOperator(task_id="deploy_blue", backend_conn_id="fake", name_prefix="fk", model_name="reg",
                                  model_version=1, code_dir=str(tmp_path), sample_request="req.json",
                                  expected_response="expected.json", defer_after_s=1,
                                  poll_interval_s=0.001).execute(context())
    assert deployed["smoke_matched"].startswith("as expected (expected.json") and fake.jobs.records == {}


def test_a_rerun_after_a_refused_export_or_with_other_settings_submits_the_next_attempt(fake, tmp_path):
    """A refusal is the job's answer (Completed): a person mends the tolerance or the environment and clears the
    task; the re-run must ask again, not re-read the old refusal. One that passed with these settings re-attaches."""
    registered(fake, tmp_path)
    fake.jobs.export_verdict = {"passed": False, "error": "ParityError", "message": "worst output used 4.2x"}
    with pytest.raises(ParityError):
        export().execute(context())
    fake.jobs.export_verdict = FakeBackend().jobs.export_verdict  # the mended setting passes
    mended = export(atol=1e-3)
    assert mended.execute(context())["job_name"] == f"{NAMES.export_job}-a2"
    assert mended.attempt.describe().startswith(f"{NAMES.export_job} ended Completed (it refused: worst output")
    again = export(atol=1e-3)
    assert again.execute(context())["job_name"] == f"{NAMES.export_job}-a2" and again.attempt.action is Action.REATTACHED
    other = export(atol=1e-2)  # asked otherwise: the next attempt, its own ONNX version
    assert other.execute(context())["job_name"] == f"{NAMES.export_job}-a3"
    assert other.attempt.describe().startswith(f"{NAMES.export_job}-a2 ended Completed (it was asked with other settings)")
    assert [m.properties["source_job"] for m in fake.models.list("fk-model-onnx")] == [f"{NAMES.export_job}-a2",
                                                                                       f"{NAMES.export_job}-a3"]


def test_a_reference_job_is_asked_again_when_score_py_failed_there_or_changed_since(fake, tmp_path):
    from mlrunway.backend.types import DeploymentSettings
    from mlrunway.deploy.smoke import expected_answer, start_reference

    (tmp_path / "req.json").write_text('{"x": 1}')
    (tmp_path / "score.py").write_text("def init():\n    pass\n")
    fake.models.register("reg", REPO / "training" / "score.py")
    settings = DeploymentSettings(model="reg:1", code_dir=str(tmp_path))
    fake.endpoints.scorer = lambda payload, deployment: (_ for _ in ()).throw(RuntimeError("score.py: init failed"))
    assert start_reference(fake, "ref", settings, tmp_path / "req.json") == "ref"
    with pytest.raises(SpecError, match="could not compute it in the reference job ref"):
        expected_answer(fake, "ref", settings, tmp_path / "req.json")
    fake.endpoints.scorer = lambda payload, deployment: '{"y": 2}'  # mended
    assert start_reference(fake, "ref", settings, tmp_path / "req.json") == "ref-a2"
    assert expected_answer(fake, "ref", settings, tmp_path / "req.json")[0] == {"y": 2}
    assert start_reference(fake, "ref", settings, tmp_path / "req.json") == "ref-a2"  # the same question: re-attach
    (tmp_path / "score.py").write_text("def init():\n    pass\n# changed\n")
    assert start_reference(fake, "ref", settings, tmp_path / "req.json") == "ref-a3"  # the code changed: ask again


def test_where_jobs_run_in_the_backends_own_python_a_lacking_environment_says_to_install_there(fake, tmp_path,
                                                                                                monkeypatch):
    from dataclasses import replace

    from mlrunway.local.backend import LocalBackend

    assert LocalBackend.capabilities.job_environments is False  # the local backend's jobs run in its own Python
    monkeypatch.setattr(fake, "capabilities", replace(fake.capabilities, job_environments=False))
    registered(fake, tmp_path)
    fake.jobs.export_verdict = {"passed": False, "error": "environment", "missing": ["onnx"],
                                "message": "the export job's environment lacks onnx"}
    with pytest.raises(SpecError, match=r"^the fake backend's Python: export job .* lacks onnx; install torch \(first, "
                                        r"from PyTorch's index\) and \"mlrunway\[local\]\" where the fake backend runs"):
        export().execute(context())


# -- the budget ------------------------------------------------------------------------------------------------
def test_a_train_job_that_leaves_the_sweep_nothing_fails_train_naming_the_budget(fake):
    fake.jobs.usages[NAMES.train_job] = Usage(started=0.0, ended=3240.0)  # 0.9 core-hours: 90% of the budget
    with pytest.raises(JobFailed, match=r"^budget: Train spent 0\.9 compute-hours of 1 compute-hours, leaving the "
                                        r"sweep nothing \(the reserve of 10% is export's"):
        train(defer_after_s=0, budget={"max_compute_hours": 1}).execute(context())


def test_the_sweep_may_spend_the_budget_less_its_reserve_and_what_train_spent(fake):
    fake.jobs.usages[NAMES.train_job] = Usage(started=0.0, ended=1800.0)  # 0.5 core-hours
    train(defer_after_s=0, budget='{"max_compute_hours": 2}').execute(context())
    sweep(defer_after_s=0, budget={"max_compute_hours": 2}).execute(context())
    allowed = fake.jobs.spec(NAMES.sweep).budget
    assert allowed.limit == pytest.approx(1.3) and allowed.measure == "hours"
    assert allowed.basis == "2 compute-hours less the 10% reserve and 0.5 compute-hours spent before the sweep"


def test_a_sweep_its_budget_stopped_ends_the_task_with_what_it_completed_but_any_other_cancel_fails_it(fake):
    task = sweep(defer_after_s=0)
    task.execute(context())
    record = fake.jobs.records[NAMES.sweep]
    record.script = []  # it reads as set here
    event = {"job_name": NAMES.sweep, "outcome": "ended", "status": "Canceled", "error": "canceled by user"}
    record.info = replace(record.info, status=JobStatus.CANCELED, error="canceled by user")
    with pytest.raises(JobFailed, match="ended Canceled: canceled by user"):
        task.execute_complete(context(), event)
    stop = "stopped by budget: spent 5.1 USD of 5 USD"
    record.info = replace(record.info, error=stop, budget_stop=stop)
    assert task.execute_complete(context(), {**event, "error": stop})["sweep_name"] == NAMES.sweep


def test_a_budget_is_refused_before_any_job_when_the_backend_cannot_price_the_job(fake):
    with pytest.raises(SpecError, match=r"^budget: max_cost 5 needs the rate of every job, and the job runs on this "
                                        r"machine, whose rate is unknown; set the connection's local_rate"):
        train(defer_after_s=0, budget={"max_cost": 5}).execute(context())
    assert fake.jobs.records == {}
