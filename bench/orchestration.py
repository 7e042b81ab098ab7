"""Orchestration overhead: the demo DAG under Airflow against its jobs, and against the same pipeline called
through the core alone.

    .venv/bin/python bench/orchestration.py [--epochs 20] [--trials 8] [--delay 10] [--repeats 5]

About 11 minutes with the defaults (each repeat: the plain run and the DAG run, 2.5 minutes).

- **Pipeline**: the same steps with the same settings (by default the DAG's own, what ``make demo`` runs) twice
  on the local backend: once as plain calls into ``mlrunway`` (submit and wait for train, the sweep, pick the
  best, export, deploy blue, save the sweep's report and clean up) in a fresh interpreter, timed from before the
  core's imports, as each DAG run pays its own, and once as ``airflow dags test
  train_sweep_deploy`` (XComs, deferral to a trigger, the task runner's bookkeeping). Two overheads:
  - **over the jobs** (the issue's measure): wall time against the train and sweep jobs' own run times, the
    jobs on the critical path (from the start to the end of their processes). What is not a job counts as
    overhead here: the CLI's start-up, each job's start-up in the backend, picking, the ONNX export, the deployment;
  - **Airflow's**: the DAG's wall time over the plain run's, the cost of running the steps as Airflow tasks.
- **mlrunway's share**: the DAG run's wall time minus the core calls' and minus ``airflow dags test`` of a DAG
  of six empty tasks (Airflow's fixed cost for six tasks): what mlrunway's operators, hook and triggers add.
- **Parse**: a fresh interpreter importing ``airflow.sdk`` alone, against one that then executes the DAG
  file (what the dag processor does), once each per repeat.

The two runs alternate, the first of them swapped each repeat, every one in a fresh workspace; both must end in
success, or nothing is recorded. Prints a table and records bench/results/orchestration.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, Bench, Target, harness_args, interleaved, table

DAG_FILE = REPO / "dags" / "train_sweep_deploy.py"


def import_seconds(code: str) -> float:
    timer = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    return float(subprocess.run([sys.executable, "-c", timer], check=True, capture_output=True, text=True,
                                cwd=REPO).stdout)


def jobs_seconds(workspace: Path) -> float:
    from mlrunway.local.jobs import LocalJobs
    from mlrunway.local.workspace import Workspace

    jobs = LocalJobs(Workspace.at(workspace))
    return sum((j.ended or 0.0) - (j.started or 0.0) for j in jobs.list() if "_trial_" not in j.name)


def plain_run(workspace: Path, data: Path, args: argparse.Namespace) -> float:
    """The core calls in a fresh interpreter, as each ``airflow dags test`` is one: what they import (torch, MLflow,
    ONNX Runtime) counts in both. In the benchmark's own process, only the first repeat's calls paid for their
    imports, and the later repeats' DAG runs were charged about 2 s that the core calls had stopped paying."""
    done = subprocess.run([sys.executable, __file__, "--plain-run", str(workspace), str(data), "--epochs",
                           str(args.epochs), "--trials", str(args.trials), "--delay", str(args.delay)],
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get(
                              "PYTHONPATH")]))}, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the core calls failed: {done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def core_calls(workspace: Path, data: Path, args: argparse.Namespace) -> float:
    """The DAG's six steps as plain calls, with the DAG's own defaults for everything not set here: the wall time
    from before the core's imports to the end."""
    started = time.perf_counter()
    from mlrunway.backend.types import DeploymentSettings
    from mlrunway.deploy.blue import deploy_blue
    from mlrunway.local.backend import LocalBackend
    from mlrunway.onnx_export.registered import export_registered
    from mlrunway.pipeline import RunNames, cleanup, pick_best
    from mlrunway.report import save_run_report
    from mlrunway.specs import BanditPolicy
    from training.tutorial import train_job, tutorial_sweep

    backend = LocalBackend.at(workspace)
    names = RunNames.of("train_sweep_deploy", "plain", "digits")
    backend.jobs.submit(names.train_job, train_job(str(REPO / "training"), str(data), num_epochs=args.epochs))
    backend.jobs.wait(names.train_job, poll_s=2.0)
    trial = train_job(str(REPO / "training"), str(data), num_epochs=args.epochs)
    policy = BanditPolicy(slack_factor=0.15, evaluation_interval=1, delay_evaluation=args.delay)
    backend.jobs.submit_sweep(names.sweep, tutorial_sweep(trial, max_total_trials=args.trials, max_concurrent_trials=2,
                                                          early_termination=policy))
    backend.jobs.wait(names.sweep, poll_s=2.0)
    best = pick_best(backend, names.sweep, names.model)
    onnx, _ = export_registered(backend, best["model_name"], best["model_version"], job_name=names.export_job,
                                data_dir=str(data))
    deploy_blue(backend, names.endpoint, DeploymentSettings(model=f"{onnx.name}:{onnx.version}",
                                                            code_dir=str(REPO / "training")), data)
    save_run_report(backend, names, workspace / "reports")  # the cleanup task saves the run's report first
    cleanup(backend, names)
    return time.perf_counter() - started


def airflow_env(workspace: Path, home: Path, dags: Path = REPO / "dags") -> dict[str, str]:
    return {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "MLRUNWAY_WORKSPACE": str(workspace), "MLRUNWAY_SCHEDULE": "none"}


EMPTY_DAG = """
from datetime import datetime
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, chain
with DAG(dag_id="six_empty_tasks", schedule=None, start_date=datetime(2026, 1, 5), catchup=False):
    chain(*(EmptyOperator(task_id=f"step_{i}") for i in range(6)))
"""


def empty_dag_run(home: Path, dags: Path) -> tuple[float, str]:
    """``airflow dags test`` of six empty tasks in a row: what Airflow costs a DAG of six tasks doing nothing."""
    started = time.perf_counter()
    done = subprocess.run([AIRFLOW, "dags", "test", "six_empty_tasks"], env=airflow_env(home / "none", home, dags),
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    return wall, "success" if done.returncode == 0 and "state=success" in done.stdout + done.stderr else "failed"


AIRFLOW = Path(sys.executable).parent / "airflow"


def dag_run(workspace: Path, data: Path, args: argparse.Namespace, home: Path) -> tuple[float, str]:
    env = airflow_env(workspace, home)
    conf = {"epochs": args.epochs, "max_trials": args.trials, "delay_evaluation": args.delay, "data_dir": str(data)}
    started = time.perf_counter()
    # As make demo runs it (python -m mlrunway.airflow.demo: Airflow's CLI, its heap frozen at exit).
    done = subprocess.run([sys.executable, "-m", "mlrunway.airflow.demo", "dags", "test", "train_sweep_deploy", "-c",
                           json.dumps(conf)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    state = "success" if done.returncode == 0 and "state=success" in done.stdout + done.stderr else "failed"
    return wall, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)  # the DAG's defaults: the demo
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--delay", type=int, default=10)
    parser.add_argument("--plain-run", nargs=2, type=Path, metavar=("WORKSPACE", "DATA"), help=argparse.SUPPRESS)
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    if args.plain_run:  # one run of the core calls, in this fresh interpreter (plain_run)
        workspace, data = args.plain_run
        print(core_calls(workspace, data, args))
        return
    bench = Bench("orchestration", args)
    from mlrunway.data import write_digits

    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        data = write_digits(tmp / "digits")
        home = tmp / "airflow"
        subprocess.run([AIRFLOW, "db", "migrate"], env=airflow_env(tmp / "none", home), check=True,
                       capture_output=True)
        empty = tmp / "empty-dags"
        empty.mkdir()
        (empty / "six_empty_tasks.py").write_text(EMPTY_DAG)
        for repeat, order in interleaved(["core calls", "airflow dags test", "six empty tasks"], args.repeats):
            walls = {}
            for run in order:
                workspace = tmp / f"{repeat}-{run.split()[0]}"
                if run == "core calls":
                    wall, state = plain_run(workspace, data, args), "success"
                elif run == "six empty tasks":
                    wall, state = empty_dag_run(home, empty)
                else:
                    wall, state = dag_run(workspace, data, args, home)
                if state != "success":
                    raise SystemExit(f"{run} failed in repeat {repeat} (log under {home}): not recorded")
                if run == "six empty tasks":
                    walls[run] = wall
                    bench.add(f"{run}: wall s", wall, "s")
                    continue
                jobs = jobs_seconds(workspace)
                walls[run] = wall
                rows.append({"repeat": repeat, "run": run, "wall_s": wall, "jobs_s": jobs, "state": state,
                             "over_jobs": wall / jobs - 1})
                bench.add(f"{run}: wall s", wall, "s")
                bench.add(f"{run}: wall over the jobs'", wall / jobs - 1, "fraction")
                print(table(rows[-1:], COLUMNS), flush=True)
            bench.add("Airflow's share: the DAG's wall over the core calls'",
                      walls["airflow dags test"] / walls["core calls"] - 1, "fraction")
            bench.add("mlrunway's share: the DAG's wall - the core calls' - six empty tasks'",
                      walls["airflow dags test"] - walls["core calls"] - walls["six empty tasks"], "s")
            sdk = import_seconds("import airflow.sdk")
            dag = import_seconds(f"import airflow.sdk, runpy; runpy.run_path({str(DAG_FILE)!r})")
            bench.add("parse: import airflow.sdk s", sdk, "s")
            bench.add("parse: the DAG file adds s", dag - sdk, "s")
    print(table(rows, COLUMNS))
    bench.record(rows, ("apache-airflow", "torch", "mlflow"), [
        Target("parse: the DAG file adds s", "<=", 0.3, "parsing the DAG adds under 0.3 s to import airflow.sdk"),
        Target("mlrunway's share: the DAG's wall - the core calls' - six empty tasks'", "<=", 2.0,
               "mlrunway's own share of the DAG run at most 2 s")])


COLUMNS = [("repeat", "repeat"), ("run", "pipeline"), ("state", "state"), ("wall_s", "wall s"),
           ("jobs_s", "train + sweep jobs s"), ("over_jobs", "wall over jobs")]


if __name__ == "__main__":
    main()
