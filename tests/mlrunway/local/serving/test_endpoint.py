"""The local online endpoint over real HTTP on 127.0.0.1: lifecycle, traffic, keys and every bad request."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from mlrunway.backend.capture import DataCollector
from mlrunway.backend.types import EndpointSettings
from mlrunway.deploy.shadow import ShadowRule, compare
from mlrunway.errors import EndpointError, SpecError
from mlrunway.local.serving.endpoints import LocalEndpoints
from mlrunway.onnx_export.images import load_labeled
from tests.conftest import REPO, deployment, write_script

pytestmark = pytest.mark.slow
TRAINING = REPO / "training"


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def wait_until(predicate, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def image_payload(digits: Path, onnx_model: Path, count: int = 1) -> tuple[bytes, list[str]]:
    signature = json.loads((onnx_model / "signature.json").read_text())
    inputs, labels = load_labeled(digits / "val", signature["classes"], signature["preprocessing"], limit=count)
    return json.dumps({"data": inputs.tolist()}).encode(), [signature["classes"][i] for i in labels]


@pytest.fixture
def endpoints(workspace):
    service = LocalEndpoints(workspace)
    yield service
    for state in service.list():  # nothing outlives a test
        service.delete(state.name)


@pytest.fixture
def live(endpoints, onnx_model):
    """An endpoint with `blue` serving the exported digits model at 100%."""
    endpoints.create_or_update("digits-ep", EndpointSettings(workers=2))
    endpoints.create_or_update_deployment("digits-ep", "blue",
                                          deployment(endpoints.workspace, onnx_model, TRAINING, model_name="digits-onnx"))
    endpoints.set_traffic("digits-ep", {"blue": 100})
    return endpoints.state("digits-ep")


def auth(state, key: str = "primary") -> dict[str, str]:
    return {"Authorization": f"Bearer {state.keys[key]}"}


def test_endpoint_lifecycle_scores_splits_targets_and_frees_its_port(endpoints, live, onnx_model, digits):
    body, labels = image_payload(digits, onnx_model, count=8)
    status, headers, text = post(live.scoring_uri, body, auth(live))
    assert status == 200 and headers["azureml-model-deployment"] == "blue"
    predictions = json.loads(text)["predictions"]
    assert len(predictions) == 8 and all(len(p["probabilities"]) == 10 for p in predictions)
    assert sum(p["label"] == want for p, want in zip(predictions, labels, strict=True)) >= 6  # a real model answers

    collector = DataCollector.parse({"collections": {c: {"enabled": "true"} for c in CAPTURED}})
    endpoints.create_or_update_deployment("digits-ep", "green", deployment(
        endpoints.workspace, onnx_model, TRAINING, instance_count=3, data_collector=collector))
    assert endpoints.state("digits-ep").workers == 3
    ready = endpoints.workspace.endpoints / "digits-ep" / "ready"  # each serving worker writes its PID there
    wait_until(lambda: len({int(p.name) for p in ready.iterdir() if p.name.isdigit()}
                           & {c.pid for c in psutil.Process(live.pid).children()}) == 3)  # a worker added (SIGTTIN)
    endpoints.set_traffic("digits-ep", {"blue": 50, "green": 50})
    single, _ = image_payload(digits, onnx_model)
    with ThreadPoolExecutor(8) as pool:
        answered = Counter(pool.map(lambda _: post(live.scoring_uri, single, auth(live))[1]["azureml-model-deployment"], range(400)))
    assert set(answered) == {"blue", "green"} and 150 <= answered["blue"] <= 250  # 5 standard deviations of 400 draws

    endpoints.set_traffic("digits-ep", {"blue": 100, "green": 0}, mirror_traffic={"green": 50})
    start = time.time()
    assert {post(live.scoring_uri, single, auth(live))[1]["azureml-model-deployment"] for _ in range(40)} == {"blue"}
    post(live.scoring_uri, b'{"data": "not an image"}', auth(live))  # the client's own 400: never compared
    wait_until(lambda: endpoints.get_logs("digits-ep", "green", lines=1000).count("mirrored request scored") >= 5)
    time.sleep(0.5)  # the workers write what they kept every quarter second
    pairs = endpoints.mirrored_answers("digits-ep", "green", start, time.time() + 1)
    assert 5 <= len(pairs) <= 36 and {(p.champion, p.shadow_status) for p in pairs} <= {("blue", 200), ("blue", 400)}
    assert endpoints.mirrored_answers("digits-ep", "blue", start, time.time() + 1) == []
    report = compare(pairs, ShadowRule(keys=("label",)))  # the same model: every label agrees
    assert report.compared == sum(p.champion_status == 200 for p in pairs) >= 4 and report.agreed == report.compared
    scored = next(p for p in pairs if p.shadow_status == 200)
    assert len(json.loads(scored.shadow_answer or "")["predictions"][0]["probabilities"]) == 10
    endpoints.set_traffic("digits-ep", {"blue": 100, "green": 0}, mirror_traffic={})
    status, headers, _ = post(live.scoring_uri, single, {**auth(live), "azureml-model-deployment": "green"})
    assert status == 200 and headers["azureml-model-deployment"] == "green"  # the header bypasses traffic
    assert json.loads(endpoints.invoke("digits-ep", payload=json.loads(single), deployment="green"))["predictions"]
    captured = check_captures(endpoints, onnx_model)

    server = psutil.Process(live.pid)
    assert endpoints.delete("digits-ep") is True
    # The captures outlive the endpoint, whole: a stopped worker writes the rows score.py still held (collected once
    # a second; so may more than the first count, taken right after the last requests, have seen)
    assert check_captures(endpoints, onnx_model) >= captured
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert not any(c.laddr.port == live.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN)
    assert endpoints.list() == [] and endpoints.delete("digits-ep") is False


CAPTURED = ("model_inputs", "model_outputs", "request", "response")


def check_captures(endpoints: LocalEndpoints, onnx_model: Path) -> int:
    """What green collected: score.py's rows (through azureml-ai-monitoring) and the server's payloads agree; blue,
    with no data collector, collected nothing. Return how many images green scored."""
    def read(collection: str, deployment: str = "green") -> list[dict]:
        return endpoints.captured("digits-ep", deployment, collection, time.time() - 600, time.time() + 60)

    def scored() -> int:
        return sum(len(json.loads(r["data"]) if isinstance(r["data"], str) else r["data"]["predictions"])
                   for r in read("response") if r["statuscode"] == 200)

    def rows(collection: str) -> int:
        return sum(len(r["data"]) for r in read(collection))

    wait_until(lambda: 0 < scored() == rows("model_outputs") == rows("model_inputs"))
    inputs = [row for r in read("model_inputs") for row in r["data"]]
    outputs = [row for r in read("model_outputs") for row in r["data"]]
    assert [row["correlationid"] for row in inputs] == [row["correlationid"] for row in outputs]
    assert len(set(row["correlationid"] for row in inputs)) == len(inputs)
    assert set(inputs[0]) == {"correlationid", "mean", "std", "p10", "p90"} and inputs[0]["p10"] <= inputs[0]["p90"]
    classes = json.loads((onnx_model / "signature.json").read_text())["classes"]
    assert {row["label"] for row in outputs} <= set(classes) and all(0 < row["probability"] <= 1 for row in outputs)
    assert len(read("request")) == len(read("response")) and all(not read(c, "blue") for c in CAPTURED)
    return len(outputs)


def test_base64_png_images_are_accepted(live, digits):
    png = next((digits / "val" / "7").glob("*.png")).read_bytes()
    status, _, text = post(live.scoring_uri, json.dumps({"images": [base64.b64encode(png).decode()]}).encode(), auth(live))
    assert status == 200 and json.loads(text)["predictions"][0]["label"] in [str(i) for i in range(10)]


def test_keys_are_required_both_work_and_regeneration_retires_the_old_one(endpoints, live, onnx_model, digits):
    body, _ = image_payload(digits, onnx_model)
    assert post(live.scoring_uri, body)[0] == 401
    assert post(live.scoring_uri, body, {"Authorization": "Bearer not-the-key"})[0] == 401
    assert post(live.scoring_uri, body, {"Authorization": live.keys["primary"]})[0] == 401  # no Bearer scheme
    assert post(live.scoring_uri, body, auth(live, "secondary"))[0] == 200
    keys = endpoints.regenerate_keys("digits-ep", "primary")
    assert post(live.scoring_uri, body, auth(live))[0] == 401
    assert post(live.scoring_uri, body, {"Authorization": f"Bearer {keys['primary']}"})[0] == 200


def test_the_keys_command_prints_the_primary_key_for_a_client_of_this_machine(endpoints, live, capsys):
    from mlrunway.local.__main__ import main

    workspace = str(endpoints.workspace.root)
    assert main(["keys", "digits-ep", "--workspace", workspace]) == 0
    assert capsys.readouterr().out.strip() == live.keys["primary"]
    assert main(["keys", "no-such-ep", "--workspace", workspace]) == 1
    assert "no-such-ep" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        pytest.param(b"{not json", 400, "malformed JSON", id="malformed-json"),
        pytest.param(b'{"data": [[1, 2, 3]]}', 400, '"data" has shape \\[1, 3\\]; expected \\[\'N\', 1, 8, 8\\]', id="wrong-shape"),
        pytest.param(json.dumps({"data": [[[["x"] * 8] * 8]]}).encode(), 400, '"data" must hold numbers only', id="wrong-dtype"),
        pytest.param(b'{"pixels": []}', 400, 'JSON object with "data"', id="no-data-key"),
        pytest.param(b'{"images": ["not base64!"]}', 400, "images\\[0\\] is not a base64-encoded PNG or JPEG", id="bad-image"),
        pytest.param(b" " * (1024 * 1024 + 1), 413, "over the limit of 1048576 bytes", id="too-large"),
    ],
)
def test_bad_requests_get_a_status_that_names_the_problem(live, body, status, message):
    """As Azure: score.py's 400 is a 424 at the scoring URI, with the original status in a header, and the 400
    itself at the deployment's own route; a limit of the server (413) is answered as it is."""
    got, headers, text = post(live.scoring_uri, body, auth(live))
    if status == 400:
        assert got == 424 and headers["ms-azureml-model-error-statuscode"] == "400"
        assert __import__("re").search(message, headers["ms-azureml-model-error-reason"].replace("\\", ""))
        got, _, text = post(live.scoring_uri.replace("/score", "/deployments/blue/score"), body, auth(live))
    assert got == status
    assert __import__("re").search(message, json.loads(text)["error"])


def test_routing_errors_are_404(endpoints, live, onnx_model, digits):
    body, _ = image_payload(digits, onnx_model)
    status, _, text = post(live.scoring_uri, body, {**auth(live), "azureml-model-deployment": "purple"})
    assert status == 404 and "deployment 'purple' does not exist" in text
    endpoints.set_traffic("digits-ep", {"blue": 0})
    status, _, text = post(live.scoring_uri, body, auth(live))
    assert status == 404 and "no deployment of this endpoint has traffic" in text


FLAKY_SCORE = """
import json, time
def init():
    pass
def run(raw):
    body = json.loads(raw)
    if body.get("boom"):
        raise RuntimeError("the model exploded")
    time.sleep(body.get("sleep", 0))
    return {"ok": True}
"""


def test_exception_in_score_py_returns_an_error_id_found_in_the_log_and_serving_goes_on(endpoints, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv("MLRUNWAY_LOG_MAX_BYTES", "4096")  # the master rotates past this (16 MiB by default)
    endpoints.create_or_update("flaky-ep", EndpointSettings(workers=1), request_timeout_ms=500)
    model = tmp_path / "model"
    model.mkdir()
    endpoints.create_or_update_deployment("flaky-ep", "blue", deployment(
        endpoints.workspace, model, write_script(tmp_path / "code", FLAKY_SCORE, "score.py")))
    endpoints.set_traffic("flaky-ep", {"blue": 100})
    state = endpoints.state("flaky-ep")

    status, headers, text = post(state.scoring_uri, b'{"boom": true}', auth(state))
    error_id = json.loads(text)["error_id"]
    assert status == 424 and headers["ms-azureml-model-error-statuscode"] == "500"
    assert "RuntimeError: the model exploded" in json.loads(text)["error"]
    direct = state.scoring_uri.replace("/score", "/deployments/blue/score")
    status, _, text = post(direct, b'{"boom": true}', auth(state))
    assert status == 500 and json.loads(text)["error_id"] != error_id
    logs = endpoints.get_logs("flaky-ep", "blue")
    assert f"error id {error_id}" in logs and "RuntimeError: the model exploded" in logs

    # A score.py failing on every request fills its log; the master rotates it, the worker goes on writing.
    score_log = endpoints.workspace.endpoints / "flaky-ep" / "deployments" / "blue" / "logs" / "score.log"
    ids = [json.loads(post(state.scoring_uri, b'{"boom": true}', auth(state))[2])["error_id"] for _ in range(12)]
    wait_until(lambda: score_log.with_name("score.log.2").exists() or
               (score_log.with_name("score.log.1").exists() and score_log.stat().st_size < 4096))
    later = json.loads(post(state.scoring_uri, b'{"boom": true}', auth(state))[2])["error_id"]
    wait_until(lambda: f"error id {later}" in score_log.read_text())  # written at the log's new start
    assert f"error id {ids[-1]}" in endpoints.get_logs("flaky-ep", "blue", lines=60)
    assert not score_log.with_name("score.log.4").exists() and b"\0" not in score_log.read_bytes()

    assert post(state.scoring_uri, b"{}", auth(state))[:1] == (200,)  # still serving
    status, _, text = post(state.scoring_uri, b'{"sleep": 2}', auth(state))
    assert status == 408 and "request_timeout_ms=500" in text


def test_deployment_whose_init_fails_is_refused_with_its_log_and_changes_nothing(endpoints, tmp_path):
    endpoints.create_or_update("broken-ep", EndpointSettings(workers=1))
    code = write_script(tmp_path / "code", "def init():\n    raise FileNotFoundError('model.onnx is missing')\ndef run(raw):\n    return raw", "score.py")
    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(EndpointError, match="(?s)deployment blue of endpoint broken-ep failed to provision.*model.onnx is missing"):
        endpoints.create_or_update_deployment("broken-ep", "blue", deployment(endpoints.workspace, model, code))
    assert endpoints.state("broken-ep").deployments == {}
    with pytest.raises(SpecError, match="endpoint.traffic.blue: names no deployment"):
        endpoints.set_traffic("broken-ep", {"blue": 100})


def test_traffic_moves_and_redeploys_drop_no_request_in_flight(endpoints, live, onnx_model, digits):
    body, _ = image_payload(digits, onnx_model)
    statuses: list[int] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            statuses.append(post(live.scoring_uri, body, auth(live))[0])

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    endpoints.create_or_update_deployment("digits-ep", "green", deployment(endpoints.workspace, onnx_model, TRAINING))
    endpoints.set_traffic("digits-ep", {"blue": 50, "green": 50})
    endpoints.create_or_update_deployment("digits-ep", "blue", deployment(endpoints.workspace, onnx_model, TRAINING))  # version 2
    endpoints.set_traffic("digits-ep", {"green": 100})
    endpoints.set_traffic("digits-ep", {"blue": 100, "green": 0})
    stop.set()
    for thread in threads:
        thread.join()
    assert len(statuses) > 20 and set(statuses) == {200}
    assert endpoints.state("digits-ep").deployments["blue"].version == 2


def test_deleting_a_deployment_with_traffic_is_refused(endpoints, live):
    with pytest.raises(SpecError, match="endpoint.traffic.blue: deployment blue still has traffic; set its traffic"):
        endpoints.delete_deployment("digits-ep", "blue")
    endpoints.set_traffic("digits-ep", {"blue": 0})
    assert endpoints.delete_deployment("digits-ep", "blue") is True


def test_a_deployment_made_again_after_its_deletion_serves_its_new_model_not_a_cached_one(endpoints, tmp_path,
                                                                                         workspace):
    """Workers cache a loaded score.py by deployment name and version: a deployment deleted and made again under
    its name gets a version never used before, so the workers load the new one."""
    code = write_script(tmp_path / "code", "import os, pathlib\ndef init():\n    global answer\n    answer = "
                        "pathlib.Path(os.environ['AZUREML_MODEL_DIR'], 'which.txt').read_text()\n"
                        "def run(raw):\n    return {'model': answer}\n", name="score.py")
    endpoints.create_or_update("again", EndpointSettings(workers=1))
    for which in ("first", "second"):
        model = tmp_path / which
        model.mkdir()
        (model / "which.txt").write_text(which)
        endpoints.create_or_update_deployment("again", "blue", deployment(workspace, model, code, model_name=which))
        endpoints.set_traffic("again", {"blue": 100})
        assert json.loads(endpoints.invoke("again", payload={})) == {"model": which}
        endpoints.set_traffic("again", {})
        endpoints.delete_deployment("again", "blue")
    endpoints.delete("again")


def test_a_run_that_outlives_its_408_holds_its_place_until_it_ends(endpoints, tmp_path, workspace):
    """A scoring thread cannot be stopped: after its request's 408 it is counted as busy until it ends, so the
    next requests are refused at once (429) instead of waiting unseen behind it; once it ends, all is served."""
    code = write_script(tmp_path / "code", "import json, time\ndef init():\n    pass\n"
                        "def run(raw):\n    time.sleep(json.loads(raw)['sleep'])\n    return {'ok': True}\n",
                        name="score.py")
    model = tmp_path / "model"
    model.mkdir()
    endpoints.create_or_update("slow", EndpointSettings(workers=1), request_timeout_ms=300,
                               max_concurrent_requests_per_worker=1)
    endpoints.create_or_update_deployment("slow", "blue", deployment(workspace, model, code))
    endpoints.set_traffic("slow", {"blue": 100})
    state = endpoints.state("slow")

    def score(seconds: float) -> tuple[int, float]:
        started = time.monotonic()
        status, _, _ = post(state.scoring_uri, json.dumps({"sleep": seconds}).encode(), auth(state))
        return status, time.monotonic() - started

    assert score(3.0)[0] == 408  # its run() goes on for 2.7 s more, holding the worker's one place
    status, took = score(0.0)
    assert status == 429 and took < 1.0  # refused at once, not queued behind it
    deadline = time.monotonic() + 10
    while (status := score(0.0)[0]) == 429 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 200  # once it ends, the place is free
    endpoints.delete("slow")


SHADOW = """
import atexit, json, time
import pandas as pd
from azureml.ai.monitoring import Collector

def init():
    global inputs, outputs, held
    inputs, outputs, held = Collector(name="model_inputs"), Collector(name="model_outputs"), []
    batched = Collector(name="batched")
    atexit.register(lambda: held and batched.collect(pd.DataFrame({"x": held})))  # a script that batches its rows

def run(raw):
    frame = pd.DataFrame({"x": [1.0]})
    context = inputs.collect(frame)
    time.sleep(json.loads(raw)["sleep"])
    outputs.collect(frame, context)
    held.append(1.0)
    return {"ok": True}
"""


def test_a_stopped_worker_finishes_its_mirrored_copies_and_keeps_what_its_script_collects_at_exit(
        endpoints, tmp_path, workspace, monkeypatch):
    """A mirrored copy is scored off the request path, after the champion answered, so uvicorn's graceful stop
    does not wait for it: a worker told to stop lets it end before its last capture flush, or its captures are
    cut (what run() collected before the stop, nothing after, no payload). What the script collects in its exit
    handlers is written too."""
    monkeypatch.setenv("MLRUNWAY_SCORING_THREADS", "2")  # the champion is not queued behind its shadow's copy
    model = tmp_path / "model"
    model.mkdir()
    blue = write_script(tmp_path / "blue", "def init():\n    pass\ndef run(raw):\n    return {'ok': True}\n",
                        name="score.py")
    green = write_script(tmp_path / "green", SHADOW, name="score.py")
    collector = DataCollector.parse({"collections": {c: {"enabled": "true"} for c in (*CAPTURED, "batched")}})
    endpoints.create_or_update("shadowed", EndpointSettings(workers=1), request_timeout_ms=30_000)  # no 408 here
    endpoints.create_or_update_deployment("shadowed", "blue", deployment(workspace, model, blue))
    endpoints.create_or_update_deployment("shadowed", "green", deployment(workspace, model, green,
                                                                          data_collector=collector))
    endpoints.set_traffic("shadowed", {"blue": 100}, mirror_traffic={"green": 50})  # Azure's most
    state = endpoints.state("shadowed")
    for _ in range(30):  # until one is mirrored (one in two is)
        status, headers, _ = post(state.scoring_uri, json.dumps({"sleep": 3}).encode(), auth(state))
        assert status == 200 and headers["azureml-model-deployment"] == "blue"
        deadline = time.monotonic() + 3  # green's init() on its first request, then the writer's tick
        while time.monotonic() < deadline and not (mirrored := endpoints.captured(
                "shadowed", "green", "model_inputs", time.time() - 60, time.time() + 60)):
            time.sleep(0.1)
        if mirrored:
            break
    assert endpoints.delete("shadowed") is True  # while green's copy sleeps
    kept = {c: endpoints.captured("shadowed", "green", c, time.time() - 60, time.time() + 60) for c in CAPTURED}
    assert len(kept["model_inputs"]) >= 1 and {c: len(rows) for c, rows in kept.items()} == dict.fromkeys(
        CAPTURED, len(kept["model_inputs"]))
    assert {r["statuscode"] for r in kept["response"]} == {200}
    assert [r["correlationid"] for r in kept["model_inputs"]] == [r["correlationid"] for r in kept["model_outputs"]]
    batched = endpoints.captured("shadowed", "green", "batched", time.time() - 60, time.time() + 60)
    assert sum(len(r["data"]) for r in batched) == len(kept["model_outputs"])


def test_endpoints_listen_on_loopback_unless_the_connection_names_a_host(tmp_path, monkeypatch):
    from mlrunway.local.backend import LocalBackend

    assert LocalBackend.from_connection({"workspace": str(tmp_path)}).endpoints.host == "127.0.0.1"
    served = LocalBackend.from_connection({"workspace": str(tmp_path), "endpoint_host": "0.0.0.0"})
    served.endpoints.create_or_update("wide", EndpointSettings(workers=1))
    try:
        state = served.endpoints.state("wide")
        assert state.host == "0.0.0.0" and state.scoring_uri.startswith("http://0.0.0.0:")
        listening = [c for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN
                     and c.laddr.port == state.port]
        assert listening and {c.laddr.ip for c in listening} == {"0.0.0.0"}
    finally:
        served.endpoints.delete("wide")


@pytest.mark.parametrize(("limits", "message"), [
    ({"send_timeout": 5}, "endpoint.send_timeout: is not a server limit; use one of max_header_bytes, "),
    ({"send_timeout_s": -1}, "endpoint.send_timeout_s: -1 is not a positive number of seconds"),
    ({"header_timeout_s": "10"}, "endpoint.header_timeout_s: '10' is not a finite number"),
    ({"max_headers": 0}, "endpoint.max_headers: 0 is not an integer >= 1"),
])
def test_server_limits_are_checked_before_any_server_starts(endpoints, limits, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        endpoints.create_or_update("limits", **limits)
    assert not (endpoints.workspace.endpoints / "limits").exists()


def test_concurrent_deletes_of_an_endpoint_one_deletes_it_and_the_others_find_it_gone(endpoints, tmp_path):
    """A run's cleanup racing a person's delete: before, the others died on rmtree's FileNotFoundError."""
    endpoints.create_or_update("raced-ep", EndpointSettings(workers=1))
    (tmp_path / "model").mkdir()
    score = write_script(tmp_path / "code", "def init():\n    pass\n\ndef run(raw):\n    return raw\n", "score.py")
    endpoints.create_or_update_deployment("raced-ep", "blue", deployment(endpoints.workspace, tmp_path / "model", score))
    pid = endpoints.state("raced-ep").pid
    start = threading.Barrier(4)

    def delete(_: int) -> bool:
        start.wait()
        return endpoints.delete("raced-ep")

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(delete, range(4))) == [False, False, False, True]
    assert not psutil.pid_exists(pid) and endpoints.list() == []
