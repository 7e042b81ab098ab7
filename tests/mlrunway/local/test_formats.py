"""Format versions of a workspace's state files: one written by mlrunway 0.1.0 (tests/fixtures/workspace-0.1.0,
written by that release) is migrated once when opened; one of the current format opens as it is; a newer one is
refused with the release that writes it named."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from mlrunway.backend.types import JobStatus
from mlrunway.local import formats
from mlrunway.local.backend import LocalBackend
from mlrunway.local.formats import KEY, WorkspaceFormatError
from mlrunway.local.serving import provision
from mlrunway.local.serving.state import EndpointState
from mlrunway.local.sweep_controller import recorded
from mlrunway.specs import CommandJobSpec
from tests.conftest import write_script

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "workspace-0.1.0"


@pytest.fixture
def old(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(FIXTURE, root)
    return root


def state_files(root: Path) -> list[Path]:
    return [path for path, _lock in formats.state_files(root) if path.exists()]


def test_the_fixture_is_what_0_1_0_wrote_every_kind_of_state_file_without_a_version(old):
    found = {path.name for path in state_files(old)} | {p.name for p in old.rglob("outcome.json")}
    assert found == set(formats.STATE_FILES) - {"cancel_requested.json"}
    assert not any(KEY in json.loads(path.read_text()) for path in state_files(old))
    assert not (old / formats.MARKER).exists()


def test_a_workspace_written_by_0_1_0_is_migrated_once_and_reads_as_it_did(old):
    backend = LocalBackend.at(old)
    marker = json.loads((old / formats.MARKER).read_text())
    assert marker[KEY] == formats.FORMAT and marker["migrated_files"] == len(state_files(old)) == 13
    assert all(json.loads(path.read_text())[KEY] == formats.FORMAT for path in state_files(old))
    # What 0.1.0 recorded reads the same through this release's readers.
    jobs = {job.name: job for job in backend.jobs.list()}
    assert {name: job.status for name, job in jobs.items()} == {
        "old-0123abcd-train": JobStatus.COMPLETED, "old-0123abcd-sweep": JobStatus.COMPLETED,
        "old-0123abcd-sweep_trial_0": JobStatus.COMPLETED, "old-0123abcd-sweep_trial_1": JobStatus.COMPLETED}
    assert jobs["old-0123abcd-train"].mlflow_run_id == "f6b4c3b50422468c9e10062ecd733f10"
    sweep = recorded(old / "jobs" / "old-0123abcd-sweep" / "outputs" / "sweep.json")
    assert sweep.sampler_version == 2 and sorted(sweep.trials) == ["old-0123abcd-sweep_trial_0", "old-0123abcd-sweep_trial_1"]
    assert backend.models.get("old", 1).properties["source_job"] == "old-0123abcd-train"
    state = EndpointState.load(old / "endpoints" / "old-ep")
    assert state.traffic == {"blue": 100} and state.deployments["blue"].model == "old:1"
    assert provision.read(old / "endpoints" / "old-ep", "blue")["state"] == "Succeeded"
    # Every record passes this release's shape checks (mlrunway.local.records): none reads as damaged.
    assert not any(job.damaged for job in jobs.values()) and not any(m.damaged for m in backend.models.list())
    assert not any(e.damaged for e in backend.endpoints.list())
    assert backend.jobs.sweep_result("old-0123abcd-sweep").error is None
    assert "damaged" not in (backend.endpoints.get_deployment("old-ep", "blue").error or "")  # its server is gone
    # Opened again (another worker, the next task): nothing is rewritten.
    stamps = {path: path.stat().st_mtime_ns for path in state_files(old)}
    LocalBackend.at(old)
    assert {path: path.stat().st_mtime_ns for path in state_files(old)} == stamps


def test_processes_opening_an_old_workspace_together_migrate_it_once(old):
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            LocalBackend.at(old)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.loads((old / formats.MARKER).read_text())["migrated_files"] == 13  # the first one's count, once


def test_a_sweep_recorded_before_sampler_versions_keeps_version_1(old):
    path = old / "jobs" / "old-0123abcd-sweep" / "outputs" / "sweep.json"
    record = json.loads(path.read_text())
    del record["sampler_version"]  # as recorded before issue 28
    path.write_text(json.dumps(record))
    assert recorded(path).sampler_version == 1  # read in memory, before any migration
    LocalBackend.at(old)
    assert json.loads(path.read_text())["sampler_version"] == 1 and recorded(path).sampler_version == 1


def test_what_this_release_writes_carries_its_format_and_opens_unchanged(tmp_path):
    backend = LocalBackend.at(tmp_path / "ws")
    assert json.loads((tmp_path / "ws" / formats.MARKER).read_text())["migrated_files"] == 0
    code = write_script(tmp_path / "code", "print('ok')\n")
    backend.jobs.submit("fresh", CommandJobSpec(code=str(code), command="python script.py"))
    assert backend.jobs.wait("fresh", timeout=60).status is JobStatus.COMPLETED
    job = tmp_path / "ws" / "jobs" / "fresh"
    for name in ("job.json", "status.json"):
        assert json.loads((job / name).read_text())[KEY] == formats.FORMAT
    assert json.loads((job / "outcome.json").read_text())[KEY] == formats.FORMAT
    stamps = {path: path.stat().st_mtime_ns for path in state_files(tmp_path / "ws")}
    LocalBackend.at(tmp_path / "ws")
    assert {path: path.stat().st_mtime_ns for path in state_files(tmp_path / "ws")} == stamps


def test_a_file_or_workspace_of_a_newer_format_is_refused_with_what_to_do(old):
    LocalBackend.at(old)
    status = old / "jobs" / "old-0123abcd-train" / "status.json"
    status.write_text(json.dumps({**json.loads(status.read_text()), KEY: formats.FORMAT + 1}))
    with pytest.raises(WorkspaceFormatError, match=rf"status.json: {KEY} {formats.FORMAT + 1} is written by a newer "
                                                   r"mlrunway.*upgrade mlrunway wherever this workspace is used"):
        LocalBackend.at(old).jobs.get("old-0123abcd-train")
    (old / formats.MARKER).write_text(json.dumps({KEY: formats.FORMAT + 1}))
    with pytest.raises(WorkspaceFormatError, match=rf"workspace.json: {KEY} {formats.FORMAT + 1}"):
        LocalBackend.at(old)
    (old / formats.MARKER).write_text("{not json")
    with pytest.raises(WorkspaceFormatError, match="unreadable.*remove it to have the workspace migrated again"):
        LocalBackend.at(old)


def test_a_workspace_older_than_this_release_migrates_is_refused_naming_the_release_that_does(old, monkeypatch):
    """When a later release stops migrating format 0 (OLDEST moves up), a 0.1.0 workspace is refused before
    anything is read or rewritten, naming the release to open it with first."""
    monkeypatch.setattr(formats, "OLDEST", 1)
    before = {path: path.read_bytes() for path in state_files(old)}
    with pytest.raises(WorkspaceFormatError, match=rf"{KEY} 0 is older than this mlrunway .* migrates; open the "
                                                   r"workspace once with mlrunway 0.2.0, which migrates it"):
        LocalBackend.at(old)
    assert {path: path.read_bytes() for path in state_files(old)} == before
    assert not (old / formats.MARKER).exists()


def test_a_job_recorded_before_its_specs_said_type_reads_as_if_it_did_without_a_warning(recwarn):
    """Issue 30 renamed a policy's, an expression's and a distribution's kind to type before format 1: such a
    job.json (format 0) is migrated (mlrunway.compat), not read through the users' one-release warning."""
    from mlrunway.specs import SweepSpec

    sweep = {"trial": {"code": "/c", "command": "python t.py --lr ${{inputs.lr}}", "inputs": {"lr": 0.1},
                       "distribution": {"kind": "pytorch", "process_count_per_instance": 2}},
             "search_space": {"lr": {"kind": "uniform", "min_value": 0.01, "max_value": 0.1}},
             "objective": {"primary_metric": "acc", "goal": "maximize"}, "sampling_algorithm": {"type": "random"},
             "seed": 1, "limits": {"max_total_trials": 2},
             "early_termination": {"kind": "bandit", "slack_factor": 0.1, "evaluation_interval": 1,
                                   "delay_evaluation": 2}}
    job = formats.current("jobs/x/job.json", {"kind": "sweep", "spec": {"distribution": None}, "sweep": sweep})
    assert job["kind"] == "sweep" and job["spec"] == {"distribution": None}  # the job's own kind is not a type
    spec = SweepSpec.from_dict(job["sweep"])
    assert spec.early_termination.type == "bandit" and spec.trial.distribution.type == "pytorch"
    assert spec.search_space["lr"].type == "uniform"
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]
    newer = formats.current("jobs/y/job.json", {KEY: 1, "sweep": sweep})  # format 1 is read as it is
    assert newer["sweep"]["early_termination"]["kind"] == "bandit"
