"""score.py is loaded as Azure ML's scoring server loads it (its code folder appended to sys.path, no chdir), in
the provisioning process, every worker and the smoke test's reference run alike; and each deployment version has
its own modules, though the deployments of a local endpoint share their workers."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from mlrunway.backend.types import EndpointSettings
from mlrunway.errors import EndpointError
from mlrunway.local.serving.endpoints import LocalEndpoints
from tests.conftest import deployment, write_script

pytestmark = pytest.mark.slow

SCORE = "import helper\n\ndef init():\n    global answer\n    answer = helper.ANSWER\n\ndef run(raw):\n" \
        "    return {'answer': answer, 'now': helper.answer()}\n"


def code(folder: Path, answer: str, score: str = SCORE) -> Path:
    """A code folder whose score.py imports its neighbour helper.py, which answers ``answer``."""
    write_script(folder, score, "score.py")
    (folder / "helper.py").write_text(f"ANSWER = {answer!r}\n\ndef answer():\n    return ANSWER\n")
    return folder


@pytest.fixture
def endpoints(workspace, tmp_path):
    service = LocalEndpoints(workspace)
    (tmp_path / "model").mkdir()
    service.create_or_update("mods", EndpointSettings(workers=1))  # one worker: every deployment loads in it
    yield service
    service.delete("mods")


def ask(endpoints: LocalEndpoints, name: str | None = None) -> dict:
    return json.loads(endpoints.invoke("mods", payload={}, deployment=name))


def test_two_deployments_with_a_module_of_the_same_name_each_answer_with_their_own(endpoints, tmp_path):
    for name in ("blue", "green"):
        endpoints.create_or_update_deployment("mods", name, deployment(
            endpoints.workspace, tmp_path / "model", code(tmp_path / name, f"{name}'s helper")))
    endpoints.set_traffic("mods", {"blue": 50, "green": 50})
    for _ in range(2):  # both loaded in the one worker, in either order
        assert ask(endpoints, "blue") == {"answer": "blue's helper", "now": "blue's helper"}
        assert ask(endpoints, "green") == {"answer": "green's helper", "now": "green's helper"}


def test_a_new_version_of_a_deployment_answers_with_its_new_module(endpoints, tmp_path):
    folder = code(tmp_path / "blue", "version 1")
    endpoints.create_or_update_deployment("mods", "blue", deployment(endpoints.workspace, tmp_path / "model", folder))
    endpoints.set_traffic("mods", {"blue": 100})
    assert ask(endpoints)["answer"] == "version 1"
    code(folder, "version 2")  # the team changed helper.py, not score.py
    endpoints.create_or_update_deployment("mods", "blue", deployment(endpoints.workspace, tmp_path / "model", folder))
    assert ask(endpoints) == {"answer": "version 2", "now": "version 2"}


def test_a_lazy_import_of_a_code_folder_module_in_run_is_refused_with_the_reason(endpoints, tmp_path):
    lazy = "def init():\n    pass\n\ndef run(raw):\n    import helper\n    return {'answer': helper.ANSWER}\n"
    endpoints.create_or_update_deployment("mods", "blue", deployment(
        endpoints.workspace, tmp_path / "model", code(tmp_path / "blue", "blue's", lazy)))
    endpoints.set_traffic("mods", {"blue": 100})
    with pytest.raises(EndpointError, match=r"ImportError: import 'helper' outside score.py's import and init\(\): the "
                                            r"local endpoint loads a deployment's own modules \('helper' is deployment "
                                            r"blue version 1's\) only while"):
        ask(endpoints)


def test_the_smoke_reference_and_the_deployment_load_score_py_alike(endpoints, tmp_path, workspace):
    from mlrunway.deploy.smoke import expected_answer, start_reference
    from mlrunway.local.backend import LocalBackend

    folder = code(tmp_path / "blue", "from the neighbour")
    settings = deployment(workspace, tmp_path / "model", folder)
    endpoints.create_or_update_deployment("mods", "blue", settings)
    endpoints.set_traffic("mods", {"blue": 100})
    request = tmp_path / "request.json"
    request.write_text("{}")
    backend = LocalBackend.at(workspace.root)
    start_reference(backend, "mods-reference", settings, request)  # a job: score_once.py, the code folder an input
    expected, _ = expected_answer(backend, "mods-reference", settings, request)
    assert expected == ask(endpoints) == {"answer": "from the neighbour", "now": "from the neighbour"}


def test_a_lazy_import_stays_refused_while_another_deployment_loads_beside_it(workspace, tmp_path, monkeypatch):
    """In one process, as a worker runs it: green's init() holds its code folder on sys.path while blue's run()
    imports lazily on another thread; blue gets the message, not green's module."""
    from mlrunway.local.serving.state import DeploymentState
    from mlrunway.serving.runtime import load_deployment

    lazy = "def init():\n    pass\n\ndef run(raw):\n    import helper\n    return helper.ANSWER\n"
    slow = ("import os, time\nimport helper\n\ndef init():\n    open(os.environ['STARTED'], 'w').close()\n"
            "    while os.path.exists(os.environ['HOLD']):\n        time.sleep(0.01)\n\ndef run(raw):\n"
            "    return helper.ANSWER\n")
    (tmp_path / "model").mkdir()
    endpoint_dir = tmp_path / "endpoint"
    endpoint_dir.mkdir()
    model = str(tmp_path / "model")
    blue = load_deployment(endpoint_dir, DeploymentState(name="blue", version=1, model_dir=model, scoring_script="score.py",
                                                         code_dir=str(code(tmp_path / "blue", "blue's", lazy))))
    started, hold = tmp_path / "started", tmp_path / "hold"
    hold.touch()
    green_state = DeploymentState(name="green", version=1, model_dir=model, scoring_script="score.py",
                                  code_dir=str(code(tmp_path / "green", "green's", slow)),
                                  environment_variables={"STARTED": str(started), "HOLD": str(hold)})
    loaded: list = []
    loader = threading.Thread(target=lambda: loaded.append(load_deployment(endpoint_dir, green_state)))
    loader.start()
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline and loader.is_alive(), "green's init() never started"
            time.sleep(0.01)
        assert str(tmp_path / "green") in sys.path  # appended while it loads, as Azure's server does
        with pytest.raises(ImportError, match=r"import 'helper' outside score.py's import and init\(\)"):
            blue.module.run("{}")
    finally:
        hold.unlink()
        loader.join(30)
    assert loaded[0].module.run("{}") == "green's"
    assert str(tmp_path / "green") not in sys.path and "helper" not in sys.modules


def test_modules_whose_attributes_answer_anything_are_told_apart_from_code_folder_modules(tmp_path):
    """torch.classes answers any attribute, __path__ included, with an object that is no list of paths."""
    import types

    from mlrunway.serving.runtime import _from_folder

    class Anything(types.ModuleType):
        def __getattr__(self, name):
            return object()

    assert _from_folder(Anything("odd"), str(tmp_path)) is False
    ours = types.ModuleType("helper")
    ours.__file__ = str(tmp_path / "helper.py")
    assert _from_folder(ours, str(tmp_path)) is True and _from_folder(ours, str(tmp_path / "other")) is False
