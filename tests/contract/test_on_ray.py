"""Every test that needs a Ray cluster, in this one file: under ``--dist loadfile`` its cluster (tests/ray_cluster.py:
two real nodes and a real MLflow server, token auth on, bound to 127.0.0.1) is set up once per worker that runs it.
The contract suite on the Ray backend is collected here (:func:`~tests.contract.conftest.collect_on`), then what
only the Ray backend promises. Another file that asks for the cluster fails at collection (tests/conftest.py)."""

from __future__ import annotations

import itertools
import json
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from mlrunway.backend.types import JobStatus
from mlrunway.ray.backend import RayBackend
from mlrunway.ray.jobs import RayJobs
from tests.chaos.test_endpoint_fuzz import (  # noqa: F401 - collected here over this file's Ray endpoint
    TIMEOUT_S,
    model,
    test_a_client_that_never_reads_its_answers_is_dropped_after_the_send_timeout,
    test_a_refusal_on_a_pipelined_connection_follows_the_answers_before_it,
    test_a_thousand_pipelined_requests_on_one_connection_are_all_answered,
    test_every_hostile_class_gets_its_status_while_valid_traffic_flows,
    test_generated_bodies_get_their_status_class,
    test_generated_heads_are_served_or_refused_by_size_and_count,
    test_generated_pipelines_are_answered_in_order,
    test_generated_slow_clients_are_closed_within_their_timeout,
)
from tests.contract.conftest import Driver, RayFactory, collect_on

collect_on("ray", globals())


def test_every_listener_of_the_cluster_and_its_tracking_server_is_on_loopback(costly_set_up: RayFactory) -> None:
    listeners = costly_set_up.cluster.listeners()
    assert listeners, "the cluster's processes listen nowhere: the check found none of them"
    assert [(host, port) for host, port, _ in listeners if host != "127.0.0.1"] == []


def test_the_jobs_api_refuses_a_request_without_the_token(costly_set_up: RayFactory) -> None:
    cluster = costly_set_up.cluster
    assert requests.get(f"{cluster.address}/api/version", timeout=10).status_code == 401
    backend = RayBackend.from_connection(costly_set_up.connection("no-token"))  # loopback: accepted, but refused
    with pytest.raises(Exception, match="token is missing or wrong"):
        backend.jobs.api.version()


def test_an_input_with_shell_syntax_reaches_the_command_as_one_argument(backend: RayBackend, driver: Driver,
                                                                         tmp_path: Path) -> None:
    literal = "a; touch pwned $(id) `id` > x"
    spec = driver._script_spec("ctr-shell", "import sys, json\nprint(json.dumps(sys.argv[1:]))\n",
                               "${{inputs.text}}", inputs={"text": literal})
    backend.jobs.submit("ctr-shell", spec)
    info = backend.jobs.wait("ctr-shell", timeout=driver.wait_s)
    assert info.status is JobStatus.COMPLETED, info.error
    assert json.loads(list(backend.jobs.logs("ctr-shell"))[0]) == [literal]
    entrypoint = backend.jobs.api.job(backend.jobs.submission_id("ctr-shell"))["entrypoint"]
    assert shlex.split(entrypoint)[-1] == literal and not (Path(info.outputs or "").parent / "pwned").exists()


def test_the_token_is_in_no_jobs_environment_or_metadata(backend: RayBackend, driver: Driver) -> None:
    driver.sweep(backend, "ctr-token", [[0.5]])
    assert backend.jobs.wait("ctr-token", timeout=driver.wait_s).status is JobStatus.COMPLETED
    token = backend.connection.token
    assert token
    for job in backend.jobs.api.jobs():
        assert token not in json.dumps(job), f"Ray job {job['submission_id']} carries the token"
    kept = backend.jobs.root / ".token"
    assert kept.read_text() == token and kept.stat().st_mode & 0o077 == 0


def test_a_job_the_cluster_no_longer_knows_reads_failed_lost_with_the_head_never_not_found(
        backend: RayBackend, driver: Driver) -> None:
    spec = driver._script_spec("ctr-lost", "import time\ntime.sleep(300)\n")
    backend.jobs.submit("ctr-lost", spec)
    submission = backend.jobs.submission_id("ctr-lost")
    backend.jobs.api.stop(submission)  # as a head restart would: Ray forgets the job, its entry recorded nothing
    while backend.jobs.api.job(submission)["status"] not in ("STOPPED", "FAILED"):
        time.sleep(0.2)
    (backend.jobs.record("ctr-lost") / "outcome.json").unlink(missing_ok=True)
    backend.jobs.api.delete(submission)
    info = backend.jobs.get("ctr-lost")
    assert info.status is JobStatus.FAILED and "lost with the head" in (info.error or "")
    assert backend.jobs.lost("ctr-lost")


@pytest.mark.long  # moved out of make test: it passed 22 minutes with the Ray file (issue 79)
def test_the_entrypoint_asks_for_its_profiles_resources_and_never_runs_on_the_head(
        backend: RayBackend, driver: Driver) -> None:
    completed_job = driver.job_spec()
    backend.jobs.submit("ctr-where", completed_job)
    assert backend.jobs.wait("ctr-where", timeout=driver.wait_s).status is JobStatus.COMPLETED
    details = backend.jobs.api.job(backend.jobs.submission_id("ctr-where"))
    head = [n for n in requests.get(f"{backend.connection.address}/nodes?view=summary", timeout=10,
                                    headers={"Authorization": f"Bearer {backend.connection.token}"}
                                    ).json()["data"]["summary"] if n["raylet"]["isHeadNode"]]
    asked = json.loads((backend.jobs.record("ctr-where") / "job.json").read_text())["body"]
    assert asked["entrypoint_num_cpus"] == 1 and details["driver_node_id"] != head[0]["raylet"]["nodeId"]


@pytest.mark.long
def test_a_sweeps_controller_stopped_mid_sweep_is_resubmitted_and_takes_the_sweep_on(backend: RayBackend,
                                                                                    driver: Driver) -> None:
    driver.sweep(backend, "ctr-resume", [[0.5, 0.6, 0.7, 0.8], [0.4, 0.5, 0.6, 0.7], [0.9, 0.9, 0.9, 0.9]],
                 pause=1.0)
    jobs: RayJobs = backend.jobs
    first = jobs.submission_id("ctr-resume")
    while not jobs.list("ctr-resume_trial_"):
        time.sleep(0.2)
    jobs.api.stop(first)  # not a cancel: the controller dies, the sweep goes on
    info = jobs.wait("ctr-resume", timeout=120)
    result = jobs.sweep_result("ctr-resume")
    assert info.status is JobStatus.COMPLETED, info.error
    assert info.properties["submission_id"] == f"{first}.c1"
    assert [t.status for t in result.trials] == [JobStatus.COMPLETED] * 3 and len(result.trials) == 3
    assert result.best_trial == "ctr-resume_trial_2"


def test_the_demo_dag_runs_all_six_tasks_on_ray_its_endpoint_served_from_a_worker_node(
        costly_set_up: RayFactory, airflow_db: str, digits: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Train, sweep, pick the best, export, the blue deployment (smoke-tested through the endpoint's server, a Ray job
    whose process runs on the worker node: the head offers no CPU) and cleanup, all on the cluster; nothing of the run left running."""
    from tests.e2e.test_dag_local import SMALL, run_dag

    fields = costly_set_up.connection("dag", profiles={"cpu": {"num_cpus": 1}})
    monkeypatch.setenv("AIRFLOW_CONN_MLRUNWAY_DEFAULT", json.dumps(
        {"conn_type": "mlrunway_ray", "password": costly_set_up.cluster.token, "extra": fields}))
    import mlrunway.ray.endpoints as ray_endpoints

    made: list[str] = []  # every endpoint key the run makes, to look for where it must never be
    real_key = ray_endpoints.new_key

    def recorded_key() -> str:
        made.append(real_key())
        return made[-1]

    monkeypatch.setattr(ray_endpoints, "new_key", recorded_key)
    started = time.monotonic()
    small = {**SMALL, "epochs": 6, "max_trials": 2, "delay_evaluation": 2}
    run, results, states = run_dag({**small, "data_dir": str(digits)}, tmp_path / "ws", monkeypatch)
    took = time.monotonic() - started
    assert set(states.values()) == {"success"}, states
    backend = RayBackend.from_connection(fields, costly_set_up.cluster.token)
    assert results["train"]["status"] == "Completed" and results["train"]["metrics"]["best_val_acc"] > 0.3
    trials = backend.jobs.sweep_result(results["sweep"]["sweep_name"]).trials
    assert len(trials) == results["sweep"]["trials"] == small["max_trials"]
    exported = backend.models.get(results["export_onnx"]["model_name"], results["export_onnx"]["model_version"])
    assert exported.format == "onnx"
    servers = [job for job in backend.endpoints.serving.list() if "-server-" in job.name]
    assert servers and all(job.status.is_terminal() for job in backend.endpoints.serving.list())  # cleanup stopped them
    head = _head_node(backend)
    for server in servers:  # its driver (asking for nothing) keeps it; its process runs on an actor with the profile
        assert json.loads((backend.endpoints.serving.record(server.name) / "started.json").read_text())["node"] != head
    assert backend.endpoints.list() == []  # cleanup deleted the endpoint
    assert [job.name for job in backend.jobs.list() if not job.status.is_terminal()] == []
    shown = json.dumps(results, default=str) + json.dumps(backend.jobs.api.jobs()) + "".join(
        "\n".join(backend.endpoints.serving.logs(job.name)) for job in backend.endpoints.serving.list())
    assert len(made) == 2 and not [key for key in made if key in shown]  # no key in an XCom, a Ray job or a log
    print(f"the DAG on Ray: {took:.1f} s")


def _head_node(backend: RayBackend) -> str:
    nodes = requests.get(f"{backend.connection.address}/nodes?view=summary", timeout=10,
                         headers={"Authorization": f"Bearer {backend.connection.token}"}).json()["data"]["summary"]
    return str(next(n["raylet"]["nodeId"] for n in nodes if n["raylet"]["isHeadNode"]))


def test_only_this_file_may_ask_for_the_cluster() -> None:
    """The collection rule of tests/conftest.py: a test of another file that asks for a costly set-up fails the
    collection, naming it; this file's own pass."""
    from types import SimpleNamespace

    from tests.conftest import pytest_collection_modifyitems

    def item(path: str) -> Any:
        return SimpleNamespace(nodeid=f"{path}::test_x", path=Path(path), fixturenames=("costly_set_up",),
                               callspec=SimpleNamespace(params={"costly_set_up": "ray"}))

    pytest_collection_modifyitems([item("tests/contract/test_on_ray.py")])
    with pytest.raises(pytest.UsageError, match="move these tests there: tests/e2e/test_elsewhere.py::test_x"):
        pytest_collection_modifyitems([item("tests/contract/test_on_ray.py"), item("tests/e2e/test_elsewhere.py")])


@pytest.mark.long  # moved out of make test: it passed 22 minutes with the Ray file (issue 79)
def test_preflight_refuses_a_cluster_whose_python_lacks_what_the_controller_imports(
        costly_set_up: RayFactory, driver_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrunway.errors import SpecError
    from mlrunway.ray import preflight

    backend = RayBackend.from_connection(costly_set_up.connection("probe-lacks"), costly_set_up.cluster.token)
    monkeypatch.setattr(preflight, "NEEDS", (*preflight.NEEDS, "a_module_no_cluster_has"))
    with pytest.raises(SpecError, match="connection.address: the cluster's Python lacks a_module_no_cluster_has"):
        backend.jobs.validate(Driver(driver_root).job_spec())
    monkeypatch.setattr(preflight, "NEEDS", preflight.NEEDS[:-1])
    backend = RayBackend.from_connection(costly_set_up.connection("probe-has"), costly_set_up.cluster.token)
    backend.jobs.validate(Driver(driver_root).job_spec())  # it has them: kept for the session, asked no more
    kept = json.loads((backend.jobs.root / ".probe.json").read_text())
    assert kept["session"] == backend.jobs.api.version()["session_name"]


@pytest.fixture
def driver_root(tmp_path: Path) -> Path:
    return tmp_path


@pytest.mark.long
def test_a_canceled_sweep_leaves_no_ray_job_of_its_own_running(backend: RayBackend, driver: Driver) -> None:
    driver.sweep(backend, "ctr-cancel", [[0.5] * 60, [0.6] * 60], pause=1.0)
    jobs: RayJobs = backend.jobs
    while len([t for t in jobs.list("ctr-cancel_trial_") if t.status is JobStatus.RUNNING]) < 2:
        time.sleep(0.2)
    info = jobs.cancel("ctr-cancel", "the run was canceled")
    assert info.status is JobStatus.CANCELED
    prefix = f"{backend.connection.namespace}."
    running = [job["submission_id"] for job in jobs.api.jobs()
               if job["submission_id"].startswith(prefix) and job["status"] in ("PENDING", "RUNNING")]
    assert running == []
    assert {t.status for t in jobs.list("ctr-cancel_trial_")} == {JobStatus.CANCELED}


@pytest.mark.long
def test_the_scripted_sweep_makes_the_same_decisions_on_the_local_backend_and_on_ray(backend: RayBackend,
                                                                                     tmp_path: Path) -> None:
    """Decision parity: the repeatable-decisions test's seeded sweep, once locally and once on Ray, gives the same
    trials with the same parameters, the same stops and the same best trial. A judgement made at the wait's bound
    (partial: timing's, not the rule's) is reported and its trial left out of the comparison."""
    from mlrunway.local.backend import LocalBackend
    from mlrunway.specs import BanditPolicy, CommandJobSpec, Objective, SweepLimits, SweepSpec, Uniform
    from tests.conftest import write_script
    from tests.long.test_repeatable_decisions import SCRIPT

    code = write_script(tmp_path / "code", SCRIPT)
    trial = CommandJobSpec(code=str(code), command="python script.py --lr ${{inputs.lr}} --momentum ${{inputs.momentum}}",
                           inputs={"lr": 0.1, "momentum": 0.5}, experiment_name="parity")
    spec = SweepSpec(trial=trial, search_space={"lr": Uniform(min_value=0, max_value=1),
                                                "momentum": Uniform(min_value=0, max_value=1)},
                     objective=Objective(primary_metric="score"), seed=28,
                     early_termination=BanditPolicy(slack_factor=0.1, evaluation_interval=1, delay_evaluation=2),
                     limits=SweepLimits(max_total_trials=8, max_concurrent_trials=3))
    local = LocalBackend.at(tmp_path / "ws")

    def decisions(on: Any, record: Path) -> tuple[list[dict[str, Any]], dict[str, int], str, list[Any]]:
        on.jobs.submit_sweep("parity", spec)
        assert on.jobs.wait("parity", timeout=600, poll_s=0.5).status is JobStatus.COMPLETED
        result = on.jobs.sweep_result("parity")
        ordered = sorted(result.trials, key=lambda t: int(t.name.rsplit("_", 1)[1]))
        stops = {t.name.rsplit("_", 1)[1]: t.early_termination["interval"] for t in ordered if t.early_termination}
        partial = json.loads(record.read_text())["partial_judgements"]
        return [t.params for t in ordered], stops, (result.best_trial or "").rsplit("_", 1)[1], partial

    on_ray = decisions(backend, backend.jobs.record("parity") / "outputs" / "sweep.json")
    on_local = decisions(local, local.workspace.job_dir("parity") / "outputs" / "sweep.json")
    timing = {str(j.get("trial", "")).rsplit("_", 1)[-1] for j in [*on_ray[3], *on_local[3]]}
    print(f"decision parity: ray stops {on_ray[1]}, local stops {on_local[1]}, best {on_ray[2]}/{on_local[2]}, "
          f"partial judgements (not compared) ray {on_ray[3]}, local {on_local[3]}")
    assert on_ray[0] == on_local[0]  # the same trials, the same parameters
    assert on_ray[1], "the policy stopped nothing: the comparison measures nothing"
    assert {k: v for k, v in on_ray[1].items() if k not in timing} == \
        {k: v for k, v in on_local[1].items() if k not in timing}
    assert on_ray[2] == on_local[2]


@pytest.mark.long
def test_a_job_whose_nodes_raylet_is_killed_reads_failed_and_lost_once_ray_knows(costly_set_up: RayFactory,
                                                                                 tmp_path: Path) -> None:
    """A node of the test's own (a custom resource only it offers), its raylet killed under a running job: the job
    reads Failed and lost (a trial so lost runs again) on the first poll after Ray marks it so; how long Ray took
    is printed."""
    import psutil

    node = costly_set_up.cluster.add_node("ray-doomed", 1, {"doomed": 1.0})
    fields = costly_set_up.connection("doomed", profiles={"cpu": {"num_cpus": 1},
                                                          "doomed": {"num_cpus": 1, "resources": {"doomed": 1}}})
    backend = RayBackend.from_connection(fields, costly_set_up.cluster.token)
    spec = Driver(tmp_path)._script_spec("ctr-doomed", "import time\ntime.sleep(600)\n", compute="doomed")
    backend.jobs.submit("ctr-doomed", spec)
    while backend.jobs.get("ctr-doomed").status is not JobStatus.RUNNING:
        time.sleep(0.2)
    raylets = [p for p in psutil.Process(node.pid).children(recursive=True) if p.name() == "raylet"]
    assert len(raylets) == 1
    raylets[0].kill()
    killed, seen = time.monotonic(), None
    while seen is None or not seen.status.is_terminal():
        assert time.monotonic() - killed < 180, f"still {seen.status if seen else None} 180 s after the kill"
        time.sleep(backend.capabilities.poll_interval_s)
        ray_status = backend.jobs.api.job(backend.jobs.submission_id("ctr-doomed"))["status"]
        seen = backend.jobs.get("ctr-doomed")
        if ray_status in ("FAILED", "STOPPED"):  # Ray knows: our read says so on this very poll
            assert seen.status is JobStatus.FAILED, (ray_status, seen)
    print(f"raylet killed: Failed after {time.monotonic() - killed:.1f} s ({seen.error})")
    assert seen.status is JobStatus.FAILED and backend.jobs.lost("ctr-doomed")


@pytest.mark.long
def test_an_airflow_worker_killed_during_the_sweeps_wait_is_followed_by_a_try_that_reattaches(
        costly_set_up: RayFactory, airflow_db: str, digits: Path, tmp_path: Path) -> None:
    """tests/e2e/test_worker_crash.py's scenario on a mlrunway_ray connection: the task's process group killed
    (SIGKILL) once a trial has ended; the next try re-attaches to the same Ray sweep, submits nothing, and the trials
    that had ended stand."""
    import os
    import signal
    import subprocess
    import sys

    from mlrunway.backend.naming import RunNames
    from tests.conftest import REPO
    from tests.e2e.test_worker_crash import DAG_FILE, RUN, RUN_ID, wait_for_an_ended_trial

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "sweep_crash.py").write_text(DAG_FILE.format(repo=str(REPO), code=str(REPO / "training"), data=str(digits)))
    fields = costly_set_up.connection("crash")
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW_CONN_MLRUNWAY_DEFAULT": json.dumps(
        {"conn_type": "mlrunway_ray", "password": costly_set_up.cluster.token, "extra": fields})}
    backend = RayBackend.from_connection(fields, costly_set_up.cluster.token)
    sweep = RunNames.of("sweep_crash", RUN_ID, "crash").sweep

    def task(log: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", RUN, str(dags)], env=env, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)

    worker = task(tmp_path / "try1.log")
    ended = wait_for_an_ended_trial(backend, sweep, worker)  # type: ignore[arg-type]
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    before = backend.jobs.get(sweep)
    assert before.status is JobStatus.RUNNING, "the sweep outlives the worker"
    retry = task(tmp_path / "try2.log")
    assert retry.wait(timeout=600) == 0
    log = (tmp_path / "try2.log").read_text()
    assert "RUN success" in log, log[-3000:]
    assert f"Re-attaching to {sweep}, already Running: nothing new is submitted" in log
    after = backend.jobs.get(sweep)
    assert after.status is JobStatus.COMPLETED and after.created == before.created
    trials = {t.name: t for t in backend.jobs.sweep_result(sweep).trials}
    assert len(trials) == 3
    for trial in ended:
        assert trials[trial.name].status == trial.status and trials[trial.name].history == trial.history
    assert [j.name for j in backend.jobs.list() if j.kind == "sweep"] == [sweep]


# -- distributed jobs (issue 80) ------------------------------------------------------------------------------------
RANK_SCRIPT = """\
import json, os, sys, time
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TF_CONFIG"]
print("ENV", json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
if "FAIL_RANK" in os.environ and os.environ.get("RANK") == os.environ["FAIL_RANK"]:
    time.sleep(5)  # the other ranks have started (their actors existed before any rank ran) and said their ENV
    raise SystemExit("rank " + os.environ["RANK"] + " gives up")
time.sleep(float(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def second_node(costly_set_up: RayFactory) -> str:
    """A third node (2 CPUs), so that the cluster has two nodes a job's ranks can run on (the head offers none)."""
    costly_set_up.cluster.add_node("ray-second", 2, {})
    return "ray-second"


def _ranks(backend: RayBackend, name: str) -> list[dict[str, Any]]:
    return json.loads((backend.jobs.record(name) / "started.json").read_text())["ranks"]


def _placement_groups(backend: RayBackend, name: str) -> list[dict[str, Any]]:
    """The job's placement groups as Ray's state API lists them (named by its submission id)."""
    answer = requests.get(f"{backend.connection.address}/api/v0/placement_groups", timeout=10,
                          params={"limit": 10000, "detail": "true"},
                          headers={"Authorization": f"Bearer {backend.connection.token}"}).json()
    groups = answer["data"]["result"]["result"]
    return [g for g in groups if g.get("name") == backend.jobs.submission_id(name)]


@pytest.mark.long  # make test passes 22 minutes on 2 cores already (issue 80)
def test_a_ddp_job_on_two_instances_runs_its_ranks_on_two_nodes_with_torchruns_environment(
        backend: RayBackend, driver: Driver, second_node: str) -> None:
    """The example DDP project, unchanged (process_count_per_instance 1, instance_count 2): each rank on a node of
    its own (Ray's node ids: both test nodes are 127.0.0.1), the model rank 0 saved, the placement group removed."""
    from mlrunway.specs.job import Output, PyTorchDistribution
    from tests.conftest import REPO

    spec = driver._script_spec("ctr-ddp", "").__class__(
        code=str(REPO / "examples" / "demand_forecast"), experiment_name="contract",
        command="python fit.py --rows 800 --epochs 2 --model-dir ${{outputs.model}}",
        outputs={"model": Output()}, distribution=PyTorchDistribution(process_count_per_instance=1), instance_count=2)
    backend.jobs.submit("ctr-ddp", spec)
    info = backend.jobs.wait("ctr-ddp", timeout=300)
    assert info.status is JobStatus.COMPLETED, info.error
    ranks = _ranks(backend, "ctr-ddp")
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["node_id"] != ranks[1]["node_id"]
    log = "\n".join(backend.jobs.logs("ctr-ddp"))
    assert "epoch 2/2" in log and "(world 2)" in log, log
    assert (Path(info.outputs or "") / "model" / "model.pt2").is_file()
    assert backend.jobs.metric_history("ctr-ddp", "val_rmse")
    assert json.loads((backend.jobs.record("ctr-ddp") / "job.json").read_text())["body"]["entrypoint_num_cpus"] == 0
    assert {g["state"] for g in _placement_groups(backend, "ctr-ddp")} <= {"REMOVED"}
    assert backend.jobs.usage("ctr-ddp").instances == 2  # type: ignore[union-attr]


def test_each_rank_gets_torchruns_environment_and_a_failing_rank_fails_the_job_and_stops_the_others(
        backend: RayBackend, driver: Driver, second_node: str) -> None:
    """Two instances of two processes: RANK 0-3 over NODE_RANK 0-1, one MASTER_ADDR:PORT; rank 3 exits 1, the job
    fails naming rank 3 and its last line, ranks that would sleep 300 s are stopped, the placement group removed."""
    from mlrunway.specs.job import PyTorchDistribution

    spec = driver._script_spec("ctr-ranks", RANK_SCRIPT, "300", environment_variables={"FAIL_RANK": "3"},
                               distribution=PyTorchDistribution(process_count_per_instance=2), instance_count=2)
    started = time.monotonic()
    backend.jobs.submit("ctr-ranks", spec)
    info = backend.jobs.wait("ctr-ranks", timeout=120)
    assert info.status is JobStatus.FAILED and time.monotonic() - started < 100
    assert "rank 3 of 4" in (info.error or "") and "rank 3 gives up" in (info.error or ""), info.error
    record = backend.jobs.record("ctr-ranks")
    envs = [json.loads(line.split("ENV ", 1)[1]) for log in [record / "output.log", *sorted(record.glob("ranks/*"))]
            for line in log.read_text().splitlines() if line.startswith("ENV ")]
    assert sorted((e["RANK"], e["LOCAL_RANK"], e["NODE_RANK"], e["GROUP_RANK"]) for e in envs) == [
        ("0", "0", "0", "0"), ("1", "1", "0", "0"), ("2", "0", "1", "1"), ("3", "1", "1", "1")]
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {
        ("4", "2", "127.0.0.1", envs[0]["MASTER_PORT"])}
    nodes = {r["rank"]: r["node_id"] for r in _ranks(backend, "ctr-ranks")}
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3]
    assert {g["state"] for g in _placement_groups(backend, "ctr-ranks")} == {"REMOVED"}
    assert not _running_ranks(info.mlflow_run_id)


def _running_ranks(run_id: str | None) -> list[int]:
    """Processes of the team's command still running for the job whose MLflow run is ``run_id``."""
    import psutil

    found = []
    for process in psutil.process_iter():
        try:
            env = process.environ()
            if env.get("MLFLOW_RUN_ID") == run_id and "RANK" in env and "job.py" in " ".join(process.cmdline()):
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


def _both_ranks_running(backend: RayBackend, name: str) -> str | None:
    """Wait (at most 120 s) until both processes of the two-rank job ``name`` run; its MLflow run's id."""
    run_id = backend.jobs.get(name).mlflow_run_id
    deadline = time.monotonic() + 120
    while len(_running_ranks(run_id)) < 2:
        assert time.monotonic() < deadline, backend.jobs.get(name)
        time.sleep(0.3)
    return run_id


@pytest.mark.long  # make test passes 22 minutes on 2 cores already (issue 80)
def test_a_rank_killed_mid_run_fails_the_job_truthfully_and_leaves_no_rank_or_placement_group(
        backend: RayBackend, driver: Driver, second_node: str) -> None:
    import psutil

    from mlrunway.specs.job import PyTorchDistribution

    spec = driver._script_spec("ctr-killed", RANK_SCRIPT, "300",
                               distribution=PyTorchDistribution(process_count_per_instance=1), instance_count=2)
    backend.jobs.submit("ctr-killed", spec)
    run_id = _both_ranks_running(backend, "ctr-killed")
    victim = next(p for p in map(psutil.Process, _running_ranks(run_id)) if p.environ()["RANK"] == "1")
    victim.kill()
    info = backend.jobs.wait("ctr-killed", timeout=60)
    assert info.status is JobStatus.FAILED and "rank 1 of 2" in (info.error or "") \
        and "killed by SIGKILL" in (info.error or ""), info.error
    assert not _running_ranks(run_id)
    assert {g["state"] for g in _placement_groups(backend, "ctr-killed")} == {"REMOVED"}


@pytest.mark.long
def test_tensorflow_processes_get_a_tf_config_naming_every_task_and_mpi_runs_mpirun_on_one_instance(
        backend: RayBackend, driver: Driver, second_node: str) -> None:
    from mlrunway.specs.job import MpiDistribution, TensorFlowDistribution

    tf = driver._script_spec("ctr-tf", RANK_SCRIPT, "0", instance_count=2,
                             distribution=TensorFlowDistribution(worker_count=2, parameter_server_count=1))
    mpi = driver._script_spec("ctr-mpi", "import os\nprint('MPI', os.environ['OMPI_COMM_WORLD_RANK'], "
                                         "os.environ['OMPI_COMM_WORLD_SIZE'], flush=True)\n",
                              distribution=MpiDistribution(process_count_per_instance=2))
    backend.jobs.submit("ctr-tf", tf)
    backend.jobs.submit("ctr-mpi", mpi)
    assert backend.jobs.wait("ctr-tf", timeout=120).status is JobStatus.COMPLETED
    record = backend.jobs.record("ctr-tf")
    configs = [json.loads(json.loads(line.split("ENV ", 1)[1])["TF_CONFIG"])
               for log in [record / "output.log", *sorted(record.glob("ranks/*"))]
               for line in log.read_text().splitlines() if line.startswith("ENV ")]
    assert sorted((c["task"]["type"], c["task"]["index"]) for c in configs) == [("ps", 0), ("worker", 0), ("worker", 1)]
    assert len({json.dumps(c["cluster"], sort_keys=True) for c in configs}) == 1
    assert {len(v) for v in configs[0]["cluster"].values()} == {2, 1} and configs[0]["environment"] == "cloud"
    info = backend.jobs.wait("ctr-mpi", timeout=120)
    assert info.status is JobStatus.COMPLETED, info.error
    assert sorted(line for line in backend.jobs.logs("ctr-mpi") if line.startswith("MPI")) == ["MPI 0 2", "MPI 1 2"]


def test_what_the_cluster_could_never_place_or_run_is_refused_before_any_job(backend: RayBackend, driver: Driver,
                                                                             second_node: str) -> None:
    """Three instances on a cluster of two nodes with CPUs; MPI across instances; several instances with no
    distribution: each refused at validate, naming its field, and no job recorded."""
    from mlrunway.errors import SpecError
    from mlrunway.specs.job import MpiDistribution, PyTorchDistribution

    cases = {
        "instance_count": dict(distribution=PyTorchDistribution(), instance_count=3),
        "mpirun reaches other machines": dict(distribution=MpiDistribution(), instance_count=2),
        "with no distribution": dict(instance_count=2),
    }
    for said, changes in cases.items():
        with pytest.raises(SpecError, match=said) as refused:
            backend.jobs.submit("ctr-never", driver._script_spec("ctr-never", RANK_SCRIPT, "0", **changes))
        assert "command_job.instance_count" in str(refused.value)
    assert "2 such" in str(pytest.raises(SpecError, backend.jobs.validate, driver._script_spec(
        "ctr-never", RANK_SCRIPT, "0", distribution=PyTorchDistribution(), instance_count=3)).value)
    assert not backend.jobs.record("ctr-never").exists()


@pytest.mark.long
def test_a_canceled_distributed_job_stops_every_rank_and_frees_its_placement_group(
        backend: RayBackend, driver: Driver, second_node: str) -> None:
    from mlrunway.specs.job import PyTorchDistribution

    spec = driver._script_spec("ctr-cancel-ddp", RANK_SCRIPT, "300", instance_count=2,
                               distribution=PyTorchDistribution(process_count_per_instance=1))
    backend.jobs.submit("ctr-cancel-ddp", spec)
    run_id = _both_ranks_running(backend, "ctr-cancel-ddp")
    info = backend.jobs.cancel("ctr-cancel-ddp", reason="the test cancels it")
    assert info.status is JobStatus.CANCELED and info.error == "the test cancels it"
    assert not _running_ranks(run_id)
    assert {g["state"] for g in _placement_groups(backend, "ctr-cancel-ddp")} == {"REMOVED"}


RANK0_CURVE = """\
import argparse, os, time, mlflow
p = argparse.ArgumentParser(); p.add_argument("--curve"); p.add_argument("--pause", type=float)
a = p.parse_args()
for step, value in enumerate(float(v) for v in a.curve.split(",")):
    if os.environ["RANK"] == "0":
        mlflow.log_metric("best_val_acc", value, step=step)
    time.sleep(a.pause)
"""


@pytest.mark.long
def test_a_sweep_of_distributed_trials_runs_what_the_cluster_can_place_one_placement_at_a_time(
        costly_set_up: RayFactory, tmp_path: Path, second_node: str) -> None:
    """Trials of two instances of 2 CPUs each: the cluster (4 and 2 CPUs) places one at a time, so with two allowed
    at once the second waits, Queued, said in the sweep's log, and the next starts only once it is placed; no two
    trials' ranks ever overlap, and the sweep completes with the best trial."""
    from mlrunway.specs import Choice, CommandJobSpec, Objective, SweepLimits, SweepSpec
    from mlrunway.specs.job import PyTorchDistribution

    fields = costly_set_up.connection("sweep-ddp", profiles={"cpu": {"num_cpus": 1}, "two": {"num_cpus": 2}})
    backend = RayBackend.from_connection(fields, costly_set_up.cluster.token)
    code = tmp_path / "code"
    code.mkdir()
    (code / "job.py").write_text(RANK0_CURVE)
    curves = ["0.5,0.6", "0.7,0.8", "0.6,0.65"]
    trial = CommandJobSpec(code=str(code), command="python job.py --curve ${{inputs.curve}} --pause 1",
                           inputs={"curve": curves[0]}, compute="two", instance_count=2,
                           distribution=PyTorchDistribution(), experiment_name="sweep-ddp")
    spec = SweepSpec(trial=trial, search_space={"curve": Choice(values=curves)}, sampling_algorithm="grid",
                     objective=Objective(primary_metric="best_val_acc"),
                     limits=SweepLimits(max_total_trials=3, max_concurrent_trials=2))
    backend.jobs.submit_sweep("ddp-sweep", spec)
    info = backend.jobs.wait("ddp-sweep", timeout=300)
    result = backend.jobs.sweep_result("ddp-sweep")
    assert info.status is JobStatus.COMPLETED, info.error
    assert [t.status for t in result.trials] == [JobStatus.COMPLETED] * 3 and result.best_trial == "ddp-sweep_trial_1"
    assert [len(t.history) for t in result.trials] == [2, 2, 2]
    spans = sorted((json.loads((backend.jobs.record(t.name) / "started.json").read_text())["started"],
                    json.loads((backend.jobs.record(t.name) / "outcome.json").read_text())["ended"])
                   for t in result.trials)
    assert all(end <= later_start for (_, end), (later_start, _) in itertools.pairwise(spans)), spans
    assert "waits for the cluster to place its 2 processes" in "\n".join(backend.jobs.logs("ddp-sweep"))


# -- endpoints (issue 81) -------------------------------------------------------------------------------------------
def test_a_ray_endpoint_switches_traffic_before_set_traffic_returns_refuses_a_missing_key_and_shows_no_key(
        backend: RayBackend, driver: Driver) -> None:
    """Two deployments of one endpoint served by a Ray job: every answer after ``set_traffic`` returns comes from the
    deployment it names (no clock); a request without the key is 401 from the server itself; no Ray job's record,
    runtime environment or log holds a key."""
    from mlrunway.backend.types import DeploymentSettings, EndpointSettings

    endpoints = backend.endpoints
    endpoints.create_or_update("ray-ep", EndpointSettings(workers=1))
    try:
        for name in ("blue", "green"):
            model = backend.models.register(f"ray-{name}", driver.model_folder(name, text=f"{name} weights"))
            settings = DeploymentSettings(model=f"{model.name}:{model.version}", code_dir=str(driver.score_code()))
            assert endpoints.create_or_update_deployment("ray-ep", name, settings, timeout_s=120)
        for live in ("blue", "green", "blue"):
            endpoints.set_traffic("ray-ep", {live: 100})
            answers = {json.loads(endpoints.invoke("ray-ep", payload={"data": k}))["weights"] for k in range(10)}
            assert answers == {f"{live} weights"}
        # Another Airflow process (a fresh backend from the same connection) finds it all on the storage.
        elsewhere = RayBackend.from_connection(backend.connection.fields(), backend.connection.token).endpoints
        assert elsewhere.get("ray-ep").traffic == {"blue": 100}
        assert json.loads(elsewhere.invoke("ray-ep", payload={"data": 0}))["weights"] == "blue weights"
        uri = endpoints.get("ray-ep").scoring_uri
        assert requests.post(uri, json={"data": 1}, timeout=10).status_code == 401
        assert requests.post(uri, json={"data": 1}, timeout=10,
                             headers={"Authorization": "Bearer not-the-key"}).status_code == 401
        keys = endpoints.get_keys("ray-ep")
        shown = json.dumps(backend.jobs.api.jobs()) + "".join(
            "\n".join(endpoints.serving.logs(job.name)) for job in endpoints.serving.list())
        shown += "".join(p.read_text(errors="replace") for p in endpoints.serving.root.glob("serving/*/job.json"))
        assert keys["primary"] not in shown and keys["secondary"] not in shown
    finally:
        endpoints.set_traffic("ray-ep", {})
        assert endpoints.delete("ray-ep") is True
    assert all(job.status.is_terminal() for job in endpoints.serving.list("ray-ep-"))
    # Made again under its name: new jobs (Ray refuses an id it holds), and deleting a neighbour named with its
    # name as a prefix leaves it serving.
    endpoints.create_or_update("ray-ep", EndpointSettings(workers=1))
    endpoints.create_or_update("ray-ep-2", EndpointSettings(workers=1))
    try:
        assert endpoints.delete("ray-ep-2") is True
        assert endpoints.get("ray-ep").provisioning_state.value == "Succeeded"
    finally:
        endpoints.delete("ray-ep")


@pytest.fixture(scope="module")
def endpoint(costly_set_up: RayFactory, onnx_model: Path) -> Any:
    """The fuzz suite's endpoint (tests/chaos/test_endpoint_fuzz.py), on Ray: 2 workers, its limits' timeouts 1 s,
    the example model as ``blue`` at 100%, served by a Ray job on the worker node."""
    from mlrunway.backend.types import DeploymentSettings, EndpointSettings
    from tests.conftest import REPO

    backend = RayBackend.from_connection(costly_set_up.connection("fuzz"), costly_set_up.cluster.token)
    endpoints = backend.endpoints
    endpoints.create_or_update("fuzz", EndpointSettings(workers=2), header_timeout_s=TIMEOUT_S,
                               body_timeout_s=TIMEOUT_S, send_timeout_s=TIMEOUT_S)
    digits_model = backend.models.register("digits", onnx_model)
    endpoints.create_or_update_deployment("fuzz", "blue", DeploymentSettings(
        model=f"digits:{digits_model.version}", code_dir=str(REPO / "training")), timeout_s=120)
    endpoints.set_traffic("fuzz", {"blue": 100})
    yield endpoints, endpoints.served_state("fuzz")
    endpoints.set_traffic("fuzz", {})
    endpoints.delete("fuzz")


@pytest.mark.long  # the demo DAG's six tasks on Ray are in make test; this team DAG adds a minute
def test_the_readme_team_dag_runs_all_six_tasks_on_ray_with_ddp_on_one_instance(
        costly_set_up: RayFactory, airflow_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """dags/demand_forecast.py, built by ``lifecycle(...)``: its DDP training (two processes on one instance: one
    bundle), a minimizing sweep, export, a deployment whose smoke answer is checked against score.py's own, cleanup;
    all on the cluster."""
    from tests.e2e.stack import run_shipped_dag

    fields = costly_set_up.connection("team", profiles={"cpu": {"num_cpus": 1}})
    monkeypatch.setenv("AIRFLOW_CONN_MLRUNWAY_DEFAULT", json.dumps(
        {"conn_type": "mlrunway_ray", "password": costly_set_up.cluster.token, "extra": fields}))
    run, results = run_shipped_dag("demand_forecast", {"epochs": 6, "max_trials": 2})
    assert str(run.state) == "success", results
    backend = RayBackend.from_connection(fields, costly_set_up.cluster.token)
    train = results["train"]["job_name"]
    assert int(backend.jobs.params(train)["world_size"]) == 2
    assert len(_ranks(backend, train)) == 2
    assert results["deploy_blue"]["smoke_matched"].startswith("as expected")
    assert results["cleanup"]["endpoint_deleted"] is True and backend.endpoints.list() == []
    assert all(job.status.is_terminal() for job in backend.endpoints.serving.list())



# -- the production endpoint (issue 82) -----------------------------------------------------------------------------
@pytest.mark.long  # four deploy runs with rollout windows: about two minutes
def test_a_stable_endpoints_rounds_on_ray_create_roll_back_a_faulty_one_promote_a_better_one_and_hold_a_worse(
        costly_set_up: RayFactory, digits: Path, onnx_model: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The deploy task (DeployBlueOperator, as dags/deploy_model.py runs it) four times on one endpoint served on the
    cluster, a client sending steady load through the last three: version 1 (fair) created; version 2 (better) with
    a scoring script failing a third of single-image requests, rolled back at its first traffic step by the watch;
    version 2 as it is, promoted; version 3 (clearly worse) held by the gate. Every failed client request is the
    challenger's own; production ends as version 2 at 100%, its predecessor the ``previous`` alias."""
    from mlrunway.errors import EndpointError
    from mlrunway.ray.tracking import client
    from tests.conftest import REPO
    from tests.production.test_stable_endpoint_local import FAULTY, deploy, perturbed, steady_load

    fields = costly_set_up.connection("prod")
    monkeypatch.setenv("AIRFLOW_CONN_MLRUNWAY_DEFAULT", json.dumps(
        {"conn_type": "mlrunway_ray", "password": costly_set_up.cluster.token, "extra": fields}))
    backend = RayBackend.from_connection(fields, costly_set_up.cluster.token)
    for noise in (0.6, 0.0, 3.0):  # versions 1 (fair), 2 (the trained model, better), 3 (clearly worse)
        backend.models.register("prod-digits", perturbed(onnx_model, tmp_path / f"noise-{noise}", noise))
    faulty = shutil.copytree(REPO / "training", tmp_path / "faulty")
    (faulty / "faulty_score.py").write_text(FAULTY)
    quick = {"endpoint": "prod", "model": "prod-digits", "rollout": {"steps": [50, 100], "window_s": 4}}
    try:
        results = [deploy(digits, 1, "manual__1", **quick)]
        with steady_load(backend, limit_s=600, endpoint="prod") as answers:
            time.sleep(2)  # the champion's baseline
            with pytest.raises(EndpointError, match=r"rolled_back: .*watched: \d+ errors in \d+ requests"):
                deploy(digits, 2, "manual__2", code_dir=str(faulty), scoring_script="faulty_score.py",
                       **{**quick, "rollout": {"steps": [25, 50, 100], "window_s": 5}})
            during_the_faulty_one = len(answers)
            time.sleep(1)
            results += [deploy(digits, version, f"manual__{version + 1}", **quick) for version in (2, 3)]
        failed = [(status, slot) for status, slot in answers if status != 200]
        assert len(answers) > 100 and failed, answers[-5:]
        assert {slot for _, slot in failed} == {"green"}, failed  # only the faulty challenger's share failed
        assert all(status == 200 for status, _ in answers[during_the_faulty_one:]), "failures after its rollback"
        assert [r["decision"] for r in results] == ["created", "promoted", "held"], [r["reason"] for r in results]
        assert results[1]["gate"]["challenger"] > results[1]["gate"]["champion"]
        assert results[2]["gate"]["challenger"] < results[2]["gate"]["champion"] - 0.2
        assert [r["live"] for r in results] == [{"deployment": "blue", "model": "prod-digits:1"},
                                                {"deployment": "green", "model": "prod-digits:2"},
                                                {"deployment": "green", "model": "prod-digits:2"}]
        assert [d.name for d in backend.endpoints.list_deployments("prod")] == ["green"]
        assert backend.endpoints.get("prod").traffic == {"green": 100}
        assert answers[-1] == (200, "green")
        assert backend.models.alias("prod-digits", "production").version == 2  # type: ignore[union-attr]
        assert backend.models.alias("prod-digits", "previous").version == 1  # type: ignore[union-attr]
    finally:
        backend.endpoints.delete("prod")
        client(costly_set_up.cluster.tracking_uri).delete_registered_model("prod-digits")
    assert all(job.status.is_terminal() for job in backend.endpoints.serving.list())


@pytest.mark.long  # two nodes of its own, and Ray's wait before it declares a node dead
def test_an_endpoint_whose_servers_node_is_lost_answers_again_from_another_node_with_its_keys_and_traffic(
        costly_set_up: RayFactory, onnx_model: Path) -> None:
    """Two nodes of the test's own offer the endpoint's profile (a custom resource only they have); the raylet of
    the one its server runs on is killed, as a machine's loss: Ray starts the server's actor again on the other node
    and the endpoint answers there, with the same keys, deployment and traffic, and nothing of it was deployed again.
    How long it took is printed (the reliability page's figure: bench/ray_faults.py); the wait is bounded generously."""
    import psutil

    from mlrunway.ray.tracking import client

    for name in ("ray-serve-a", "ray-serve-b"):
        costly_set_up.cluster.add_node(name, 1, {"serve": 1.0})
    fields = costly_set_up.connection("moves", profiles={"cpu": {"num_cpus": 1},
                                                         "serve": {"num_cpus": 0.5, "resources": {"serve": 0.5}}})
    backend = RayBackend.from_connection(fields, costly_set_up.cluster.token)
    endpoints = backend.endpoints
    try:
        request, before, keys = _serving_blue(backend, "moves", "moves-digits", onnx_model, compute="serve")
        server = next(job for job in endpoints.serving.list("moves-") if "-server-" in job.name)
        started = endpoints.serving.record(server.name) / "started.json"
        first = json.loads(started.read_text())["starts"]
        served_by = psutil.Process(json.loads((endpoints.root / "moves" / "server.json").read_text())["pid"])
        raylet = next(p for p in served_by.parents() if p.name() == "raylet")
        raylet.kill()
        killed, state = time.monotonic(), None
        while (state := endpoints.get("moves")).provisioning_state.value != "Succeeded" or \
                len(json.loads(started.read_text())["starts"]) < 2:
            assert time.monotonic() - killed < 300, f"{state} 300 s after its node was lost"
            time.sleep(0.5)
        answered = time.monotonic() - killed
        starts = json.loads(started.read_text())["starts"]
        assert [s["node_id"] for s in starts[:1]] == [first[0]["node_id"]] and starts[1]["node_id"] != first[0][
            "node_id"]
        assert endpoints.invoke("moves", payload=request) == before  # the same model, on the same key
        assert endpoints.get_keys("moves") == keys and endpoints.get("moves").traffic == {"blue": 100}
        assert endpoints.serving.get(server.name).status is JobStatus.RUNNING  # the same job: nothing resubmitted
        assert [job.name for job in endpoints.serving.list("moves-") if "-server-" in job.name] == [server.name]
        assert "runs again where the cluster starts its actor again" in "\n".join(endpoints.serving.logs(server.name))
        print(f"server's node lost: the endpoint answered again after {answered:.1f} s")
    finally:
        endpoints.set_traffic("moves", {})
        endpoints.delete("moves")
        client(costly_set_up.cluster.tracking_uri).delete_registered_model("moves-digits")


ROLLOUT_DAG = '''
import sys
from datetime import datetime
sys.path.insert(0, {repo!r})
from airflow.sdk import DAG
from mlrunway.operators import CleanupOperator, DeployBlueOperator

with DAG(dag_id="rollout_crash", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
    DeployBlueOperator(task_id="deploy_blue", model_name="crash-digits", model_version=2, code_dir={code!r},
                       data_dir={data!r}, endpoint_name="crash-prod", workers=1, deferrable=False, poll_interval_s=0.2,
                       rollout={{"steps": [50, 100], "window_s": 6}}) >> CleanupOperator(
        task_id="cleanup", endpoint_name="crash-prod", trigger_rule="all_done")
'''
ROLLOUT_RUN = """
import sys
from datetime import datetime, timezone
sys.path.insert(0, sys.argv[1])
from rollout_crash import dag
when = datetime(2026, 11, 1, tzinfo=timezone.utc)
print("RUN", dag.test(logical_date=when, run_after=when).state, flush=True)
"""


@pytest.mark.long  # a rollout, killed, then its retry's: about a minute
def test_an_airflow_worker_killed_between_rollout_steps_is_followed_by_a_retry_that_takes_the_rollout_back(
        costly_set_up: RayFactory, airflow_db: str, digits: Path, onnx_model: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The deploy task's process group SIGKILLed while version 2 holds 50% beside version 1 on an endpoint served on
    the cluster: the endpoint goes on serving both, production unchanged. The retry (the same run, so the same
    lease) puts version 1 back at 100% before anything else, then rolls version 2 out from its first step and
    promotes it; a client sending steady load throughout sees no failure."""
    import os
    import signal
    import subprocess
    import sys

    from mlrunway.ray.tracking import client
    from tests.conftest import REPO
    from tests.production.test_stable_endpoint_local import deploy, perturbed, steady_load

    fields = costly_set_up.connection("crash-prod")
    conn = json.dumps({"conn_type": "mlrunway_ray", "password": costly_set_up.cluster.token, "extra": fields})
    monkeypatch.setenv("AIRFLOW_CONN_MLRUNWAY_DEFAULT", conn)
    backend = RayBackend.from_connection(fields, costly_set_up.cluster.token)
    for noise in (0.6, 0.0):  # version 1 (fair), version 2 (the trained model, better)
        backend.models.register("crash-digits", perturbed(onnx_model, tmp_path / f"noise-{noise}", noise))
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "rollout_crash.py").write_text(ROLLOUT_DAG.format(repo=str(REPO), code=str(REPO / "training"),
                                                              data=str(digits)))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW_CONN_MLRUNWAY_DEFAULT": conn}

    def task(log: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", ROLLOUT_RUN, str(dags)], env=env, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)

    try:
        assert deploy(digits, 1, "manual__1", endpoint="crash-prod", model="crash-digits")["decision"] == "created"
        with steady_load(backend, limit_s=600, endpoint="crash-prod") as answers:
            worker, caught, deadline = task(tmp_path / "try1.log"), None, time.monotonic() + 300
            while caught is None:
                assert worker.poll() is None and time.monotonic() < deadline, (tmp_path / "try1.log").read_text()[-3000:]
                traffic = backend.endpoints.get("crash-prod").traffic
                if len([share for share in traffic.values() if share]) == 2:
                    caught = traffic
                    os.killpg(worker.pid, signal.SIGKILL)  # as the worker's machine dies: no on_kill, no cleanup
                time.sleep(0.1)
            worker.wait()
            time.sleep(2)  # the split serves on with no task watching it
            assert backend.endpoints.get("crash-prod").traffic == caught
            assert backend.models.alias("crash-digits", "production").version == 1  # type: ignore[union-attr]
            retry = task(tmp_path / "try2.log")
            assert retry.wait(timeout=600) == 0
        log = (tmp_path / "try2.log").read_text()
        assert "RUN success" in log, log[-3000:]
        assert "no decision recorded it (a rollout cut short); crash-digits:1, the production model, goes back" in log
        assert "promoted" in log and "50% window" in log
        failed = [(status, slot) for status, slot in answers if status != 200]
        assert len(answers) > 100 and not failed, failed[:5]
        assert backend.models.alias("crash-digits", "production").version == 2  # type: ignore[union-attr]
        [live] = backend.endpoints.list_deployments("crash-prod")
        assert live.model == "crash-digits:2" and backend.endpoints.get("crash-prod").traffic == {live.name: 100}
        assert backend.endpoints.lease("crash-prod", "a later run", 60) is None  # the retry's cleanup gave it back
    finally:
        backend.endpoints.delete("crash-prod")
        client(costly_set_up.cluster.tracking_uri).delete_registered_model("crash-digits")


@pytest.mark.long  # a cluster of its own (its head is restarted), and Ray's wait before the nodes rejoin
def test_after_the_head_restarts_the_endpoint_reads_failed_naming_its_lost_server_and_create_or_update_serves_it_again(
        onnx_model: Path, tmp_path: Path) -> None:
    """Every process of the head killed and the head started again (no GCS fault tolerance: a new cluster, which
    has forgotten every job); the worker node rejoins. The endpoint's state on the storage outlives it: it reads
    Failed naming the server job lost with the head and how to start it again, and ``create_or_update`` (what the
    next deploy run calls first) serves the same deployment, keys and traffic from a new server job."""
    from mlrunway.backend.types import EndpointSettings
    from tests.ray_cluster import ray_cluster

    with ray_cluster(tmp_path / "cluster", worker_cpus=2) as cluster:
        backend = RayBackend.from_connection({
            "address": cluster.address, "storage": str(cluster.storage), "tracking_uri": cluster.tracking_uri,
            "namespace": "head", "profiles": {"cpu": {"num_cpus": 1}}}, cluster.token)
        endpoints = backend.endpoints
        request, before, keys = _serving_blue(backend, "head-ep", "digits", onnx_model)
        [server] = [job.name for job in endpoints.serving.list("head-ep-") if "-server-" in job.name]
        times = cluster.restart_head()
        deadline = time.monotonic() + 300
        while (info := endpoints.get("head-ep")).provisioning_state.value != "Failed":
            assert time.monotonic() < deadline, info
            time.sleep(0.5)
        assert f"its server job {server} ended Failed: lost with the head" in str(info.error), info.error
        assert "create_or_update starts it again (the same keys, deployments and traffic)" in str(info.error)
        endpoints.create_or_update("head-ep", EndpointSettings(workers=1))
        assert endpoints.invoke("head-ep", payload=request) == before
        assert endpoints.get_keys("head-ep") == keys and endpoints.get("head-ep").traffic == {"blue": 100}
        servers = [job.name for job in endpoints.serving.list("head-ep-") if "-server-" in job.name]
        assert servers == [server, server.replace("-server-1", "-server-2")]
        print(f"head restarted: its Jobs API answered after {times['api'] - times['killed']:.1f} s, every node "
              f"alive after {times['alive'] - times['killed']:.1f} s")
        endpoints.delete("head-ep")


def _serving_blue(backend: RayBackend, endpoint: str, model_name: str, onnx_model: Path,
                  compute: str | None = None) -> tuple[dict[str, Any], str, dict[str, str]]:
    """``endpoint`` made (one worker, on ``compute``), the example model registered as ``model_name`` and serving
    as ``blue`` at 100%: a request, its answer, and the endpoint's keys."""
    from mlrunway.backend.types import DeploymentSettings, EndpointSettings
    from tests.conftest import REPO

    endpoints = backend.endpoints
    endpoints.create_or_update(endpoint, EndpointSettings(workers=1), compute=compute)
    registered = backend.models.register(model_name, onnx_model)
    endpoints.create_or_update_deployment(endpoint, "blue", DeploymentSettings(
        model=f"{model_name}:{registered.version}", code_dir=str(REPO / "training")), timeout_s=180)
    endpoints.set_traffic(endpoint, {"blue": 100})
    request = {"data": [[[[0.0] * 8] * 8]]}
    return request, endpoints.invoke(endpoint, payload=request), endpoints.get_keys(endpoint)
