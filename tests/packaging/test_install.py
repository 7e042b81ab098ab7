"""mlrunway installed as a team installs it into its own Airflow (issue 61, 5; make test-long, minutes): the built
wheel in clean virtualenvs, DAGs in a folder outside the repository.

1. Airflow and the wheel with ``[azure]`` only: the DAGs parse (``airflow dags list-import-errors`` is empty) and
   torch, onnxruntime and MLflow are not in the environment. Then a builder DAG runs end to end with ``airflow dags
   test`` on the tests' fake backend (installed beside it), its training outputs scripted with a real small
   ``model.pt2``, in that same environment: export and parity are a job on the backend, not the worker's work.
2. Another clean virtualenv with ``[local]`` runs the demo DAG (``dags/train_sweep_deploy.py``, copied out of the
   repository) on the local backend.

Installs use ``constraints.txt``. Airflow's own constraints file for 3.3.2 / Python 3.11 is not on a package index
(it is fetched from GitHub), so this machine cannot use it: these installs are untested against it. The size of
each environment is printed (``-s``), for the closing note's before/after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.long]

FAKE_DAG = textwrap.dedent('''
    """A team's builder DAG on the tests' fake backend, its outputs scripted with a real model (test_install)."""
    import json
    from datetime import datetime
    from pathlib import Path

    from airflow.sdk import DAG

    from mlrunway.airflow.lifecycle import lifecycle
    from mlrunway.backend.fake import FakeBackend
    from mlrunway.backend.naming import RunNames
    from mlrunway.backend.types import JobStatus, TrialInfo

    HERE = Path(__file__).resolve().parent
    CODE = HERE / "code"
    MODEL = {f"model/{p.name}": p.read_bytes() for p in (HERE / "model").iterdir()}


    def script_the_fake(context):
        """What the fake's jobs leave: the real model in train's outputs and in two finished trials'."""
        fake = FakeBackend.named("install")
        fake.jobs.output_files = dict(MODEL)
        names = RunNames.of(context["dag"].dag_id, context["run_id"], "inst")
        fake.jobs.logged[names.train_job] = {"val_rmse": (2.0, 1.6)}  # what the training job logged
        trials = [TrialInfo(name=f"{names.sweep}_trial_{i}", params={"lr": lr}, status=JobStatus.COMPLETED,
                            history=history, metrics={"val_rmse": history[-1]})
                  for i, (lr, history) in enumerate([(0.01, (2.0, 1.5)), (0.02, (1.8, 1.1))])]
        fake.jobs.set_trials(names.sweep, trials)
        for trial in trials:
            for relative, data in MODEL.items():
                target = Path(fake.job_outputs(trial.name)) / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        expected = (CODE / "expected.json").read_text()
        fake.endpoints.scorer = lambda payload, deployment: expected


    with DAG("install_fake", schedule=None, start_date=datetime(2026, 1, 5)) as dag:
        lifecycle(
            job={"command": "python fit.py --lr ${{inputs.lr}} --epochs ${{inputs.epochs}} --model-dir ${{outputs.model}}",
                 "code": str(CODE), "inputs": {"lr": 0.01, "epochs": 2}, "outputs": {"model": {"type": "uri_folder"}}},
            sweep={"search_space": {"lr": {"type": "choice", "values": [0.01, 0.02]}},
                   "objective": {"primary_metric": "val_rmse", "goal": "minimize"},
                   "limits": {"max_total_trials": 2, "max_concurrent_trials": 2}},
            export={"inputs_file": "sample_inputs.npy"},
            deployment={"sample_request": "sample_request.json", "expected_response": "expected.json"},
            model_path="${{outputs.model}}", name_prefix="inst", backend_conn_id="fake", preflight=script_the_fake,
            job_retries=0)
''')


def run(*argv: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 1200) -> str:
    done = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def venv(path: Path) -> Path:
    run(sys.executable, "-m", "venv", path)
    return path / "bin"


def pip(bin_: Path, *args: str | Path) -> None:
    run(bin_ / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", *args)


def size_mb(bin_: Path) -> float:
    site = run(bin_ / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    return sum(f.stat().st_size for f in Path(site).rglob("*") if f.is_file()) / 1e6


def absent(bin_: Path, *modules: str) -> list[str]:
    """Which of ``modules`` the environment cannot find."""
    code = f"import importlib.util as u; print(','.join(m for m in {modules!r} if u.find_spec(m) is None))"
    return run(bin_ / "python", "-c", code).strip().split(",")


def import_errors(bin_: Path, env: dict[str, str]) -> list[dict[str, str]]:
    """The DAG files of the dags folder that fail to import, parsed here as the dag-processor parses them (the
    command exits 1 when there are any)."""
    done = subprocess.run([str(bin_ / "airflow"), "dags", "list-import-errors", "--local", "--output", "json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))  # (Airflow's own warnings come first, on stdout)


def airflow_env(home: Path, dags: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    shutil.rmtree(REPO / "build" / "lib", ignore_errors=True)  # a stale earlier layout would ship (test_wheel)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, REPO)
    (found,) = dist.glob("mlrunway-*.whl")
    return found


def test_a_base_install_with_azure_parses_the_dags_then_export_runs_a_builder_dag_on_the_fake(wheel, tmp_path):
    bin_ = venv(tmp_path / "venv")
    constraints = str(REPO / "constraints.txt")
    pip(bin_, "-c", constraints, "apache-airflow==3.3.2", f"mlrunway[azure] @ {wheel.as_uri()}")
    base = size_mb(bin_)
    assert absent(bin_, "torch", "onnxruntime", "mlflow", "onnx", "optuna", "pandas", "sklearn") == [
        "torch", "onnxruntime", "mlflow", "onnx", "optuna", "pandas", "sklearn"]

    # The team's own folder: the builder DAG, its code (the example regressor's, with what the smoke test expects)
    # and a real model written by the example's own fit.py here.
    dags = tmp_path / "team" / "dags"
    shutil.copytree(REPO / "examples" / "demand_forecast", dags / "code")
    run(sys.executable, "fit.py", "--rows", "300", "--epochs", "1", "--model-dir", dags / "model",
        cwd=dags / "code", env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    (dags / "code" / "expected.json").write_text(json.dumps({"predictions": [1.0, 2.0]}))
    (dags / "install_fake.py").write_text(FAKE_DAG)
    env = airflow_env(tmp_path, dags, AIRFLOW_CONN_FAKE=json.dumps({"conn_type": "mlrunway_fake",
                                                                    "extra": {"name": "install"}}))
    run(bin_ / "airflow", "db", "migrate", env=env)
    # A DAG that imports torch at parse time is what this install must refuse: the check sees it, then it goes.
    (dags / "needs_torch.py").write_text("from airflow.sdk import DAG\nimport torch\n")
    assert [e["filepath"] for e in import_errors(bin_, env)] == [str(dags / "needs_torch.py")]
    (dags / "needs_torch.py").unlink()
    assert import_errors(bin_, env) == []
    assert "install_fake" in run(bin_ / "airflow", "dags", "list", "--local", "--output", "json", env=env)

    # The fake beside it; no [export]: the export task submits its job and reads its verdict.
    pip(bin_, "--no-deps", REPO / "tests" / "fake_backend")
    out = run(bin_ / "airflow", "dags", "test", "install_fake", env=env)
    assert "state=success" in out or "success" in out.lower(), out[-3000:]
    assert absent(bin_, "torch", "onnxruntime", "onnx") == ["torch", "onnxruntime", "onnx"]
    print(f"\ninstall size (site-packages, MB): airflow + mlrunway[azure] {base:.0f}")


def test_a_local_install_runs_the_demo_dag_from_a_folder_outside_the_repository(wheel, tmp_path, small_digits):
    bin_ = venv(tmp_path / "venv")
    constraints = str(REPO / "constraints.txt")
    pip(bin_, "-c", constraints, "torch")
    pip(bin_, "-c", constraints, "apache-airflow==3.3.2", f"mlrunway[local] @ {wheel.as_uri()}")
    local = size_mb(bin_)
    dags = tmp_path / "team" / "dags"
    dags.mkdir(parents=True)
    shutil.copy(REPO / "dags" / "train_sweep_deploy.py", dags)
    shutil.copytree(REPO / "training", tmp_path / "team" / "training")  # the DAG's code folder: <dags>/../training
    env = airflow_env(tmp_path, dags, MLRUNWAY_WORKSPACE=str(tmp_path / "ws"), MLRUNWAY_DATA_DIR=str(small_digits))
    run(bin_ / "airflow", "db", "migrate", env=env)
    conf = json.dumps({"epochs": 2, "max_trials": 2, "max_concurrent_trials": 2, "delay_evaluation": 1})
    out = run(bin_ / "airflow", "dags", "test", "train_sweep_deploy", "-c", conf, env=env)
    assert "success" in out.lower(), out[-3000:]
    summary = run(bin_ / "python", "-m", "mlrunway.airflow.summary", env=env)
    assert "run: success" in summary and "nothing left running" in summary, summary
    pip(bin_, "-c", constraints, f"mlrunway[local,azure] @ {wheel.as_uri()}")  # what 0.2.0's one install held
    print(f"\ninstall sizes (site-packages, MB): airflow + mlrunway[local] {local:.0f}; "
          f"[local,azure] (0.2.0's base) {size_mb(bin_):.0f}")
