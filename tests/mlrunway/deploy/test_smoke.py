"""The smoke test that checks the answer: the matcher (the parity rule on numbers, ignore_keys, shapes and types,
the first differing path), the reference answer computed with the team's score.py in a reference job, and `blue` on
the local backend for real: a right deployment passes, one that answers wrong numbers fails with both answers
shown and traffic where it was."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlrunway.airflow.summary import format_summary
from mlrunway.backend.types import DeploymentSettings, EndpointSettings
from mlrunway.deploy.blue import promote_blue
from mlrunway.deploy.smoke import SmokeTest, difference, expected_answer, match, start_reference
from mlrunway.errors import EndpointError, SpecError
from mlrunway.local.backend import LocalBackend
from mlrunway.onnx_export.parity import ATOL, RTOL
from mlrunway.operators import DeployBlueOperator
from tests.conftest import REPO
from tests.operators.test_operators_on_fake import TaskInstance

FORECAST = REPO / "examples" / "demand_forecast"  # a regressor's score.py and sample_request.json
WEIGHTS = np.linspace(-1.0, 1.0, 8, dtype=np.float32)[:, None] * 3  # a linear forecaster of demand, 8 features


# The matcher --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("expected", "answer", "equal"), [
    (1000.0, 1000.0 * (1 + 0.9 * RTOL), True),  # within RTOL at a large scale
    (1000.0, 1000.0 * (1 + 3 * RTOL), False),
    (-2e6, -2e6 * (1 + 0.9 * RTOL), True),
    (0.0, 0.9 * ATOL, True),  # at zero the absolute part carries it
    (1e-9, 3 * ATOL, False),
    (3, 3.0, True),  # an int and a float are one JSON number
    (float("nan"), float("nan"), True),
    (float("nan"), 1.0, False),
])
def test_numbers_match_by_the_parity_rule_at_any_scale(expected, answer, equal):
    assert (difference({"y": [expected]}, {"y": [answer]}) is None) is equal


def test_the_first_differing_path_and_both_values_are_named_expected_first():
    expected = {"id": "a", "predictions": [{"value": 15.2, "unit": "kg"}, {"value": 16.0, "unit": "kg"}]}
    answer = {"id": "a", "predictions": [{"value": 16.9, "unit": "kg"}, {"value": 99.0, "unit": "g"}]}
    assert difference(expected, answer) == "predictions[0].value: 15.2 != 16.9"
    assert difference([1, [2, 3]], [1, [2, 4]]) == "[1][1]: 3 != 4"
    assert difference(1.0, 2.0) == "the answer: 1.0 != 2.0"


def test_ignore_keys_are_skipped_at_any_depth_on_both_sides_and_nothing_else_is():
    expected = {"request_id": "r1", "batch": [{"at": "10:00", "y": 1.0}], "meta": {"deep": {"at": 1}}}
    answer = {"request_id": "r2", "batch": [{"at": "10:05", "y": 1.0}], "meta": {"deep": {}}}
    assert difference(expected, answer) == "request_id: \"r1\" != \"r2\""
    assert difference(expected, answer, ["request_id", "at"]) is None
    # a key only one side has is ignored too; a number under another name still counts
    assert difference(expected, {**answer, "batch": [{"at": "x", "y": 2.0}]}, ["request_id", "at"]) == \
        "batch[0].y: 1.0 != 2.0"


@pytest.mark.parametrize(("expected", "answer", "found"), [
    ({"ok": True}, {"ok": 1}, "ok: true != 1 (expected a boolean, answered a number)"),
    ({"ok": 1}, {"ok": True}, "ok: 1 != true (expected a number, answered a boolean)"),
    ({"y": 1.5}, {"y": "1.5"}, 'y: 1.5 != "1.5" (expected a number, answered a string)'),
    ({"y": None}, {"y": 0}, "y: null != 0 (expected null, answered a number)"),
    ({"y": [1.0, 2.0]}, {"y": [1.0]}, "y: 2 items != 1"),
    ({"y": [1.0]}, {"y": {"0": 1.0}}, "y: expected a list, answered an object"),
    ({"y": [1.0]}, {"y": 1.0}, "y: expected a list, answered a number"),
    ({"y": 1, "z": 2}, {"y": 1}, "the answer: answered no key 'z'"),
    ({"y": 1}, {"y": 1, "z": 2}, "the answer: answered an unexpected key 'z'"),
    ({"a": {"label": "3"}}, {"a": {"label": "8"}}, 'a.label: "3" != "8"'),
])
def test_types_shapes_and_keys_must_agree(expected, answer, found):
    assert difference(expected, answer) == found


def test_a_match_says_how_much_of_the_tolerance_it_used():
    assert match([1.0, 2.0], [1.0, 2.0]).tolerance_used == 0.0
    assert 0.49 < match([1.0], [1.0 + 0.5 * (ATOL + RTOL)]).tolerance_used < 0.51


@pytest.mark.parametrize(("value", "keys"), [
    (None, ()), ([], ()), (["request_id", "at"], ("request_id", "at")), ('["a", "b"]', ("a", "b")),
    ("a, b", ("a", "b")), ("a", ("a",)),
])
def test_ignore_keys_as_a_list_or_as_a_template_renders_it(value, keys):
    assert SmokeTest.parse({"ignore_keys": value}, "deploy").keys == keys


def test_ignore_keys_that_are_no_key_names_name_the_argument():
    with pytest.raises(SpecError, match=r"deploy.ignore_keys: \[1\] is not a list of key names"):
        SmokeTest.parse({"ignore_keys": [1]}, "deploy")


# The reference answer and `blue` on the local backend ---------------------------------------------------------

def regressor(folder: Path, scale: float = 1.0) -> Path:
    """A real ONNX regressor (features [N, 8] -> demand [N, 1]) as a model folder demand_forecast's score.py
    serves: model.onnx and signature.json."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "weights"], ["product"]),
         helper.make_node("Add", ["product", "bias"], ["demand"])], "demand",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, 8])],
        [helper.make_tensor_value_info("demand", TensorProto.FLOAT, [None, 1])],
        [numpy_helper.from_array(WEIGHTS * scale, "weights"),
         numpy_helper.from_array(np.array([0.5 * scale], dtype=np.float32), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    folder.mkdir(parents=True)
    onnx.save(model, str(folder / "model.onnx"))
    (folder / "signature.json").write_text(json.dumps({"format": "onnx", "file": "model.onnx", "task": "regression",
                                                       "inputs": [{"name": "features", "shape": [None, 8]}]}))
    return folder


def answers_as(answer: dict, scale: float = 1.0, request: Path = FORECAST / "sample_request.json") -> bool:
    """Whether ``answer`` holds the predictions of the regressor scaled by ``scale`` (computed here with numpy; the
    served ones are rounded to 4 decimals)."""
    rows = np.asarray(json.loads(request.read_text())["data"], dtype=np.float64)
    truth = (rows @ (WEIGHTS.astype(np.float64) * scale) + 0.5 * scale)[:, 0]
    return set(answer) == {"predictions"} and np.allclose(answer["predictions"], truth, rtol=0, atol=1e-4)


@pytest.fixture
def backend(tmp_path, monkeypatch):
    """A local workspace holding the regressor as reg:1 and the same model answering 5% higher as reg:2."""
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    local = LocalBackend.at(tmp_path / "ws")
    local.models.register("reg", regressor(tmp_path / "right"))
    local.models.register("reg", regressor(tmp_path / "scaled", scale=1.05))
    yield local
    for state in local.endpoints.list():
        local.endpoints.delete(state.name)


def broken_copy(tmp_path: Path) -> Path:
    """demand_forecast's code folder whose score.py imports a package this Python does not have."""
    code = tmp_path / "broken"
    shutil.copytree(FORECAST, code)
    script = (FORECAST / "score.py").read_text()
    assert "import onnxruntime as ort\n" in script
    (code / "score.py").write_text(script.replace("import onnxruntime as ort\n",
                                                  "import onnxruntime as ort\nimport package_the_worker_lacks\n"))
    return code


def answer_of(backend, base: str, settings: DeploymentSettings, request: Path, **wait):
    """The reference job's answer: started as the deploy task starts it, then waited for as promote_blue does."""
    start_reference(backend, base, settings, request)
    return expected_answer(backend, base, settings, request, **wait)[0]


@pytest.mark.slow
def test_a_reference_job_computes_the_expected_answer_on_the_registered_version_and_says_when_it_cannot(backend,
                                                                                                       tmp_path):
    request = FORECAST / "sample_request.json"
    before = sorted(p.name for p in FORECAST.rglob("*"))
    assert answers_as(answer_of(backend, "ref-1", DeploymentSettings(model="reg:1", code_dir=str(FORECAST)), request))
    assert answers_as(answer_of(backend, "ref-2", DeploymentSettings(model="reg:2", code_dir=str(FORECAST)), request),
                      1.05)
    assert sorted(p.name for p in FORECAST.rglob("*")) == before  # nothing written into the team's folder
    job = backend.jobs.get("ref-1")
    assert job.status.value == "Completed" and "score_once" not in {p.name for p in FORECAST.iterdir()}

    broken = DeploymentSettings(model="reg:1", code_dir=str(broken_copy(tmp_path)))
    with pytest.raises(SpecError) as raised:
        answer_of(backend, "ref-broken", broken, request)
    message = str(raised.value)
    assert message.startswith("deploy.expected_response: is missing, and score.py could not compute it in the "
                              "reference job ref-broken")
    assert "No module named 'package_the_worker_lacks'" in message  # the job's own error
    assert "pass expected_response: a JSON file in the code folder" in message

    slow = tmp_path / "slow"
    shutil.copytree(FORECAST, slow)
    (slow / "score.py").write_text("import time\ndef init():\n    time.sleep(60)\ndef run(raw):\n    return {}\n")
    with pytest.raises(SpecError, match="the reference job ref-slow running score.py did not end within 3 s"):
        answer_of(backend, "ref-slow", DeploymentSettings(model="reg:1", code_dir=str(slow)), request, timeout_s=3)
    assert backend.jobs.get("ref-slow").status.value == "Canceled"


def context() -> dict:
    return {"dag": SimpleNamespace(dag_id="smoke"), "run_id": "manual__1", "ti": TaskInstance(),
            "dag_run": SimpleNamespace(run_type="manual")}


@pytest.mark.slow
def test_the_right_deployment_passes_against_score_pys_own_answer(backend):
    """The deploy task as a DAG runs it, no expected_response: the answer is computed with score.py in the run's
    reference job, started before provisioning."""
    deployed = DeployBlueOperator(task_id="deploy_blue", model_name="reg", model_version=1, code_dir=str(FORECAST),
                                  sample_request="sample_request.json", ignore_keys=["request_id"], workers=1,
                                  deferrable=False, poll_interval_s=0.1).execute(context())
    assert json.loads(deployed["smoke_answer"]) == json.loads(deployed["smoke_expected"])
    assert answers_as(json.loads(deployed["smoke_answer"]))
    reference = "mlrunway-8d49d6ca-reference"  # the run's reference job (RunNames.reference_job)
    assert deployed["smoke_matched"] == f"as expected (score.py run on reg:1 in job {reference}: 0% of the parity " \
                                        "tolerance used; request_id ignored)"
    assert backend.jobs.get(reference).status.value == "Completed"
    assert backend.endpoints.get(deployed["endpoint"]).traffic == {"blue": 100}
    line = format_summary("success", {"deploy_blue": deployed}, []).splitlines()[1]
    assert line.endswith(f"; sample_request.json -> {deployed['smoke_answer']}, {deployed['smoke_matched']}")


@pytest.mark.slow
def test_a_deployment_answering_wrong_numbers_fails_before_traffic_moves(backend, tmp_path):
    """`blue` serves reg:2, whose answers are 5% high: checked as reg:1 (the reference computed by score.py), or
    against an expected_response file with other numbers, it fails by header with both answers shown, and the
    endpoint's traffic stays as it was; a score.py that cannot run here asks for expected_response."""
    request = FORECAST / "sample_request.json"
    served = DeploymentSettings(model="reg:2", code_dir=str(FORECAST))
    backend.endpoints.create_or_update("smoke-ep", EndpointSettings(workers=1))
    backend.endpoints.create_or_update_deployment("smoke-ep", "blue", served)
    before = backend.endpoints.get("smoke-ep").traffic
    assert not any(before.values())

    with pytest.raises(EndpointError) as raised:
        promote_blue(backend, "smoke-ep", "reg", 1, None, request, settings=served)
    message = str(raised.value)
    assert "answered sample_request.json by the blue deployment header, before any traffic moved" in message
    assert re.search(r"not as expected \(score.py run on reg:1 in job smoke-ep-reference-[0-9a-f]{8}\)", message)
    right = json.loads(re.search(r"\n  expected: (.*)\n", message).group(1))
    high = json.loads(re.search(r"\n  answered: (.*)\n", message).group(1))
    assert answers_as(right) and answers_as(high, 1.05)  # both answers shown, whole
    first = f"first difference (expected != answered): predictions[0]: {right['predictions'][0]} != " \
            f"{high['predictions'][0]}\n"
    assert first in message
    assert backend.endpoints.get("smoke-ep").traffic == before

    (tmp_path / "expected.json").write_text(json.dumps({"predictions": [high["predictions"][0],
                                                                         high["predictions"][1] + 0.01]}))
    with pytest.raises(EndpointError, match=r"not as expected \(expected.json\).* predictions\[1\]: "):
        promote_blue(backend, "smoke-ep", "reg", 2, None, request, settings=served,
                     expected_response=tmp_path / "expected.json")
    assert backend.endpoints.get("smoke-ep").traffic == before

    broken = DeploymentSettings(model="reg:2", code_dir=str(broken_copy(tmp_path)))
    with pytest.raises(SpecError, match=r"(?s)deploy.expected_response: is missing.*package_the_worker_lacks"):
        promote_blue(backend, "smoke-ep", "reg", 2, None, request, settings=broken)
    assert backend.endpoints.get("smoke-ep").traffic == before

    # the same deployment, checked as the version it serves: it passes, and only now is traffic moved
    promoted = promote_blue(backend, "smoke-ep", "reg", 2, None, request, settings=served)
    assert json.loads(promoted["smoke_answer"]) == high
    assert backend.endpoints.get("smoke-ep").traffic == {"blue": 100}


def test_a_regressor_without_sample_request_names_it_instead_of_a_key_error(backend, tmp_path):
    with pytest.raises(SpecError, match=r"deploy.sample_request: is missing, and reg:1 is no image classifier.*"
                                        r"pass sample_request"):
        promote_blue(backend, "no-such-ep", "reg", 1, tmp_path)
    with pytest.raises(SpecError, match="deploy.expected_response: is given without sample_request"):
        promote_blue(backend, "no-such-ep", "reg", 1, tmp_path, expected_response=tmp_path / "e.json")
