"""Generated damage to every kind of state file (issue 59, 1): one damaged record never stops the workspace.

A workspace with healthy records of every kind (``tests/fixtures/workspace-0.2.0``, written by this release) gets one
state file damaged per example: truncated, binary, empty, a field of the wrong JSON type, or a field its readers need
removed. Then every reader of that file must answer with the problem named (``damaged record <file>: ...``), every
page of the UI plugin and every ``show`` of the command line that shows the record must say it is damaged and name
the file, ``list``, ``recover`` and ``delete`` must still serve the healthy records, and no healthy file may change.

Two Hypothesis profiles, both derandomized (the same cases on every run): ``damage-suite``, about 30 s for the test
suite, and ``damage-long`` with ``MLRUNWAY_DAMAGE_EXAMPLES`` examples (``make test-long``).
"""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mlrunway.backend.naming import RunNames
from mlrunway.backend.types import JobStatus, ProvisioningState
from mlrunway.errors import NotFound
from mlrunway.local import formats
from mlrunway.local.__main__ import main
from mlrunway.local.backend import LocalBackend
from mlrunway.local.files import write_json
from mlrunway.local.processes import Identity
from mlrunway.local.records import DamagedRecord
from mlrunway.local.supervisor import JobState
from mlrunway.local.sweep_controller import recorded
from mlrunway.report import collect, render_html
from tests.profiles import suite_and_long

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "workspace-0.2.0"
EXAMPLES_ENV = "MLRUNWAY_DAMAGE_EXAMPLES"
PROFILE = suite_and_long("damage", suite=1000, long=20000, env=EXAMPLES_ENV,
                         suppress=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# The test's own account of what each kind's readers cannot do without (not read from the code under test).
NEEDED = {
    "job.json": ("name", "kind", "spec", "argv", "token"), "status.json": ("status",),
    "outcome.json": ("status", "ended"), "cancel_requested.json": ("reason",), "sweep.json": ("trials",),
    "model.json": ("name", "version", "path"), "endpoint.json": ("name", "keys"), "lease.json": ("holder", "until"),
    "provision.json": ("state",),
}
# One value of each JSON type; a field gets one of another type than its healthy value's (int and float are one).
JSON_TYPES: dict[str, Any] = {"null": None, "boolean": True, "number": 7, "string": "x", "array": [1], "object": {"a": 1}}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "number", float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def fixture_files() -> list[Path]:
    return sorted(p.relative_to(FIXTURE) for p in FIXTURE.rglob("*.json") if p.name in formats.STATE_FILES)


FILES = fixture_files()


@st.composite
def damage(draw: st.DrawFn) -> tuple[Path, str, bytes]:
    """One state file of the fixture, the damage done to it, and the bytes it holds after."""
    file = draw(st.sampled_from(FILES))
    healthy = (FIXTURE / file).read_bytes().strip()
    data = json.loads(healthy)
    variant = draw(st.sampled_from(["truncated", "binary", "empty", "wrong-type", "missing-field"]))
    if variant == "truncated":  # a proper prefix of a JSON object never parses
        return file, variant, healthy[:draw(st.integers(1, len(healthy) - 1))]
    if variant == "binary":
        return file, variant, draw(st.binary(min_size=1, max_size=64).filter(lambda b: b.strip() not in (b"", b"{}")))
    if variant == "empty":
        return file, variant, b""
    if variant == "missing-field":
        field = draw(st.sampled_from(NEEDED[file.name]))
        return file, f"{variant} {field}", json.dumps({k: v for k, v in data.items() if k != field}).encode()
    # A field whose healthy value is null may hold more than one type: only the others are changed.
    field = draw(st.sampled_from(sorted(k for k, v in data.items() if k != formats.KEY and v is not None)))
    other = draw(st.sampled_from(sorted(t for t in JSON_TYPES if t not in (json_type(data[field]), "null"))))
    return file, f"{variant} {field}={other}", json.dumps({**data, field: JSON_TYPES[other]}).encode()


def snapshot(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*.json")}


def healthy_view(backend: LocalBackend) -> dict[str, Any]:
    """What the readers say of every record, as comparable values."""
    return {
        "jobs": {j.name: (j.kind, j.status, j.exit_code, j.error, j.damaged) for j in backend.jobs.list()},
        "models": {(m.name, m.version): (m.properties, m.damaged) for m in backend.models.list()},
        "endpoints": {e.name: (e.traffic, e.provisioning_state, e.damaged) for e in backend.endpoints.list()},
    }


def copy_fixture(root: Path) -> LocalBackend:
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(FIXTURE, root)
    # Its server is this process (alive): recover leaves it be, and reading it scans no processes.
    endpoint = root / "endpoints" / "old-ep" / "endpoint.json"
    me = Identity.of(os.getpid())
    write_json(endpoint, {**json.loads(endpoint.read_text()), "pid": me.pid, "pid_started": me.started})
    return LocalBackend.at(root)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return healthy_view(copy_fixture(tmp_path_factory.mktemp("baseline") / "ws"))


def without(view: dict[str, Any], file: Path) -> dict[str, Any]:
    """``view`` less the record the damaged file belongs to."""
    parts = file.parts
    kept = {kind: dict(records) for kind, records in view.items()}
    if parts[0] == "jobs" and file.name in ("job.json", "status.json"):
        kept["jobs"].pop(parts[1])
    elif file.name == "model.json":
        kept["models"].pop((parts[1], int(parts[2])))
    elif file.name == "endpoint.json":
        kept["endpoints"].pop(parts[1])
    return kept


def named(text: str | None, path: Path) -> bool:
    return text is not None and f"damaged record {path}: " in text


def check_readers(backend: LocalBackend, root: Path, file: Path, content: bytes) -> None:
    """Every reader of ``file`` answers with the problem named."""
    path, kind = root / file, file.name
    if kind in ("job.json", "status.json"):
        job = backend.jobs.get(file.parts[1])
        assert job.damaged and job.status is JobStatus.FAILED and named(job.error, path), job
        assert backend.jobs.cancel(job.name) == job
        assert backend.jobs.wait(job.name) == job  # as get() reads it, never a raw DamagedRecord
    elif kind == "outcome.json":
        if not content.strip():  # blank: reserved, the outcome not yet written (what a running job's holds)
            assert JobState(path.parent).outcome() is None
        else:
            with pytest.raises(DamagedRecord, match=f"damaged record {path}: "):
                JobState(path.parent).outcome()
    elif kind == "cancel_requested.json":
        assert named(JobState(path.parent).cancel_reason(), path)
    elif kind == "sweep.json":
        result = backend.jobs.sweep_result(file.parts[1])
        assert result.status is JobStatus.FAILED and not result.trials and named(result.error, path), result
        with pytest.raises(DamagedRecord, match=f"damaged record {path}: "):
            recorded(path)
    elif kind == "model.json":
        version = next(m for m in backend.models.list() if m.damaged)
        assert (version.name, version.version) == ("old", 1) and named(version.error, path)
        assert backend.models.get("old", 1) == version
        with pytest.raises(NotFound, match=f"has no version .*; damaged record {path}: "):
            backend.models.get("old")  # its latest usable version: none, and why
    elif kind == "endpoint.json":
        endpoint = backend.endpoints.get("old-ep")
        assert endpoint.damaged and named(endpoint.error, path)
    elif kind == "lease.json":  # who holds it cannot be known: nobody takes it
        assert named(backend.endpoints.lease("old-ep", "another run", 60), path)
    elif kind == "provision.json":
        deployment = backend.endpoints.get_deployment("old-ep", "blue")
        assert deployment.provisioning_state is ProvisioningState.FAILED and named(deployment.error, path)
    else:
        raise AssertionError(f"no reader checked for {kind}")


def shown(page: Any) -> str:
    """A page's text as a reader sees it (its escaping undone)."""
    return html.unescape(page if isinstance(page, str) else bytes(page.body).decode())


def check_pages(backend: LocalBackend, root: Path, file: Path) -> None:
    """Every page of the UI plugin that shows the record says it is damaged, naming the file (issue 76): not a job
    without an MLflow run, not a plain custom model, not a deployment failed for no reason."""
    from mlrunway.airflow import views

    path, kind = root / file, file.name
    if kind in ("job.json", "status.json"):
        page = shown(views.job_page(backend, file.parts[1]))
    elif kind == "model.json":
        page = shown(views.version_page(backend, "old", "1"))
    elif kind == "endpoint.json":
        page = shown(views.endpoint_page(backend, "old-ep"))
    elif kind == "provision.json":  # the deployment's row says why it failed
        assert named(shown(views.endpoint_page(backend, "old-ep")).split("<td>blue</td>")[1], path)
        return
    elif kind == "sweep.json":
        assert named(shown(render_html(collect(backend, RunNames.of_sweep(file.parts[1])), b"")), path)
        return
    else:  # no page shows it: what the backend acts on (a lease, an outcome, a cancel request)
        assert kind in ("outcome.json", "cancel_requested.json", "lease.json"), kind
        return
    assert "Its record is damaged: " in page and named(page, path), page


def check_cli(root: Path, file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command line's view of the record says it is damaged, naming the file (issue 76): never a sweep that
    "Completed" with no trials."""
    if file.name in ("job.json", "status.json", "sweep.json"):
        command = ["jobs", "show", file.parts[1]]
    elif file.name == "endpoint.json":
        command = ["endpoints", "show", "old-ep"]
    else:  # the CLI shows no more of it than its readers do
        return
    capsys.readouterr()
    assert main([*command, "--workspace", str(root)]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["damaged"] is True and named(view["error"], root / file), view
    assert view.get("status", view.get("provisioning_state")) == "Failed", view


@settings(settings.get_profile(PROFILE))
@given(case=damage())
def test_one_damaged_state_file_is_named_by_its_readers_and_stops_nothing_else(tmp_path, baseline, case, capsys):
    file, variant, content = case
    event(f"{file.name}: {variant.split()[0]}")  # --hypothesis-show-statistics: every kind meets every damage
    root = tmp_path / "ws"
    backend = copy_fixture(root)
    (root / file).write_bytes(content)
    before = snapshot(root)

    check_readers(backend, root, file, content)
    check_cli(root, file, capsys)
    check_pages(backend, root, file)
    assert without(healthy_view(backend), file) == without(baseline, file)  # list serves every healthy record
    damaged_job = file.name in ("job.json", "status.json")
    assert main(["recover", "--workspace", str(root)]) == (1 if damaged_job or file.name == "endpoint.json" else 0)
    out = capsys.readouterr().out
    assert not damaged_job or f"job {file.parts[1]}: not recovered: damaged record {root / file}" in out
    assert snapshot(root) == before  # nothing healthy changed (nor the damaged file: it is the evidence)
    if file.name == "endpoint.json":  # delete still ends it: its server found without the record
        assert main(["endpoints", "delete", "old-ep", "--workspace", str(root)]) == 0
        assert not (root / "endpoints" / "old-ep").exists()
        assert {f for f in snapshot(root)} == {f for f in before if f.parts[:2] != ("endpoints", "old-ep")}


def test_the_fixture_holds_every_kind_of_state_file_and_reads_healthy(tmp_path, baseline):
    assert {f.name for f in FILES} == set(formats.STATE_FILES)
    assert not any(damaged for records in baseline.values() for *_, damaged in records.values())
    assert baseline["jobs"]["old-0123abcd-canceled"][1] is JobStatus.CANCELED
    backend = copy_fixture(tmp_path / "ws")
    assert JobState(tmp_path / "ws" / "jobs" / "old-0123abcd-canceled").cancel_reason() == \
        "canceled by the fixture's writer"
    assert backend.jobs.sweep_result("old-0123abcd-sweep").status is JobStatus.COMPLETED
    assert backend.endpoints.get_deployment("old-ep", "blue").provisioning_state is ProvisioningState.SUCCEEDED
    assert backend.endpoints.lease("old-ep", "someone else", 60) is None  # the writer's lease ran out long ago
