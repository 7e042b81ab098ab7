"""A stable endpoint on the local backend, real servers and real models: three runs in a row (created, promoted,
held), and a faulty challenger rolled back at a traffic step while a client sends steady load through the whole
rollout. Models of known quality are the session's trained model with its weights perturbed (seeded)."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mlrunway.airflow.summary import run_results
from mlrunway.errors import EndpointError, NotFound
from mlrunway.local.backend import LocalBackend
from mlrunway.local.processes import marked, wait_gone
from mlrunway.operators import CleanupOperator, DeployBlueOperator
from tests.conftest import REPO
from tests.operators.test_operators_on_fake import TaskInstance

pytestmark = pytest.mark.slow
ENDPOINT = "digits-prod"


def perturbed(onnx_model: Path, out: Path, noise: float) -> Path:
    """A copy of the model whose weights carry Gaussian noise of ``noise`` times each tensor's std."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    shutil.copytree(onnx_model, out)
    model = onnx.load(str(out / "model.onnx"))
    rng = np.random.default_rng(0)
    for tensor in model.graph.initializer:
        array = numpy_helper.to_array(tensor)
        if array.dtype == np.float32 and array.size > 1:
            array = array + rng.normal(0, noise * float(array.std() or 1), array.shape).astype(np.float32)
            tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    onnx.save(model, str(out / "model.onnx"))
    return out


@pytest.fixture
def backend(tmp_path, monkeypatch, onnx_model):
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    local = LocalBackend.at(tmp_path / "ws")
    for noise in (0.6, 0.0, 3.0):  # versions 1 (fair), 2 (the trained model, better), 3 (clearly worse)
        local.models.register("digits", perturbed(onnx_model, tmp_path / f"noise-{noise}", noise))
    yield local
    for state in local.endpoints.list():
        local.endpoints.delete(state.name)


def context(run_id: str) -> dict[str, Any]:
    run_type = run_id.split("__")[0]  # as Airflow names runs: manual__..., backfill__...
    return {"dag": SimpleNamespace(dag_id="prod"), "run_id": run_id, "ti": TaskInstance(),
            "dag_run": SimpleNamespace(run_type=run_type),
            "outlet_events": defaultdict(lambda: SimpleNamespace(add=lambda *a, **k: None))}


def deploy(digits: Path, version: int, run_id: str, endpoint: str = ENDPOINT, model: str = "digits",
           **kwargs: Any) -> dict:
    task = DeployBlueOperator(**{"task_id": "deploy", "model_name": model, "model_version": version,
                                 "code_dir": str(REPO / "training"), "data_dir": str(digits), "endpoint_name": endpoint,
                                 "workers": 1, "deferrable": False, "poll_interval_s": 0.2, **kwargs})
    try:
        return task.execute(context(run_id))
    finally:
        CleanupOperator(task_id="cleanup", endpoint_name=endpoint).execute(context(run_id))


ONE_IMAGE = json.dumps({"data": [[[[0.0] * 8] * 8]]}).encode()


@contextlib.contextmanager
def steady_load(backend: Any, limit_s: float = 120, endpoint: str = ENDPOINT) -> Iterator[list[tuple[int, str]]]:
    """A client on the endpoint's scoring URI for the block, about 25 requests a second (at most ``limit_s``):
    each window of a rollout has live evidence, as a production endpoint's has. The URI and key come from the
    backend's endpoint contract (``get``, ``get_keys``), read again after a request gets no answer or a 401 (a
    server restarted elsewhere). Yields the (status, deployment) answers; 0 for none (the server down)."""
    answers: list[tuple[int, str]] = []
    stop = threading.Event()

    def client() -> None:
        deadline, target = time.monotonic() + limit_s, None
        while not stop.wait(0.04) and time.monotonic() < deadline:
            try:
                target = target or (backend.endpoints.get(endpoint).scoring_uri,
                                    backend.endpoints.get_keys(endpoint)["primary"])
            except NotFound:
                continue
            request = urllib.request.Request(target[0], data=ONE_IMAGE, method="POST", headers={
                "Authorization": f"Bearer {target[1]}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    answers.append((response.status, response.headers.get("azureml-model-deployment", "")))
            except urllib.error.HTTPError as exc:
                answers.append((exc.code, exc.headers.get("azureml-model-deployment", "")))
                target = None if exc.code == 401 else target
            except OSError:
                answers.append((0, ""))
                target = None

    load = threading.Thread(target=client)
    load.start()
    try:
        yield answers
    finally:
        stop.set()
        load.join()


def test_three_scheduled_runs_create_promote_and_hold_and_one_deployment_serves_after_each(backend, digits):
    quick = {"rollout": {"steps": [50, 100], "window_s": 4}}  # judged: the 2 s past the metrics lag
    results = [deploy(digits, 1, "manual__1", **quick)]
    uri = backend.endpoints.get(ENDPOINT).scoring_uri
    server = marked(backend.endpoints.state(ENDPOINT).token)
    for process in server:  # the whole server dies, as in a reboot
        process.kill()
    wait_gone(server, 10.0)
    with steady_load(backend):
        results += [deploy(digits, version, f"manual__{version}", **quick) for version in (2, 3)]
    assert backend.endpoints.get(ENDPOINT).scoring_uri == uri  # recovered on its port before the challenger came
    assert [r["decision"] for r in results] == ["created", "promoted", "held"]
    assert results[1]["gate"]["challenger"] > results[1]["gate"]["champion"]  # accuracy on test/, through the endpoint
    assert results[1]["gate"]["samples"] == len(list((digits / "test").rglob("*.png")))
    assert results[2]["gate"]["challenger"] < results[2]["gate"]["champion"] - 0.2
    assert [r["live"] for r in results] == [{"deployment": "blue", "model": "digits:1"},
                                            {"deployment": "green", "model": "digits:2"},
                                            {"deployment": "green", "model": "digits:2"}]
    assert [d.name for d in backend.endpoints.list_deployments(ENDPOINT)] == ["green"]
    assert backend.endpoints.get(ENDPOINT).traffic == {"green": 100}
    assert backend.models.alias("digits", "production").version == 2
    assert backend.models.alias("digits", "previous").version == 1


def test_a_backfill_of_two_past_intervals_evaluates_both_and_changes_nothing_that_serves(backend, digits):
    deploy(digits, 1, "manual__1")
    backfills = [deploy(digits, version, f"backfill__2026-11-{day}T00:00:00+00:00")
                 for version, day in ((2, "08"), (3, "15"))]
    assert [b["decision"] for b in backfills] == ["skipped", "held"]  # 2 is better but a backfill; 3 is worse
    assert "a backfill run never moves production" in backfills[0]["reason"]
    assert all(b["gate"]["samples"] == 360 and b["live"] == {"deployment": "blue", "model": "digits:1"}
               for b in backfills)
    assert backend.endpoints.get(ENDPOINT).traffic == {"blue": 100}
    assert [d.name for d in backend.endpoints.list_deployments(ENDPOINT)] == ["blue"]
    assert backend.models.alias("digits", "production").version == 1


FAULTY = '''
import importlib.util
import itertools
import json
import pathlib

_spec = importlib.util.spec_from_file_location("example_score", pathlib.Path(__file__).with_name("score.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)
_count = itertools.count()
init, _run = _base.init, _base.run


def run(raw_data):
    """Batches are fine; every third single-image request fails (a bug only live traffic meets)."""
    if len(json.loads(raw_data).get("data", [])) == 1 and next(_count) % 3 == 0:
        raise RuntimeError("challenger bug on a single image")
    return _run(raw_data)
'''


def test_a_faulty_challenger_is_rolled_back_at_a_step_under_steady_load(backend, digits, tmp_path):
    deploy(digits, 1, "manual__1")
    faulty = shutil.copytree(REPO / "training", tmp_path / "faulty")
    (faulty / "faulty_score.py").write_text(FAULTY)
    with steady_load(backend, limit_s=60) as answers:
        time.sleep(2)  # the champion's baseline
        with pytest.raises(EndpointError, match=r"rolled_back: .*watched: \d+ errors in \d+ requests .* error rate"):
            deploy(digits, 2, "manual__2", code_dir=str(faulty), scoring_script="faulty_score.py",
                   rollout={"steps": [25, 50, 100], "window_s": 5})
        time.sleep(1)  # load after the rollback
    failed = [(status, slot) for status, slot in answers if status != 200]
    assert len(answers) > 50 and failed, answers[-5:]  # a steady client: about 25 a second, until after the rollback
    assert {slot for _, slot in failed} == {"green"}, failed  # only the challenger's own share failed
    assert backend.endpoints.get(ENDPOINT).traffic == {"blue": 100}
    assert [d.name for d in backend.endpoints.list_deployments(ENDPOINT)] == ["blue"]
    assert answers[-1] == (200, "blue")


SHIFTED = FAULTY.split("\n\ndef run")[0] + '''

def run(raw_data):
    """Batches are fine; a single image gets the next class's label, without an error (a bug only live traffic
    meets, and only a comparison of answers sees)."""
    answer = _run(raw_data)
    if len(json.loads(raw_data).get("data", [])) == 1 and isinstance(answer, dict):
        for prediction in answer["predictions"]:
            prediction["label"] = str((int(prediction["label"]) + 1) % 10)
    return answer
'''


def test_a_challenger_whose_answers_disagree_in_the_mirror_window_is_held_before_any_traffic_moves(
        backend, digits, tmp_path):
    deploy(digits, 1, "manual__1")
    shifted = shutil.copytree(REPO / "training", tmp_path / "shifted")
    (shifted / "shifted_score.py").write_text(SHIFTED)
    with steady_load(backend, limit_s=60) as answers:
        result = deploy(digits, 2, "manual__2", code_dir=str(shifted), scoring_script="shifted_score.py",
                        rollout={"steps": [100], "window_s": 4, "mirror_percent": 50, "mirror_window_s": 4,
                                 "min_requests": 10, "shadow_keys": ["label"], "max_disagreement": 0.05})
    assert result["decision"] == "held", result["reason"]  # better on the gate's batches, wrong on live singles
    assert "shadow: the challenger disagreed with the champion on" in result["reason"]
    [window] = result["windows"]
    compared = window["challenger"]["shadow"]
    assert window["phase"] == "mirror" and window["held"] and compared["compared"] >= 10
    assert compared["agreed"] == 0 and compared["disagreement"] == 1.0 and compared["examples"]
    assert compared["champion_p50_ms"] > 0 and compared["challenger_p50_ms"] > 0
    assert {slot for status, slot in answers} == {"blue"} and {status for status, _ in answers} == {200}
    assert backend.endpoints.get(ENDPOINT).traffic == {"blue": 100}
    assert backend.models.alias("digits", "production").version == 1


@pytest.mark.e2e
def test_under_airflow_promotions_and_a_rollback_are_asset_events_and_a_held_run_emits_none(
        airflow_db, backend, digits, monkeypatch):
    """dags/deploy_model.py run four times, its waits deferred as under a scheduler: versions 1 (created), 2
    (promoted), 3 (held), then ``rollback_to=previous`` (version 1 back through the staged rollout). Each change of
    the live model is an event of the endpoint's asset with the model and decision, a held run adds none, and each
    event queues a run of dags/batch_scoring.py, which is scheduled on that asset."""
    import sys

    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    sys.path.insert(0, str(REPO / "dags"))
    monkeypatch.setenv("MLRUNWAY_ENDPOINT_NAME", ENDPOINT)
    from deploy_model import dag

    def events() -> tuple[list[dict], int]:
        with create_session() as session:
            asset = session.query(AssetModel).filter(AssetModel.uri == f"mlrunway://endpoints/{ENDPOINT}").one_or_none()
            if asset is None:
                return [], 0
            rows = session.query(AssetEvent).filter(AssetEvent.asset_id == asset.id).order_by(AssetEvent.id).all()
            queued = session.query(AssetDagRunQueue).filter(AssetDagRunQueue.asset_id == asset.id,
                                                            AssetDagRunQueue.target_dag_id == "batch_scoring").count()
            return [row.extra for row in rows], queued

    common = {"endpoint_name": ENDPOINT, "model_name": "digits", "data_dir": str(digits),
              "rollout": {"steps": [50, 100], "window_s": 4}}
    seen, decisions, queued = [], [], []
    for conf in ({"model_version": 1}, {"model_version": 2}, {"model_version": 3}, {"rollback_to": "previous"}):
        with create_session() as session:  # batch_scoring unpaused (a paused DAG is never queued), its queue empty
            session.query(DagModel).filter(DagModel.dag_id == "batch_scoring").update({"is_paused": False})
            session.query(AssetDagRunQueue).delete()
        with steady_load(backend):
            run = dag.test(run_conf={**common, **conf})
        assert str(run.state) == "success"
        decisions.append(run_results(dag.dag_id, run.run_id)["deploy_blue"]["decision"])
        seen.append([e["decision"] for e in events()[0]])
        queued.append(events()[1])
    assert decisions == ["created", "promoted", "held", "promoted"]
    assert seen == [["created"], ["created", "promoted"], ["created", "promoted"], ["created", "promoted", "promoted"]]
    assert [e["model"] for e in events()[0]] == ["digits:1", "digits:2", "digits:1"]
    assert queued[1:] == [1, 0, 1], "batch_scoring is queued after each change of production, not after held"
    assert backend.endpoints.get(ENDPOINT).traffic == {"blue": 100}  # version 1 back, in the slot that was free
    assert backend.models.alias("digits", "production").version == 1
    assert backend.models.alias("digits", "previous").version == 2

    # MLflow's own server over the workspace shows the registered model, its versions and aliases, each version
    # linked to its run where one made it (these were registered by the test: no run).
    from tests.mlrunway.local.test_registry_mlflow import mlflow_server

    with mlflow_server(backend.workspace.tracking_uri, backend.workspace.root) as remote:
        assert sorted(int(v.version) for v in remote.search_model_versions("name = 'digits'")) == [1, 2, 3]
        assert int(remote.get_model_version_by_alias("digits", "production").version) == 1
        assert {a: int(v) for a, v in remote.get_registered_model("digits").aliases.items()} == {
            "production": 1, "previous": 2}
    # Each version that reached the endpoint has a model card whose history follows the decisions.
    from mlrunway.deploy import card
    from mlrunway.ledger.reports import CARDS

    histories = {v: [e["decision"] for e in card.load(backend.reports / CARDS / "digits" / str(v)).history]
                 for v in (1, 2, 3)}
    assert histories == {1: ["created", "replaced", "promoted"], 2: ["promoted", "replaced"], 3: ["held"]}


def test_the_batch_scoring_dag_scores_the_test_split_through_what_serves(backend, digits):
    """dags/batch_scoring.py's task: every test image through the endpoint's traffic, the predictions saved."""
    from mlrunway.airflow.batch import score_test_split

    deploy(digits, 2, "manual__1")
    done = score_test_split("mlrunway_default", ENDPOINT, str(digits), "digits:2")
    saved = json.loads(Path(done["report"]).read_text())
    assert done["model"] == saved["model"] == "digits:2" and done["images"] == 360 == len(saved["predictions"])
    assert done["accuracy"] > 0.5 and set(saved["predictions"]) <= {str(i) for i in range(10)}
