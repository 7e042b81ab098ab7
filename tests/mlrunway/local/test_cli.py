"""``python -m mlrunway.local endpoints|jobs``: see and end what a run left (issue 59, 4), on real processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from mlrunway.backend.types import EndpointSettings, JobStatus
from mlrunway.local.__main__ import main
from mlrunway.local.backend import LocalBackend
from mlrunway.local.processes import kill_marked, marked, wait_gone
from mlrunway.specs import CommandJobSpec
from tests.conftest import REPO, deployment, write_script

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
    assert code == 0 and re.fullmatch(r"job left-running Canceled, [1-9] process\(es\) stopped", out.strip()), out
    assert backend.leftovers() == []  # nothing of it runs
    code, out, _ = cli(capsys, "jobs", "cancel", "left-running", *ws)
    assert (code, out.strip()) == (0, "job left-running had already ended Canceled: nothing to cancel")
    code, _, err = cli(capsys, "jobs", "show", "nope", *ws)
    assert code == 1 and "nope" in err


@pytest.mark.parametrize("record", ["status.json", "job.json"])
def test_jobs_cancel_stops_a_running_job_whose_record_is_damaged_and_says_what_it_stopped(workspace, tmp_path, capsys,
                                                                                        record):
    """Before: the CLI read the damaged record as Failed, printed "had already ended Failed: nothing to cancel" and
    left the job running; the API's cancel stopped it."""
    backend = LocalBackend.at(workspace.root)
    backend.jobs.submit("damaged-running", CommandJobSpec(
        code=str(write_script(tmp_path / "job", "import time\ntime.sleep(120)\n")), command="python script.py"))
    deadline = time.monotonic() + 30
    while backend.jobs.get("damaged-running").status is not JobStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    token = (workspace.job_dir("damaged-running") / "token").read_text()
    assert marked(token)  # it runs
    path = workspace.job_dir("damaged-running") / record
    path.write_text("[]")
    try:
        code, out, _ = cli(capsys, "jobs", "cancel", "damaged-running", "--workspace", str(workspace.root))
        # nothing of it runs: a process killed as marked() looked may still be exiting (a zombie), never more
        assert wait_gone(marked(token), 5.0) == []
    finally:  # whatever failed above, nothing of it outlives the test
        kill_marked(token)
    assert code == 0 and re.fullmatch(rf"job damaged-running: its record is damaged, [1-9] process\(es\) stopped "
                                      rf"\(damaged record {re.escape(str(path))}: holds array, not an object; .*\)",
                                      out.strip()), out


def test_four_concurrent_endpoints_deletes_one_deletes_it_and_the_others_say_it_was_already_gone(workspace, tmp_path):
    """Before: one said deleted, three died with raw FileNotFoundError tracebacks (rmtree racing rmtree)."""
    backend = LocalBackend.at(workspace.root)
    try:
        backend.endpoints.create_or_update("raced-ep", EndpointSettings(workers=1))
        (tmp_path / "model").mkdir()
        backend.endpoints.create_or_update_deployment("raced-ep", "blue", deployment(
            workspace, tmp_path / "model", write_script(tmp_path / "code", SCORE, "score.py")))
        state = backend.endpoints.state("raced-ep")
        deletes = [subprocess.Popen([sys.executable, "-m", "mlrunway.local", "endpoints", "delete", "raced-ep",
                                     "--workspace", str(workspace.root)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for _ in range(4)]
        said = [delete.communicate(timeout=120) for delete in deletes]
    finally:  # whatever failed above, no server outlives the test
        backend.endpoints.delete("raced-ep")
    assert [delete.returncode for delete in deletes] == [0] * 4, said
    assert not any("Traceback" in err for _, err in said), said
    assert sorted(out.strip() for out, _ in said) == [
        f"endpoint raced-ep deleted: its server (pid {state.pid}) stopped, port {state.port} freed; it served blue",
        *["endpoint raced-ep was already gone: nothing to delete"] * 3]


def test_a_symlink_in_the_jobs_folder_is_named_and_never_followed_out_of_the_workspace(workspace, tmp_path, capsys):
    """Before: list, show and recover read through the link and rewrote the outside job's status.json (a Running job
    without a supervisor, ended Failed), and cancel would have stopped its processes."""
    outside = tmp_path / "elsewhere" / "job"
    shutil.copytree(REPO / "tests" / "fixtures" / "workspace-0.2.0" / "jobs" / "old-0123abcd-train", outside)
    status = json.loads((outside / "status.json").read_text())
    del status["supervisor_pid"], status["ended"]
    (outside / "status.json").write_text(json.dumps({**status, "status": "Running"}))
    (outside / "token").write_text("outside-token")
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env={**os.environ, "MLRUNWAY_JOB_TOKEN": "outside-token"})
    LocalBackend.at(workspace.root)
    workspace.jobs.mkdir(exist_ok=True)
    (workspace.jobs / "linked").symlink_to(outside)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in outside.rglob("*") if p.is_file()}
    ws = ("--workspace", str(workspace.root))
    try:
        said = [cli(capsys, *command, *ws) for command in (("jobs", "list"), ("jobs", "show", "linked"), ("recover",),
                                                             ("jobs", "cancel", "linked"))]
        assert running.poll() is None, "cancel stopped a process of the outside job"
    finally:
        running.kill()
        running.wait()
    link = f"job folder not followed: {workspace.jobs / 'linked'} is a symbolic link (to {outside})"
    (_, listed, _), (_, shown, _), (recovered, out, _), (canceled, out_cancel, _) = said
    assert listed.splitlines()[1].split()[:3] == ["linked", "command", "Failed"] and "job folder not followed" in listed
    assert json.loads(shown)["error"].startswith(link)
    assert recovered == 1 and f"job linked: not recovered: {link}" in out
    assert canceled == 0 and out_cancel.startswith("job linked: its record is damaged, 0 process(es) stopped")
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in outside.rglob("*") if p.is_file()} == before
