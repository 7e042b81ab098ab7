"""A refusal a retry cannot change (a bad input, a preflight refusal, a missing extra, the export job's parity verdict)
fails its task at once, for good, its message said once; a lost watch and an outage keep their retries, and the
retry re-attaches (a killed worker's retry: tests/e2e/test_worker_crash.py).

Each class on the shipped FakeBackend, as the exception the task raises (Airflow retries any but an
AirflowFailException); then every class in one run of real Airflow (``dag.test()``), as the task's try count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from mlrunway.backend.fake import FakeBackend
from mlrunway.errors import MlrunwayError, ParityError, SpecError, Unavailable
from mlrunway.extras import BACKEND_EXTRAS, MissingExtra
from mlrunway.operators.preflight import check_scoring_script
from tests.conftest import REPO
from tests.operators.test_operators_on_fake import NAMES, StateStore, context, export, registered, sweep, train
from tests.tutorial import tutorial_job

PARITY = {"passed": False, "error": "ParityError", "message": "onnx parity: worst output used 4.2x the tolerance"}


@pytest.fixture
def fake(request, tmp_path, monkeypatch) -> Iterator[FakeBackend]:
    """A fake of this test's own, behind the connection ``fake`` (extra ``name``)."""
    name = request.node.name
    monkeypatch.setenv("AIRFLOW_CONN_FAKE", json.dumps({"conn_type": "mlrunway_fake", "extra": {"name": name}}))
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    yield FakeBackend.named(name)
    FakeBackend.forget(name)


def broken_score_py(tmp_path: Path) -> Callable[[Any], None]:
    """The lifecycle's preflight of a score.py with a syntax error."""
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "score.py").write_text("def init(:\n    pass\n")
    return lambda _context: check_scoring_script(code_dir=str(tmp_path / "code"), scoring_script=None)


def bad_job() -> dict[str, Any]:
    job = tutorial_job("/data")
    return {**job, "command": job["command"] + " --seed ${{inputs.seed}}"}


def spec_error(fake: FakeBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BaseOperator:
    return train(job=bad_job())


def sweep_spec_error(fake: FakeBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BaseOperator:
    return sweep(search_space={"learning_rate": {"type": "uniform", "min_value": 1, "max_value": 0}})


def preflight(fake: FakeBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BaseOperator:
    return train(preflight=broken_score_py(tmp_path))


def missing_extra(fake: FakeBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BaseOperator:
    monkeypatch.setitem(BACKEND_EXTRAS, "mlrunway_fake", ("local", ("mlrunway_not_installed",)))
    return train()


def parity(fake: FakeBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BaseOperator:
    registered(fake, tmp_path)
    fake.jobs.export_verdict = PARITY
    return export()


@pytest.mark.parametrize(("refused", "raises", "message"), [
    pytest.param(spec_error, SpecError, "${{inputs.seed}} has no matching input", id="spec-error"),
    pytest.param(sweep_spec_error, SpecError, "min_value 1.0 is not less than max_value 0.0", id="sweep-spec-error"),
    pytest.param(preflight, SpecError, "score.py:1: invalid syntax", id="preflight"),
    pytest.param(missing_extra, MissingExtra, 'pip install "mlrunway[local]"', id="missing-extra"),
    pytest.param(parity, ParityError, "worst output used 4.2x the tolerance", id="parity"),
])
def test_a_refusal_a_retry_cannot_change_fails_the_task_for_good_saying_it_once(fake, tmp_path, monkeypatch, refused,
                                                                                raises, message):
    with pytest.raises(raises) as raised:
        refused(fake, tmp_path, monkeypatch).execute(context())
    assert isinstance(raised.value, AirflowFailException), "Airflow would retry it"
    assert "".join(traceback.format_exception(raised.value)).count(message) == 1


def test_a_missing_extra_where_a_deferred_task_resumes_fails_it_for_good(fake, monkeypatch):
    monkeypatch.setitem(BACKEND_EXTRAS, "mlrunway_fake", ("local", ("mlrunway_not_installed",)))
    event = {"job_name": NAMES.train_job, "outcome": "ended", "status": "Completed", "error": None}
    with pytest.raises(MissingExtra) as raised:
        train().resume_execution("execute_complete", {"event": event}, context())
    assert isinstance(raised.value, AirflowFailException)


@pytest.mark.parametrize(("waits", "raises", "message"), [
    pytest.param({"deferrable": False}, MlrunwayError, "status could not be read .*; the next try re-attaches to it",
                 id="lost-watch"),
    pytest.param({"defer_after_s": 0}, Unavailable, "the fake service did not answer", id="outage"),
])
def test_a_lost_watch_or_an_outage_is_retried_and_the_retry_re_attaches(fake, waits, raises, message):
    fake.jobs.outages[NAMES.train_job] = 1  # its first read after the submission brings no news
    store = StateStore()
    with pytest.raises(raises, match=message) as raised:
        train(retries=2, **waits).execute(context(task_state_store=store))
    assert not isinstance(raised.value, AirflowFailException), "Airflow would not retry it"
    assert train(retries=2, **waits).execute(context(task_state_store=store))["job_name"] == NAMES.train_job
    assert list(fake.jobs.records) == [NAMES.train_job]


# -- the same in real Airflow: each task's try count -------------------------------------------------------------
RUN_AFTER = "2026-11-01T00:00:00+00:00"
DAG_FILE = '''
import sys
from datetime import datetime, timedelta
from pathlib import Path
sys.path.insert(0, {repo!r})
from airflow.sdk import DAG
from mlrunway.backend.fake import FakeBackend
from mlrunway.backend.naming import RunNames
from mlrunway.extras import BACKEND_EXTRAS
from mlrunway.operators import ExportOnnxOperator, TrainModelOperator
from tests.operators.test_refusals import PARITY, bad_job, broken_score_py
from tests.tutorial import tutorial_job

fake = FakeBackend.named("tries")
run_id = "manual__{run_after}"
for prefix in ("lost", "outage"):  # the first read of each one's job brings no news
    fake.jobs.outages.setdefault(RunNames.of("tries", run_id, prefix).train_job, 1)
fake.jobs.export_verdict = PARITY
if not fake.models.list("fk-model"):
    fake.models.register("fk-model", {model!r})
BACKEND_EXTRAS["mlrunway_local"] = ("local", ("mlrunway_not_installed",))
common = dict(retries=2, retry_delay=timedelta(0), poll_interval_s=0.01, defer_after_s=0, backend_conn_id="fake")

with DAG(dag_id="tries", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
    TrainModelOperator(task_id="spec_error", name_prefix="spec", job=bad_job(), **common)
    TrainModelOperator(task_id="preflight", name_prefix="pre", job=tutorial_job("/data"),
                       preflight=broken_score_py(Path({tmp!r})), **common)
    TrainModelOperator(task_id="missing_extra", name_prefix="extra", job=tutorial_job("/data"),
                       **{{**common, "backend_conn_id": "local"}})
    ExportOnnxOperator(task_id="parity", name_prefix="fk", model_name="fk-model", model_version=1, **common)
    TrainModelOperator(task_id="lost_watch", name_prefix="lost", job=tutorial_job("/data"),
                       **{{**common, "deferrable": False}})
    TrainModelOperator(task_id="outage", name_prefix="outage", job=tutorial_job("/data"), **common)
'''
RUN = textwrap.dedent('''
    import json, sys
    from datetime import datetime
    sys.path.insert(0, sys.argv[1])
    from airflow.utils.session import create_session
    from tries import dag
    when = datetime.fromisoformat(sys.argv[2])
    run = dag.test(logical_date=when, run_after=when)
    with create_session() as session:
        print("TRIES", json.dumps({ti.task_id: [str(ti.state), ti.try_number]
                                   for ti in run.get_task_instances(session=session)}))
''')


@pytest.mark.slow
def test_in_airflow_a_refusal_takes_one_try_and_a_lost_watch_or_an_outage_a_retry(airflow_db, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    model = tmp_path / "model"
    model.mkdir()
    (model / "signature.json").write_text(json.dumps({"inputs": [{"name": "x", "shape": [None, 4]}]}))
    (model / "model.pt2").write_text("a torch.export program")
    (dags / "tries.py").write_text(DAG_FILE.format(repo=str(REPO), run_after=RUN_AFTER, model=str(model),
                                                   tmp=str(tmp_path)))
    env = {**os.environ, "MLRUNWAY_WORKSPACE": str(tmp_path / "ws"), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW_CONN_FAKE": json.dumps({"conn_type": "mlrunway_fake", "extra": {"name": "tries"}}),
           "AIRFLOW_CONN_LOCAL": json.dumps({"conn_type": "mlrunway_local"})}
    done = subprocess.run([sys.executable, "-c", RUN, str(dags), RUN_AFTER], env=env, capture_output=True, text=True,
                          timeout=300)
    line = next((line for line in done.stdout.splitlines() if line.startswith("TRIES ")), None)
    assert line is not None, (done.stdout + done.stderr)[-5000:]
    assert json.loads(line.removeprefix("TRIES ")) == {
        "spec_error": ["failed", 1], "preflight": ["failed", 1], "missing_extra": ["failed", 1], "parity": ["failed", 1],
        "lost_watch": ["success", 2], "outage": ["success", 2]}


def test_deferrable_defaults_from_airflows_operators_default_deferrable(monkeypatch):
    """As Airflow's own providers read it (issue 77, 4): a deployment's setting decides, an argument overrides it."""
    from mlrunway.operators import TrainModelOperator as Train

    for setting, expected in (("True", True), ("False", False)):
        monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", setting)
        assert Train(task_id=f"t{setting}", command="true", code=".").deferrable is expected
    assert Train(task_id="own", command="true", code=".", deferrable=True).deferrable is True
