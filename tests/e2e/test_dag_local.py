"""The whole DAG with dag.test() on the local backend, small settings; then what it left behind."""

from __future__ import annotations

import copy
import json
import sys
from urllib.parse import urlparse

import psutil
import pytest
from markupsafe import escape

from mlrunway import lineage
from mlrunway.airflow.summary import format_summary, run_results
from mlrunway.early_termination import evaluate_in_order
from mlrunway.local import tracking
from mlrunway.local.backend import LocalBackend
from mlrunway.local.supervisor import JobState
from mlrunway.specs import BanditPolicy
from tests.conftest import REPO
from tests.e2e import openlineage_events as ol

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SMALL = {"epochs": 12, "max_trials": 4, "max_concurrent_trials": 2, "delay_evaluation": 3}


def run_dag(conf, workspace, monkeypatch):
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(workspace))
    sys.path.insert(0, str(REPO / "dags"))
    from train_sweep_deploy import dag

    defaults = {task.task_id: copy.deepcopy(task.params) for task in dag.tasks}
    try:
        run = dag.test(run_conf=conf)
    finally:  # dag.test() leaves the run's conf in the tasks' params: the next run must start from the defaults
        for task in dag.tasks:
            task.params = defaults[task.task_id]
    return run, run_results(dag.dag_id, run.run_id), task_states(dag.dag_id, run.run_id)


def task_states(dag_id, run_id):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        return {ti.task_id: str(ti.state) for ti in rows}


def assert_nothing_left(backend, scoring_uri=None):
    assert backend.endpoints.list() == []
    assert backend.leftovers() == []
    if scoring_uri:
        port = urlparse(scoring_uri).port
        assert not any(c.laddr.port == port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN)


def test_the_dag_trains_sweeps_picks_exports_deploys_and_cleans_up(airflow_db, digits, tmp_path, monkeypatch):
    # The default connection as a deployment writes it, with a price of a core-hour: the run's cost is money.
    monkeypatch.setenv("AIRFLOW_CONN_MLRUNWAY_DEFAULT", json.dumps({"conn_type": "mlrunway_local", "extra": {
        "workspace": str(tmp_path / "ws"), "local_rate": "0.04"}}))
    with ol.file_transport(tmp_path / "openlineage.jsonl", monkeypatch) as lineage_file:
        run, results, states = run_dag({**SMALL, "data_dir": str(digits), "budget": {"max_cost": 5}},
                                       tmp_path / "ws", monkeypatch)
    assert str(run.state) == "success", states
    backend = LocalBackend.at(tmp_path / "ws")

    assert results["train"]["status"] == "Completed" and results["train"]["metrics"]["best_val_acc"] > 0.3
    logged = list(backend.jobs.logs(results["train"]["job_name"]))
    assert any(line.startswith("data interval ") for line in logged), "the run's data interval reached train.py"
    trials = backend.jobs.sweep_result(results["sweep"]["sweep_name"]).trials
    assert len(trials) == results["sweep"]["trials"] == 4
    stopped = {t.name: t.early_termination for t in trials if t.early_termination}
    assert stopped and sorted(stopped) == sorted(results["sweep"]["stopped_early"])
    in_order = sorted(trials, key=lambda t: int(t.name.rsplit("_", 1)[1]))
    replay = evaluate_in_order(BanditPolicy(slack_factor=0.15, evaluation_interval=1, delay_evaluation=3),
                               {t.name: t.history for t in in_order}, "maximize")
    for name, stop in stopped.items():  # each stop is the one the local rule makes from the recorded curves
        assert stop["value"] < stop["threshold"] and replay[name].interval == stop["interval"]

    best = max(trials, key=lambda t: max(t.judged))
    assert best.name not in stopped
    assert results["pick_best"]["trial"] == best.name and results["pick_best"]["value"] == max(best.history)
    model = backend.models.get(results["pick_best"]["model_name"], results["pick_best"]["model_version"])
    assert model.properties["source_job"] == best.name and set(model.tags) >= {"learning_rate", "momentum"}

    parity = results["export_onnx"]["parity"]
    assert parity["passed"] and parity["top1_agreement"] == 1.0 and parity["inputs"] == "validation images"
    assert parity["max_abs_diff"] < 1e-4
    export_job = backend.jobs.get(results["export_onnx"]["job_name"])  # export ran as the run's export job
    assert export_job.name.endswith("-export") and export_job.status.value == "Completed"
    assert backend.models.get(results["export_onnx"]["model_name"], 1).properties["source_job"] == export_job.name

    deploy = results["deploy_blue"]
    # Read back from Airflow's XCom table a label such as "8" arrives as 8: compare as text.
    assert deploy["deployment"] == "blue" and str(deploy["smoke_label"]) in [str(i) for i in range(10)]
    assert results["cleanup"]["endpoint_deleted"] is True
    assert_nothing_left(backend, deploy["scoring_uri"])

    # The served version's model card: the job the DAG described, the trial's hyperparameters, parity, history.
    onnx = f"{results['export_onnx']['model_name']}/{results['export_onnx']['model_version']}"
    card = (tmp_path / "ws" / "reports" / "model-cards" / onnx / "card.md").read_text()
    assert deploy["model_card"] == str(tmp_path / "ws" / "reports" / "model-cards" / onnx / "card.html")
    assert "--learning-rate ${{inputs.learning_rate}}" in card and f"| trial job | {best.name} |" in card
    assert f"deployed on {deploy['endpoint']}" in card and "| tolerance_used |" in card

    sweep = results["sweep"]["sweep_name"]  # the report, saved by cleanup while blue still served
    saved = json.loads((tmp_path / "ws" / "reports" / sweep / "report.json").read_text())
    assert {t["name"] for t in saved["trials"]} == {t.name for t in trials} and saved["best_trial"] == best.name
    assert saved["endpoint"]["traffic"] == {"blue": 100} and saved["onnx"]["properties"]["parity"] == parity
    # Early termination replayed on the sweep's curves: the policy it ran (its live decisions reproduced), then
    # other settings, a stricter one with what it would have saved.
    advice = saved["advice"]
    ran = advice["rows"][0]
    assert ran["ran"] and ran["policy"]["type"] == "bandit" and ran["stops"] == {n: s["interval"] for n, s in stopped.items()}
    assert advice["reproduced"] is True
    stricter = [r for r in advice["rows"][1:] if r["saved_epochs"] and r["saved_epochs"] > ran["saved_epochs"]]
    assert stricter and stricter[0]["change"].startswith("early_termination={") and stricter[0]["saved_cost"] > 0
    page = (tmp_path / "ws" / "reports" / sweep / "report.html").read_text()
    assert "Early termination, replayed" in page and "a replay of one sweep, not a promise" in page
    assert str(escape(stricter[0]["change"])) in page  # as the page escapes it

    # What the run cost: each job's wall time × processes at the connection's local_rate, wherever people look.
    cost = deploy["cost"]
    assert {role: len(jobs) for role, jobs in cost["jobs"].items()} == {"train": 1, "trials": 4, "export": 1}
    assert cost["unknown"] == 0 and cost["amount"] > 0 and cost["amount"] == pytest.approx(cost["core_hours"] * 0.04)
    assert [j["job"] for j in cost["jobs"]["trials"]] == sorted(t.name for t in trials)
    assert saved["cost"]["jobs"]["trials"] == cost["jobs"]["trials"]  # the report's, once the sweep had ended
    assert "## Cost to produce (an estimate)" in card and f"| total | {cost['text']} |" in card
    # The form's budget reached every task: a generous one stops nothing, and the run's cost is stated against it.
    assert cost["budget"]["limit"] == 5 and cost["budget"]["spent"] == pytest.approx(cost["amount"])
    assert cost["budget"]["over"] == 0 and f"| budget | {cost['budget']['text']} |" in card
    assert results["sweep"]["stopped_because"] is None
    allowed = JobState(backend.workspace.job_dir(sweep)).job()["sweep"]["budget"]  # the sweep's share, as run
    assert allowed["limit"] == pytest.approx(5 * 0.9 - cost["jobs"]["train"][0]["amount"])
    serving = results["cleanup"]["serving_cost"]  # blue's hours × its scoring processes, read before it went
    (blue,) = serving["jobs"]["serving"]
    assert blue["job"] == f"{deploy['endpoint']}/blue" and blue["processes"] == 2 and blue["running"]
    assert blue["amount"] == pytest.approx(blue["hours"] * 0.04) and saved["serving"]["jobs"]["serving"][0]["job"] == blue["job"]
    assert f"cost: {cost['text']}" in format_summary("success", results, [])
    assert f"serving: {serving['text']}" in format_summary("success", results, [])
    trial_costs = [j["amount"] for j in cost["jobs"]["trials"]]
    sweep_run = tracking.latest_metrics(backend.workspace, backend.jobs.get(sweep).mlflow_run_id)
    assert sweep_run["cost"] == pytest.approx(sum(trial_costs))  # the trials' total on the sweep's parent run
    train_run = tracking.latest_metrics(backend.workspace, backend.jobs.get(results["train"]["job_name"]).mlflow_run_id)
    assert train_run["cost"] == pytest.approx(cost["jobs"]["train"][0]["amount"]) and train_run["compute_hours"] > 0
    assert results["sweep"]["report_url"] == results["cleanup"]["report_url"] == f"/mlrunway/report/mlrunway_default/{sweep}"
    assert results["train"]["mlflow_url"].endswith(f"/mlflow/mlrunway_default/{results['train']['job_name']}")
    # What the UI shows: the links Airflow asked for as each task ended (stored as _link_<class> XComs).
    shown = {task: {k.removeprefix("_link_"): v for k, v in pushed.items() if k.startswith("_link_") and v}
             for task, pushed in results.items()}
    assert shown.pop("pick_best") == {}  # a local model has no page: the report shows it
    assert shown == {"train": {"MlflowRunLink": results["train"]["mlflow_url"]},
                     "export_onnx": {"MlflowRunLink": f"/mlrunway/mlflow/mlrunway_default/{results['export_onnx']['job_name']}"},
                     "sweep": {"MlflowRunLink": f"/mlrunway/mlflow/mlrunway_default/{sweep}",
                               "SweepReportLink": results["sweep"]["report_url"]},
                     "deploy_blue": {"EndpointLink": f"/mlrunway/endpoint/mlrunway_default/{deploy['endpoint']}",
                                     "ModelCardLink": f"/mlrunway/report/mlrunway_default/card/{onnx}"},
                     "cleanup": {"SweepReportLink": results["cleanup"]["report_url"]}}
    assert_one_lineage_graph(ol.events(lineage_file), backend, results, digits)


def assert_one_lineage_graph(events, backend, results, digits):
    """The OpenLineage events of the run (the provider's listener, the client's file transport) form one graph:
    the data reaches the endpoint's deployment through sweep, pick_best, export_onnx and deploy_blue, each
    task's input named exactly as its upstream task's output; train reads the same data and code as the sweep."""
    ns = backend.lineage_namespace
    completed = {e["job"]["name"].rsplit(".", 1)[1]: e for e in events
                 if e.get("eventType") == "COMPLETE" and e["job"]["name"].count(".") == 1}
    assert set(completed) == {"train", "sweep", "pick_best", "export_onnx", "deploy_blue", "cleanup"}
    edges = ol.graph(events)
    picked, onnx, deploy = results["pick_best"], results["export_onnx"], results["deploy_blue"]
    chain = [ol.dataset(vars(lineage.local_path(digits))), ol.task(edges, "sweep"),
             ol.dataset(vars(lineage.job(ns, results["sweep"]["sweep_name"]))), ol.task(edges, "pick_best"),
             ol.dataset(vars(lineage.model_version(ns, picked["model_name"], picked["model_version"]))),
             ol.task(edges, "export_onnx"),
             ol.dataset(vars(lineage.model_version(ns, onnx["model_name"], onnx["model_version"]))),
             ol.task(edges, "deploy_blue"), ol.dataset(vars(lineage.deployment(ns, deploy["endpoint"], "blue")))]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        assert downstream in edges[upstream], f"{upstream} -/-> {downstream}; it leads to {edges[upstream]}"
    assert chain[1] in edges[chain[0]] and ol.task(edges, "train") in edges[chain[0]]  # train reads the same data
    assert ol.dataset(vars(lineage.job(ns, results["train"]["job_name"]))) in edges[ol.task(edges, "train")]
    code = {(d["name"], d["facets"]["version"]["datasetVersion"]) for e in (completed["train"], completed["sweep"])
            for d in e["inputs"] if "version" in d.get("facets", {})}
    assert code == {(str(REPO / "training"), lineage.snapshot_hash(REPO / "training"))}
    assert ol.task(edges, "cleanup") in edges[ol.dataset(vars(lineage.endpoint(ns, deploy["endpoint"])))]
    assert len(ol.components(edges)) == 1, ol.components(edges)



def test_a_failing_sweep_still_cleans_up_and_fails_the_run(airflow_db, digits, tmp_path, monkeypatch):
    """Every trial fails on its own (a momentum torch.optim.SGD refuses), after Train passed with its own."""
    space = {"learning_rate": {"type": "choice", "values": [0.01]}, "momentum": {"type": "choice", "values": [-0.5]}}
    run, _, states = run_dag({**SMALL, "epochs": 2, "max_trials": 2, "data_dir": str(digits), "search_space": space},
                             tmp_path / "ws", monkeypatch)
    assert str(run.state) == "failed"
    assert states == {"train": "success", "sweep": "failed", "pick_best": "upstream_failed",
                      "export_onnx": "upstream_failed", "deploy_blue": "upstream_failed", "cleanup": "failed"}
    backend = LocalBackend.at(tmp_path / "ws")
    sweep = [j for j in backend.jobs.list() if j.kind == "sweep"][0]
    assert "no trial produced the primary metric" in sweep.error and "Invalid momentum value: -0.5" in sweep.error
    assert_nothing_left(backend)
    saved = json.loads((tmp_path / "ws" / "reports" / sweep.name / "report.json").read_text())
    assert saved["sweep_status"] == "Failed" and saved["model"] is None  # the report of a failure, all the same
