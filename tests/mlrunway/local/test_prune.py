"""Pruning a workspace that served a weekly schedule: old runs, versions and captures go; the production endpoint,
its aliases, every version that ever held production or previous, open runs and every run a kept report links to
stay."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from mlflow.exceptions import MlflowException

from mlrunway.backend.capture import DataCollector
from mlrunway.backend.naming import RunNames
from mlrunway.backend.retention import RetentionPolicy
from mlrunway.backend.types import DeploymentSettings, EndpointSettings, JobStatus
from mlrunway.errors import MlrunwayError, SpecError
from mlrunway.local import mlflow_registry, prune, tracking
from mlrunway.local.backend import LocalBackend
from mlrunway.report import save_run_report
from mlrunway.specs import Choice, CommandJobSpec, Objective, SweepLimits, SweepSpec
from tests.conftest import write_script

pytestmark = pytest.mark.slow

WEEKS = 8
SWEEPS = (5, 7)  # the weeks whose run has a sweep (and so a report)
POLICY = RetentionPolicy(keep_runs=2, keep_versions=2, capture_days=30)
MAKE_MODEL = "import os, sys\nos.makedirs('outputs/model', exist_ok=True)\nopen('outputs/model/w.txt', 'w').write(sys.argv[1])\n"
SCORE = "def init():\n    pass\n\ndef run(raw):\n    return {'ok': 1}\n"


def week(index: int) -> RunNames:
    return RunNames("prod", f"{index:08x}")


@pytest.fixture(scope="module")
def weekly(tmp_path_factory: pytest.TempPathFactory):
    """Eight weekly runs (a training job each, a sweep of two trials in three), a version registered from each,
    promotions moving ``production`` and ``previous``, a run still going, a job outside any DAG, and an endpoint
    serving the production version and, at 0%, a version exported from an older one, capturing its requests."""
    tmp = tmp_path_factory.mktemp("weekly")
    backend = LocalBackend.at(tmp / "ws")
    code = write_script(tmp / "code", MAKE_MODEL, "make.py")
    write_script(code, "import time\ntime.sleep(300)\n", "wait.py")
    write_script(code, MAKE_MODEL + "import mlflow\nmlflow.log_metric('acc', float(sys.argv[1]))\n", "trial.py")
    write_script(code, SCORE, "score.py")
    names = [week(i) for i in range(WEEKS)]
    open_run = RunNames("prod", "ffffffff")
    backend.jobs.submit(open_run.train_job, CommandJobSpec(code=str(code), command="python wait.py"))
    for i, run in enumerate(names):
        backend.jobs.submit(run.train_job, CommandJobSpec(code=str(code), command=f"python make.py {i}"))
        if i in SWEEPS:
            backend.jobs.submit_sweep(run.sweep, SweepSpec(
                trial=CommandJobSpec(code=str(code), command="python trial.py ${{inputs.x}}", inputs={"x": 1}),
                search_space={"x": Choice(values=[1, 2])}, sampling_algorithm="grid",
                objective=Objective(primary_metric="acc", goal="maximize"),
                limits=SweepLimits(max_total_trials=2, max_concurrent_trials=2)), poll_s=0.2)
    backend.jobs.submit("adhoc", CommandJobSpec(code=str(code), command="python make.py adhoc"))
    for job in backend.jobs.list():
        if job.name != open_run.train_job:
            assert backend.jobs.wait(job.name, timeout=120).status is JobStatus.COMPLETED, job.name
    for i, run in enumerate(names):
        backend.models.register("prod", "model", base=backend.job_outputs(run.train_job),
                                properties={"source_job": run.train_job, **({"sweep": run.sweep} if i in SWEEPS else {})})
        if i in SWEEPS:
            save_run_report(backend, run, backend.reports)
    backend.models.register("prod-onnx", "model", base=backend.job_outputs(names[3].train_job),
                            properties={"source_model": "prod:4"})
    for version, alias in ((2, "production"), (3, "production"), (2, "previous"), (5, "production"), (3, "previous")):
        backend.models.set_alias("prod", version, alias)
    backend.endpoints.create_or_update("prod-ep", EndpointSettings(workers=1))
    collector = DataCollector.parse({"collections": {"request": {"enabled": "true"}}})
    for deployment, model in (("blue", "prod:5"), ("green", "prod-onnx:1")):
        backend.endpoints.create_or_update_deployment("prod-ep", deployment, DeploymentSettings(
            model=model, code_dir=str(code), data_collector=collector))
    backend.endpoints.set_traffic("prod-ep", {"blue": 100, "green": 0})
    assert json.loads(backend.endpoints.invoke("prod-ep", payload={"x": 1})) == {"ok": 1}
    deadline = time.monotonic() + 10
    while not list((tmp / "ws" / "modelDataCollector").rglob("*.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.1)
    yield backend, names, open_run
    backend.endpoints.delete("prod-ep")
    backend.jobs.cancel(open_run.train_job)


def jobs_of(run: RunNames, backend: LocalBackend) -> list[str]:
    return sorted(j.name for j in backend.jobs.list() if j.name.startswith(f"{run.prefix}-{run.run_key}-"))


def test_a_dry_run_lists_what_would_go_and_removes_nothing(weekly):
    backend, names, open_run = weekly
    before = sorted(p.name for p in backend.workspace.jobs.iterdir())
    plan = backend.prune(POLICY, dry_run=True)
    removed = {(item.kind, item.name) for item in plan.removed}
    gone_runs = (names[0], names[5])  # the oldest, and week 5: past the last two runs, its version past the newest two
    assert {name for kind, name in removed if kind == "job"} == {j for run in gone_runs for j in jobs_of(run, backend)}
    assert len([kind for kind, _ in removed if kind == "mlflow_run"]) == 5  # week 0's train; week 5's, its sweep, 2 trials
    assert {name for kind, name in removed if kind == "report"} == {names[5].sweep}
    assert {name for kind, name in removed if kind == "model_version"} == {"prod:1", "prod:6"}
    assert not [kind for kind, _ in removed if kind == "capture"]  # captured minutes ago
    assert plan.kept == {
        f"run {open_run.endpoint}": f"a job has not ended ({open_run.train_job} is Running)",
        f"run {names[1].endpoint}": "it produced prod:2 (held the previous alias)",
        f"run {names[2].endpoint}": "it produced prod:3 (holds the previous alias)",
        f"run {names[3].endpoint}": "it produced prod:4 (prod-onnx:1 was exported from it (deployment prod-ep/green serves it))",
        f"run {names[4].endpoint}": "it produced prod:5 (holds the production alias)",
        "model prod:2": "held the previous alias", "model prod:3": "holds the previous alias",
        "model prod:4": "prod-onnx:1 was exported from it (deployment prod-ep/green serves it)",
        "model prod:5": "holds the production alias"}
    assert plan.bytes > 0 and plan.summary().startswith("dry run: 5 jobs, 5 mlflow_runs, 2 model_versions, 1 report;")
    assert sorted(p.name for p in backend.workspace.jobs.iterdir()) == before


def test_prune_keeps_production_its_aliases_and_every_run_a_kept_report_links_to(weekly):
    backend, names, open_run = weekly
    runs = {job.name: job.mlflow_run_id for job in backend.jobs.list()}
    plan = backend.prune(POLICY)
    mlflow = tracking.client(backend.workspace)
    gone = [item.name for item in plan.removed if item.kind == "job"]
    for name in gone:
        assert not (backend.workspace.jobs / name).exists()
        with pytest.raises(MlflowException):
            mlflow.get_run(runs[name])
        assert not (backend.workspace.root / "artifacts" / runs[name]).exists()
    for name in set(runs) - set(gone):  # every other run, the open one included, is whole
        assert backend.jobs.get(name).mlflow_run_id == runs[name] and mlflow.get_run(runs[name])
    # The production endpoint serves on; its aliases and their versions are intact, in the folder and in MLflow.
    assert json.loads(backend.endpoints.invoke("prod-ep", payload={"x": 2})) == {"ok": 1}
    assert backend.models.alias("prod", "production").version == 5
    assert backend.models.alias("prod", "previous").version == 3
    kept = [2, 3, 4, 5, 7, 8]
    assert [m.version for m in backend.models.list("prod")] == kept
    registry = mlflow_registry.client(backend.workspace)
    assert sorted(int(v.version) for v in registry.search_model_versions("name = 'prod'")) == kept
    assert not mlflow_registry.artifact_dir(backend.workspace, "prod", 1).exists()
    # The kept report (week 7's) links to jobs and runs that all exist; the removed runs' reports are gone.
    report = json.loads((backend.reports / names[7].sweep / "report.json").read_text())
    linked = [report["sweep"], *(trial["name"] for trial in report["trials"])]
    assert len(linked) == 3 and all(mlflow.get_run(backend.jobs.get(name).mlflow_run_id) for name in linked)
    assert not (backend.reports / names[0].sweep).exists() and not (backend.reports / names[5].sweep).exists()
    # Numbering goes on after the newest; a second prune finds nothing more.
    assert backend.models.register("prod", "model", base=backend.job_outputs(names[7].train_job)).version == 9
    assert backend.prune(POLICY).removed == []  # prod:7 is past the newest two now, but its run is one of the last two


def test_captures_go_after_their_days_and_the_rest_stays(weekly):
    backend, _names, _open = weekly
    captures = backend.workspace.root / "modelDataCollector"
    assert list(captures.rglob("*.jsonl"))
    month = time.time() + 31 * 86400
    plan = prune.prune(backend.workspace, POLICY, backend.reports, now=month, dry_run=True)
    assert {item.kind for item in plan.removed} == {"capture"} and plan.removed[0].name.startswith("prod-ep/blue/request/")
    prune.prune(backend.workspace, POLICY, backend.reports, now=month)
    assert not list(captures.rglob("*.jsonl"))


def test_a_policy_names_its_wrong_field(tmp_path):
    with pytest.raises(SpecError, match="retention.keep_versions: 0 is not a whole number of at least 1"):
        RetentionPolicy.parse({"keep_versions": 0})
    with pytest.raises(SpecError, match="retention.capture_day: is not a retention setting"):
        RetentionPolicy.parse({"capture_day": 3})
    with pytest.raises(SpecError, match="retention.capture_days: -1 is not a positive number of days"):
        RetentionPolicy.parse({"capture_days": -1})
    with pytest.raises(SpecError, match="retention: is not JSON"):
        LocalBackend.from_connection({"workspace": str(tmp_path / "ws"), "retention": "{keep"})
    assert LocalBackend.from_connection({"workspace": str(tmp_path / "ws"), "retention": '{"keep_runs": 3}'}).retention \
        == RetentionPolicy(keep_runs=3)


def test_a_run_whose_state_or_an_endpoint_whose_state_cannot_be_read_is_no_evidence(tmp_path):
    from tests.mlrunway.local.test_formats import FIXTURE

    root = tmp_path / "ws"
    shutil.copytree(FIXTURE, root)
    shutil.rmtree(root / "endpoints" / "old-ep")  # it serves old:1, which would keep the run that produced it
    newer = root / "jobs" / "old-89abcdef-train"  # a later run of the same DAG
    shutil.copytree(root / "jobs" / "old-0123abcd-train", newer)
    status = json.loads((newer / "status.json").read_text())
    (newer / "status.json").write_text(json.dumps({**status, "created": status["created"] + 3600}))
    backend = LocalBackend.at(root)
    policy = RetentionPolicy(keep_runs=1)
    assert {i.name for i in backend.prune(policy, dry_run=True).removed if i.kind == "job"} == {
        "old-0123abcd-train", "old-0123abcd-sweep", "old-0123abcd-sweep_trial_0", "old-0123abcd-sweep_trial_1"}
    (root / "jobs" / "old-0123abcd-sweep_trial_1" / "status.json").write_text('{"status": "Compl')
    plan = backend.prune(policy, dry_run=True)
    assert plan.kept["run old-0123abcd"] == "a job has not ended (old-0123abcd-sweep_trial_1's state is unreadable)"
    assert not [i for i in plan.removed if i.kind == "job"]
    (root / "endpoints" / "old-ep").mkdir(parents=True)
    (root / "endpoints" / "old-ep" / "endpoint.json").write_text("{")
    with pytest.raises(MlrunwayError, match="endpoint old-ep: its state cannot be read .* nothing pruned"):
        backend.prune(policy, dry_run=True)
