"""One damaged job record never stops the workspace (issue 59, 1, jobs): a job.json or status.json of the wrong
shape reads as a Failed job naming the file and the fix, marked damaged; list, recover and cancel go on."""

from __future__ import annotations

import json

import pytest

from mlrunway.backend.types import JobStatus
from mlrunway.local.__main__ import main
from mlrunway.local.backend import LocalBackend
from mlrunway.specs import CommandJobSpec
from tests.conftest import write_script

pytestmark = pytest.mark.slow

DAMAGE = {
    "job-empty-object": ("job.json", {}, "has no 'name'"),
    "job-a-list": ("job.json", [], "holds array, not an object"),
    "job-odd-kind": ("job.json", "kind", "kind 'pipeline' is not one of command, sweep"),
    "status-a-list": ("status.json", [], "holds array, not an object"),
    "status-unknown": ("status.json", {"status": "Exploded"}, "status 'Exploded' is not one of"),
    "status-number": ("status.json", {"status": 3}, "'status' is int, not str"),
}


def test_a_record_of_the_wrong_shape_reads_as_a_failed_job_and_stops_nothing_else(workspace, tmp_path, capsys):
    backend = LocalBackend.at(workspace.root)
    code = write_script(tmp_path / "code", "print('done')\n")
    for name in ("healthy", *DAMAGE):
        backend.jobs.submit(name, CommandJobSpec(code=str(code), command="python script.py"))
        assert backend.jobs.wait(name, poll_s=0.05).status is JobStatus.COMPLETED
    for name, (file, content, _) in DAMAGE.items():
        path = workspace.job_dir(name) / file
        if content == "kind":
            content = {**json.loads(path.read_text()), "kind": "pipeline"}
        path.write_text(json.dumps(content))

    listed = {job.name: job for job in backend.jobs.list()}  # before: KeyError 'kind' / AttributeError
    assert listed["healthy"].status is JobStatus.COMPLETED and not listed["healthy"].damaged
    for name, (file, _, problem) in DAMAGE.items():
        job = listed[name]
        assert job.damaged and job.status is JobStatus.FAILED, name
        assert job.error.startswith(f"damaged record {workspace.job_dir(name) / file}: {problem}"), job.error
        assert job.error.endswith(f"restore it or delete {workspace.job_dir(name)}")
        assert backend.jobs.cancel(name) == job  # answers as get() does, never a raw error
    code_ = main(["recover", "--workspace", str(workspace.root)])
    out = capsys.readouterr().out
    assert code_ == 1 and all(f"job {name}: not recovered: damaged record" in out for name in DAMAGE)
    assert backend.jobs.get("healthy").status is JobStatus.COMPLETED  # nothing healthy changed


@pytest.mark.parametrize(("content", "problem"), [
    ("{}", "has no 'name'"), ("[]", "holds array, not an object"), ('{"name": "m", "version": 2, "path": "p", '
                                                                   '"color": 1}', "has 'color', no field"),
    ('{"name": "other", "version": 7, "path": "p"}', "names other:7, in the folder of m:2"), ("{trunc", "does not parse"),
])
def test_a_damaged_model_version_is_listed_never_served_and_the_next_is_numbered_past_it(workspace, tmp_path, content,
                                                                                       problem):
    """Before: one bad model.json broke models.list() for every model and every later registration of that model."""
    from mlrunway.errors import MlrunwayError
    from mlrunway.local.registry import LocalModels

    models = LocalModels(workspace)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "model.onnx").write_bytes(b"onnx")
    for name in ("m", "m", "m", "other"):
        models.register(name, tmp_path / "files")
    record = workspace.models / "m" / "2" / "model.json"
    record.chmod(0o644)
    record.write_text(content)
    listed = {(v.name, v.version): v for v in models.list()}
    assert len(listed) == 4 and not listed[("m", 1)].damaged and not listed[("other", 1)].damaged
    damaged = listed[("m", 2)]
    assert damaged.damaged and damaged.error.startswith(f"damaged record {record}: {problem}"), damaged.error
    assert models.register("m", tmp_path / "files").version == 4  # numbered past it
    assert models.get("m").version == 4 and models.get("m", 2).damaged
    with pytest.raises(MlrunwayError, match=f"damaged record {record}"):
        models.download("m", 2, tmp_path / "out")
    with pytest.raises(MlrunwayError, match=f"damaged record {record}"):
        models.update_tags("m", 2, {"a": "b"})
    assert record.read_text() == content  # nothing was written over it


def test_a_damaged_endpoint_record_is_listed_and_its_server_still_stopped_by_delete(workspace, tmp_path, capsys):
    """Before: one bad endpoint.json broke endpoints.list(), and delete was impossible while its server served."""
    backend = LocalBackend.at(workspace.root)
    try:
        _damaged_endpoint_is_listed_and_deleted(backend, workspace, tmp_path, capsys)
    finally:  # whatever failed above, no server outlives the test (a damaged one is found by its command line)
        for folder in (workspace.endpoints.iterdir() if workspace.endpoints.exists() else []):
            backend.endpoints.delete(folder.name)


def _damaged_endpoint_is_listed_and_deleted(backend, workspace, tmp_path, capsys) -> None:
    import socket

    from mlrunway.backend.types import EndpointSettings, ProvisioningState
    from mlrunway.local.serving import master
    from tests.conftest import deployment

    for name in ("healthy-ep", "damaged-ep"):
        backend.endpoints.create_or_update(name, EndpointSettings(workers=1))
    (tmp_path / "model").mkdir()
    backend.endpoints.create_or_update_deployment("damaged-ep", "blue", deployment(
        workspace, tmp_path / "model", write_script(tmp_path / "code", "def init():\n    pass\n\ndef run(raw):\n"
                                                                        "    return 1\n", "score.py")))
    state = backend.endpoints.state("damaged-ep")
    record = workspace.endpoints / "damaged-ep" / "endpoint.json"
    record.write_text("[]")
    listed = {e.name: e for e in backend.endpoints.list()}
    assert not listed["healthy-ep"].damaged and listed["healthy-ep"].provisioning_state is ProvisioningState.SUCCEEDED
    damaged = listed["damaged-ep"]
    assert damaged.damaged and damaged.provisioning_state is ProvisioningState.FAILED
    assert damaged.error.startswith(f"damaged record {record}: ") and backend.endpoints.get("damaged-ep") == damaged
    assert {p.pid for p in master.processes_of(workspace.endpoints / "damaged-ep")} >= {state.pid}
    assert main(["endpoints", "delete", "damaged-ep", "--workspace", str(workspace.root)]) == 0
    assert "its record was damaged" in capsys.readouterr().out
    assert master.processes_of(workspace.endpoints / "damaged-ep") == [] and not record.parent.exists()
    with socket.socket() as probe:  # its port is free again: nothing listens (a closed connection's TIME_WAIT may stay)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", state.port))
        probe.listen()
    assert backend.endpoints.delete("healthy-ep")


def test_a_running_jobs_garbled_status_keeps_its_outcome_and_a_cancel_answers_as_get(workspace, tmp_path):
    """Before: the supervisor crashed on its own garbled status.json (its outcome lost, the file left garbled), and
    cancel() on it raised a raw JSONDecodeError."""
    import time

    from mlrunway.local.processes import marked

    backend = LocalBackend.at(workspace.root)
    code = write_script(tmp_path / "code", "import time\ntime.sleep(1.5)\nprint('done')\n")
    for name in ("garbled", "canceled"):
        backend.jobs.submit(name, CommandJobSpec(code=str(code), command="python script.py"))
    for name in ("garbled", "canceled"):
        while backend.jobs.get(name).status is not JobStatus.RUNNING:
            time.sleep(0.05)
        (workspace.job_dir(name) / "status.json").write_text('{"status": "Runn')
    read = backend.jobs.get("canceled")
    assert read.damaged and read.error.startswith(f"damaged record {workspace.job_dir('canceled') / 'status.json'}")
    token = (workspace.job_dir("canceled") / "token").read_text()
    assert marked(token)  # it runs
    assert backend.jobs.cancel("canceled") == read  # never a raw JSONDecodeError
    deadline = time.monotonic() + 30
    while (job := backend.jobs.get("garbled")).damaged and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.status is JobStatus.COMPLETED and job.exit_code == 0 and not job.damaged, job  # its outcome won
    assert job.mlflow_run_id  # what the supervisor knew before the file was garbled is written back with it
    # The cancel stopped what the job ran, found by the copy of its token (its status could not say it ended).
    assert marked(token) == []
    assert backend.jobs.get("canceled").damaged


def test_a_sweep_record_without_its_fields_reads_as_damaged_not_as_a_sweep_with_no_trials(workspace, tmp_path):
    from mlrunway.local.records import DamagedRecord
    from mlrunway.local.sweep_controller import recorded
    from mlrunway.specs import Choice, Objective, SweepLimits, SweepSpec

    backend = LocalBackend.at(workspace.root)
    code = write_script(tmp_path / "code", "import mlflow\nmlflow.log_metric('acc', 0.5)\n")
    backend.jobs.submit_sweep("swept", SweepSpec(
        trial=CommandJobSpec(code=str(code), command="python script.py --x ${{inputs.x}}", inputs={"x": 1}),
        search_space={"x": Choice(values=[1])}, sampling_algorithm="grid",
        objective=Objective(primary_metric="acc", goal="maximize"), limits=SweepLimits(max_total_trials=1)))
    assert backend.jobs.wait("swept", poll_s=0.1).status is JobStatus.COMPLETED
    record = workspace.job_dir("swept") / "outputs" / "sweep.json"
    record.write_text('{"format_version": 1}')
    result = backend.jobs.sweep_result("swept")  # before: Completed, no trials, no error
    assert result.status is JobStatus.FAILED and not result.trials
    assert result.error.startswith(f"damaged record {record}: has no 'trials'; restore it, or cancel the sweep")
    with pytest.raises(DamagedRecord, match="has no 'trials'"):
        recorded(record)  # a controller started again on it stops, naming it, rather than sweep again from nothing
