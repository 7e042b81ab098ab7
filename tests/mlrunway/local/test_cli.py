"""``python -m mlrunway.local endpoints|jobs``: see and end what a run left (issue 59, 4), on real processes."""

from __future__ import annotations

import json
import socket
import time

import pytest

from mlrunway.backend.types import EndpointSettings, JobStatus
from mlrunway.local.__main__ import main
from mlrunway.local.backend import LocalBackend
from mlrunway.specs import CommandJobSpec
from tests.conftest import deployment, write_script

pytestmark = pytest.mark.slow

SCORE = "def init():\n    pass\n\ndef run(raw):\n    return {'ok': True}\n"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    written = capsys.readouterr()
    return code, written.out, written.err


def test_endpoints_list_show_and_delete_a_kept_endpoint_and_say_what_they_stopped(workspace, tmp_path, capsys):
    backend = LocalBackend.at(workspace.root)
    try:
        _list_show_and_delete(backend, workspace, tmp_path, capsys)
    finally:  # whatever failed above, no server outlives the test
        for endpoint in backend.endpoints.list():
            backend.endpoints.delete(endpoint.name)


def _list_show_and_delete(backend, workspace, tmp_path, capsys) -> None:
    ws = ("--workspace", str(workspace.root))
    backend.endpoints.create_or_update("kept-ep", EndpointSettings(workers=1))
    (tmp_path / "model").mkdir()
    backend.endpoints.create_or_update_deployment("kept-ep", "blue", deployment(
        workspace, tmp_path / "model", write_script(tmp_path / "code", SCORE, "score.py")))
    backend.endpoints.set_traffic("kept-ep", {"blue": 100})
    state = backend.endpoints.state("kept-ep")

    code, out, _ = cli(capsys, "endpoints", "list", *ws)
    assert code == 0 and out.splitlines()[0].split() == ["NAME", "STATE", "TRAFFIC", "SCORING", "URI"]
    assert out.splitlines()[1].split()[:3] == ["kept-ep", "Succeeded", "blue=100"]
    code, out, _ = cli(capsys, "endpoints", "show", "kept-ep", *ws)
    shown = json.loads(out)
    assert code == 0 and shown["deployments"] == [{"name": "blue", "state": "Succeeded", "model": "model:1"}]
    assert state.keys["primary"] not in out  # never the keys
    code, out, _ = cli(capsys, "endpoints", "delete", "kept-ep", *ws)
    assert code == 0 and out.strip() == (f"endpoint kept-ep deleted: its server (pid {state.pid}) stopped, port "
                                         f"{state.port} freed; it served blue")
    with socket.socket() as probe:  # the port is free again: nothing listens (a closed connection's TIME_WAIT may stay)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", state.port))
        probe.listen()
    code, _, err = cli(capsys, "endpoints", "show", "kept-ep", *ws)
    assert code == 1 and "kept-ep" in err and "does not exist" in err
    assert cli(capsys, "endpoints", "list", *ws)[1].strip() == "no endpoints"
    with pytest.raises(SystemExit) as usage:
        main(["endpoints", "delete", *ws])
    assert usage.value.code == 2 and "endpoints delete needs a name" in capsys.readouterr().err


def test_jobs_list_show_and_cancel_a_running_job(workspace, tmp_path, capsys):
    ws = ("--workspace", str(workspace.root))
    backend = LocalBackend.at(workspace.root)
    backend.jobs.submit("left-running", CommandJobSpec(code=str(write_script(tmp_path / "job", "import time\n"
                                                                                    "time.sleep(120)\n")),
                                                       command="python script.py"))
    deadline = time.monotonic() + 30
    while backend.jobs.get("left-running").status is not JobStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    code, out, _ = cli(capsys, "jobs", "list", *ws)
    assert code == 0 and out.splitlines()[1].split()[:3] == ["left-running", "command", "Running"]
    code, out, _ = cli(capsys, "jobs", "show", "left-running", *ws)
    assert code == 0 and json.loads(out)["status"] == "Running"
    code, out, _ = cli(capsys, "jobs", "cancel", "left-running", *ws)
    assert (code, out.strip()) == (0, "job left-running Canceled")
    assert backend.leftovers() == []  # nothing of it runs
    code, out, _ = cli(capsys, "jobs", "cancel", "left-running", *ws)
    assert (code, out.strip()) == (0, "job left-running had already ended Canceled: nothing to cancel")
    code, _, err = cli(capsys, "jobs", "show", "nope", *ws)
    assert code == 1 and "nope" in err
