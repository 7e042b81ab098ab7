"""lifecycle(): a team's six tasks from one job, one sweep and one deployment; the preflight that checks them
together before any job; native rendering whatever the DAG says; the docs' and the README's team DAGs are the shipped ones."""

from __future__ import annotations

import copy
import re
from datetime import datetime
from pathlib import Path

import pytest
from airflow.sdk import DAG, Param

from mlrunway.errors import SpecError
from mlrunway.lifecycle import lifecycle
from mlrunway.operators import TrainModelOperator
from tests.conftest import REPO

CODE = str(REPO / "examples" / "demand_forecast")
JOB = {"command": "python fit.py --lr ${{inputs.lr}} --epochs ${{inputs.epochs}} --model-dir ${{outputs.model}}",
       "code": CODE, "inputs": {"lr": 0.01, "epochs": "{{ params.epochs }}"}, "outputs": {"model": {"type": "uri_folder"}}}
SWEEP = {"search_space": {"lr": {"type": "loguniform", "min_value": -7, "max_value": -2}},
         "objective": {"primary_metric": "val_rmse", "goal": "minimize"},
         "limits": {"max_total_trials": "{{ params.trials }}", "max_concurrent_trials": 2}}


def team_dag(**changes) -> tuple[DAG, object]:
    with DAG(f"team_{len(changes)}", schedule=None, start_date=datetime(2026, 1, 5),
             params={"epochs": Param(3, type="integer"), "trials": Param(4, type="integer")}) as dag:
        tasks = lifecycle(**{"job": JOB, "sweep": SWEEP, "deployment": {"sample_request": "sample_request.json"},
                             "model_path": "${{outputs.model}}", "name_prefix": "team", **changes})
    return dag, tasks


def context(dag: DAG, **params) -> dict:
    """What the train task's pre_execute gets: the params, the run and the task (local backend)."""
    return {"params": {**dag.params.validate(), **params}, "dag": dag, "run_id": "manual__2026-11-25",
            "task": copy.copy(dag.get_task("train"))}


def test_the_six_tasks_are_chained_and_render_their_templates_natively():
    dag, _ = team_dag()
    order = ["train", "sweep", "pick_best", "export_onnx", "deploy_blue", "cleanup"]
    assert [dag.get_task(t).upstream_task_ids for t in order] == [set(), *({t} for t in order[:-1])]
    assert dag.render_template_as_native_obj is False  # the DAG says nothing; the tasks render natively anyway
    sweep = copy.copy(dag.get_task("sweep"))
    sweep.render_template_fields(context(dag, trials=6))
    assert sweep.limits["max_total_trials"] == 6 and sweep.trial["inputs"]["epochs"] == 3  # numbers, not text
    assert sweep.trial["command"] == JOB["command"]  # azure-ai-ml's placeholders pass through
    assert dag.get_task("deploy_blue").code_dir == CODE  # the job's code folder holds score.py


def test_the_runs_budget_reaches_train_sweep_and_deploy_as_their_own_argument_rendered_alike():
    dag, _ = team_dag(budget="{{ params.budget }}")
    tasks = [dag.get_task(task_id) for task_id in ("train", "sweep", "deploy_blue")]
    assert all("budget" in task.template_fields for task in tasks)
    assert [task.render_template(task.budget, context(dag, budget={"max_cost": 5})) for task in tasks] == \
        [{"max_cost": 5}] * 3
    assert "budget" not in dag.get_task("deploy_blue").model_card  # the card's description says only the training


def test_preflight_checks_the_sweep_described_once_before_any_job(tmp_path, monkeypatch):
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    dag, tasks = team_dag()
    tasks.preflight(context(dag))  # the descriptions as given pass
    dag, tasks = team_dag(sweep={**SWEEP, "search_space": {**SWEEP["search_space"],
                                                           "batch": {"type": "choice", "values": [16, 32]}}})
    with pytest.raises(SpecError, match="sweep.search_space.batch: never reaches the trial's command line"):
        tasks.preflight(context(dag))
    dag, tasks = team_dag(sweep={**SWEEP, "limits": {"max_total_trials": "{{ params.trials }}"}})
    with pytest.raises(SpecError, match="max_total_trials"):
        tasks.preflight(context(dag, trials=0))
    assert not (tmp_path / "ws" / "jobs").exists() or not any((tmp_path / "ws" / "jobs").iterdir())


@pytest.mark.parametrize(("changes", "message"), [
    ({"sweep": {**SWEEP, "max_trials": 3}}, "sweep.max_trials: is not one of its arguments; use trial, search_space"),
    ({"deployment": {"smoke_request": "r.json"}}, "deployment.smoke_request: is not one of its arguments"),
    ({"export": {"tolerance": 1e-3}}, "export.tolerance: is not one of its arguments"),
    ({"deployment": {"model_version": 3}}, "deployment.model_version: is not one of its arguments"),
    ({"job": "{{ job(params) }}"}, "deployment.code_dir: is missing and the job has no code folder"),
    ({"sweep": "{{ sweep(params) }}"}, "sweep: '{{ sweep\\(params\\) }}' is not an object"),
])
def test_a_description_with_an_unknown_key_is_refused_when_the_dag_is_parsed(changes, message):
    with pytest.raises(SpecError, match=message):
        team_dag(**changes)


def test_a_job_rendered_as_text_says_how_to_render_it_as_an_object():
    """Before: TypeError: 'str' object is not a mapping, after the form was submitted."""
    with DAG("text", schedule=None, start_date=datetime(2026, 1, 5)):
        task = TrainModelOperator(task_id="train", job=str(JOB), render_template_as_native_obj=False)
    with pytest.raises(SpecError, match=r"job: is the text .* not the object it spells; render templates as objects "
                                        r"\(Airflow: render_template_as_native_obj=True"):
        task.spec()


@pytest.mark.parametrize("field", ["trial", "search_space", "objective", "limits"])
def test_a_sweep_argument_rendered_as_text_says_how_to_render_it_as_an_object(field):
    from mlrunway.operators.sweep import sweep_spec

    arguments = {"trial": JOB, **SWEEP, "limits": {"max_total_trials": 4}}
    arguments[field] = str(arguments[field])  # what a template gives when rendered as text
    with pytest.raises(SpecError, match=rf"^{field}: is the text .* not the object it spells; render templates"):
        sweep_spec(**arguments)


@pytest.mark.parametrize(("dag_file", "page"), [("demand_forecast.py", "tutorials/your-own-model.md"),
                                              ("support_tickets.py", "tutorials/your-own-model.md"),
                                              ("demand_forecast.py", "how-to/install.md")])
def test_the_team_dags_the_docs_show_are_the_shipped_dags_in_at_most_30_lines(dag_file, page):
    """The docs include dags/demand_forecast.py (a regressor) and dags/support_tickets.py (a text classifier), which
    tests/e2e runs end to end, from their files (a snippet the strict build fails on when the file is gone); the
    README shows the first whole, a copy that must stay the file."""
    assert f'--8<-- "dags/{dag_file}"' in (REPO / "docs" / page).read_text()
    shipped = (REPO / "dags" / dag_file).read_text()
    assert len(shipped.splitlines()) <= 30
    if dag_file == "demand_forecast.py":
        readme = (REPO / "README.md").read_text()
        shown = re.search(rf"<!-- team-dag: dags/{dag_file} -->\n```python\n(.*?)```", readme, re.S)
        assert shown is not None, f"the README's block of dags/{dag_file} is missing"
        assert shown.group(1) == shipped


def test_the_train_task_checks_what_export_and_the_sweep_need_as_soon_as_its_job_ends():
    """The builder hands export's settings and the sweep's primary metric to Train's check; a sweep with a trial
    of its own may log other metrics, so then none is required."""
    dag, tasks = team_dag(export={"inputs_file": "sample_inputs.npy", "atol": 1e-3})
    assert tasks.train.required_metrics == ["val_rmse"]
    assert tasks.train.export == {"inputs_file": "sample_inputs.npy", "atol": 1e-3}
    assert (tasks.export_onnx.inputs_file, tasks.export_onnx.atol) == ("sample_inputs.npy", 1e-3)
    _, tasks = team_dag(sweep={**SWEEP, "trial": {**JOB, "command": JOB["command"] + " --quiet"}})
    assert tasks.train.required_metrics is None



def test_the_job_running_tasks_are_retried_to_re_attach_and_the_others_are_not():
    _, tasks = team_dag()
    assert [(t.retries, t.retry_delay.total_seconds()) for t in (tasks.train, tasks.sweep)] == [(2, 60.0)] * 2
    assert tasks.pick_best.retries == tasks.export_onnx.retries == 0


def test_preflight_compiles_score_py_in_memory_and_names_the_line(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    code = tmp_path / "code"
    shutil.copytree(CODE, code)
    source = (code / "score.py").read_text().replace("def run(raw_data: str):", "def run(raw_data: str)")
    (code / "score.py").write_text(source)
    line = source.splitlines().index("def run(raw_data: str)") + 1
    code.chmod(0o555)  # a read-only code folder: compiling writes nothing into it
    try:
        dag, tasks = team_dag(job={**JOB, "code": str(code)})
        with pytest.raises(SpecError, match=rf"deployment.scoring_script: {re.escape(str(code))}/score.py:{line}: "
                                            r"expected ':'"):
            tasks.preflight(context(dag))
    finally:
        code.chmod(0o755)
    assert sorted(p.name for p in code.iterdir()) == sorted(p.name for p in Path(CODE).iterdir())


def test_preflight_names_the_jobs_fields_as_the_dag_does_whichever_check_finds_them(tmp_path, monkeypatch):
    """The job's own check and the backend's both say ``job.``; before, the backend's said ``command_job.``."""
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    dag, tasks = team_dag(job={**JOB, "code": str(tmp_path / "nowhere")}, deployment={
        "sample_request": "sample_request.json", "code_dir": CODE})
    with pytest.raises(SpecError, match=r"^job.code: .*nowhere"):
        tasks.preflight(context(dag))
    dag, tasks = team_dag(job={**JOB, "command": ""})
    with pytest.raises(SpecError, match=r"^job.command: is missing"):
        tasks.preflight(context(dag))


def test_the_builders_old_address_still_imports_it():
    from mlrunway.airflow.lifecycle import lifecycle as old_address

    assert old_address is lifecycle
