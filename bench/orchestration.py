"""Orchestration overhead: the demo DAG under Airflow against its jobs, and against the same pipeline called
through the core alone.

    .venv/bin/python bench/orchestration.py [--epochs 20] [--trials 8] [--delay 10] [--repeat 5]

- **Pipeline**: the same steps with the same settings (by default the DAG's own, what ``make demo`` runs) twice
  on the local backend: once as plain calls into ``mlrunway`` (submit and wait for train, the sweep, pick the
  best, export, deploy blue, clean up) and once as ``airflow dags test train_sweep_deploy`` (XComs, deferral to
  a trigger, the task runner's bookkeeping). Two overheads:
  - **over the jobs** (the issue's measure): wall time against the train and sweep jobs' own run times, the
    jobs on the critical path (from the start to the end of their processes). What is not a job counts as
    overhead here: the CLI's start-up, each job's start-up in the backend, picking, the ONNX export, the deployment;
  - **Airflow's**: the DAG's wall time over the plain run's, the cost of running the steps as Airflow tasks.
- **Parse**: a fresh interpreter importing ``airflow.sdk`` alone, against one that then executes the DAG
  file (what the dag processor does), median of ``--repeat``.

Prints a table and records bench/results/orchestration.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, record, table

DAG_FILE = REPO / "dags" / "train_sweep_deploy.py"


def import_seconds(code: str, repeat: int) -> float:
    timer = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    return statistics.median(float(subprocess.run([sys.executable, "-c", timer], check=True, capture_output=True,
                                                  text=True, cwd=REPO).stdout) for _ in range(repeat))


def jobs_seconds(workspace: Path) -> float:
    from mlrunway.local.jobs import LocalJobs
    from mlrunway.local.workspace import Workspace

    jobs = LocalJobs(Workspace.at(workspace))
    return sum(j.ended - j.started for j in jobs.list() if "_trial_" not in j.name)


def plain_run(workspace: Path, data: Path, args: argparse.Namespace) -> float:
    """The DAG's six steps as plain calls, with the DAG's own defaults for everything not set here."""
    from mlrunway.local.backend import LocalBackend
    from mlrunway.onnx_export.registered import export_registered
    from mlrunway.pipeline import RunNames, cleanup, deploy_blue, pick_best
    from mlrunway.specs import BanditPolicy
    from training.tutorial import train_job, tutorial_sweep

    backend = LocalBackend.at(workspace)
    names = RunNames.of("train_sweep_deploy", "plain", "digits")
    started = time.perf_counter()
    backend.jobs.submit(names.train_job, train_job(str(REPO / "training"), str(data), num_epochs=args.epochs))
    backend.jobs.wait(names.train_job, poll_s=2.0)
    trial = train_job(str(REPO / "training"), str(data), num_epochs=args.epochs)
    policy = BanditPolicy(slack_factor=0.15, evaluation_interval=1, delay_evaluation=args.delay)
    backend.jobs.submit_sweep(names.sweep, tutorial_sweep(trial, max_total_trials=args.trials, max_concurrent_trials=2,
                                                          early_termination=policy))
    backend.jobs.wait(names.sweep, poll_s=2.0)
    best = pick_best(backend, names.sweep, names.model)
    onnx, _ = export_registered(backend.models, best["model_name"], best["model_version"], data_dir=data)
    deploy_blue(backend, names.endpoint, onnx.name, onnx.version, REPO / "training", data)
    cleanup(backend, names)
    return time.perf_counter() - started


def dag_run(workspace: Path, data: Path, args: argparse.Namespace, home: Path) -> tuple[float, str]:
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "MLRUNWAY_WORKSPACE": str(workspace)}
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    conf = {"epochs": args.epochs, "max_trials": args.trials, "delay_evaluation": args.delay, "data_dir": str(data)}
    started = time.perf_counter()
    done = subprocess.run([airflow, "dags", "test", "train_sweep_deploy", "-c", json.dumps(conf)], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    state = "success" if done.returncode == 0 and "state=success" in done.stdout + done.stderr else "failed"
    return wall, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)  # the DAG's defaults: the demo
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--delay", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from mlrunway.data import write_digits

    sdk = import_seconds("import airflow.sdk", args.repeat)
    dag = import_seconds(f"import airflow.sdk, runpy; runpy.run_path({str(DAG_FILE)!r})", args.repeat)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        data = write_digits(tmp / "digits")
        plain_wall = plain_run(tmp / "plain", data, args)
        dag_wall, state = dag_run(tmp / "dag", data, args, tmp / "airflow")
        rows = [{"run": "core calls", "wall_s": plain_wall, "jobs_s": jobs_seconds(tmp / "plain"), "state": "success"},
                {"run": "airflow dags test", "wall_s": dag_wall, "jobs_s": jobs_seconds(tmp / "dag"), "state": state}]
    for row in rows:
        row["over_jobs"] = f"{row['wall_s'] / row['jobs_s'] - 1:+.0%}"
    overhead = dag_wall / plain_wall - 1
    over_jobs = dag_wall / rows[1]["jobs_s"] - 1
    print(table(rows, [("run", "pipeline"), ("state", "state"), ("wall_s", "wall s"), ("jobs_s", "train + sweep jobs s"),
                       ("over_jobs", "wall over jobs")]))
    print(f"the DAG's wall time over its jobs' own: {over_jobs:+.1%} (target < 10%); Airflow's share: "
          f"{dag_wall - plain_wall:+.1f} s, {overhead:+.1%} of the plain run's wall time")
    print(f"parse: import airflow.sdk {sdk:.3f} s; + the DAG file {dag:.3f} s; the DAG adds {dag - sdk:.3f} s "
          f"(target < 0.3 s)")
    record("orchestration", args, rows, ("apache-airflow", "torch", "mlflow"), over_jobs=round(over_jobs, 4),
           airflow_overhead=round(overhead, 4),
           parse={"import_airflow_sdk_s": round(sdk, 3), "with_dag_file_s": round(dag, 3), "added_s": round(dag - sdk, 3)})
    if state != "success":
        raise SystemExit("the DAG run failed")


if __name__ == "__main__":
    main()
