"""The demo DAG's train, sweep, pick_best and export_onnx on the Ray backend against the local backend, for the same
conf, side by side; and what the Ray cluster of the tests costs to start and to keep.

    .venv/bin/python bench/ray_vs_local.py [--repeats 3] [--epochs 12] [--trials 4]

About 3 minutes a repeat, after the cluster's start. The cluster is tests/ray_cluster.py's (two nodes on this
machine, token auth, an MLflow server), started once; each run is ``dag.test()`` in a fresh interpreter (as each
``airflow dags test`` is), on a connection of type ``mlrunway_local`` or ``mlrunway_ray``, the two alternating, the
first of them swapped each repeat. A task's time is its task instance's, start to end, from Airflow's metadata
database. On Ray the deploy task refuses at its start (no endpoints until the Ray backend's endpoints part) and is
not compared; a run whose four tasks did not all succeed records nothing. Prints a table and records
bench/results/ray_vs_local.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import REPO, Bench, harness_args, table

TASKS = ("train", "sweep", "pick_best", "export_onnx")


def one_run(conf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """In this (fresh) interpreter: the demo DAG once with ``conf``; each task's seconds and state, as JSON."""
    sys.path.insert(0, str(REPO / "dags"))
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from train_sweep_deploy import dag

    run = dag.test(run_conf=conf)
    with create_session() as session:
        rows = session.query(TaskInstance).filter(TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run.run_id)
        return {ti.task_id: {"s": (ti.end_date - ti.start_date).total_seconds() if ti.end_date and ti.start_date
                             else None, "state": str(ti.state)} for ti in rows}


def run_dag(kind: str, connection: dict[str, Any], conf: dict[str, Any], home: Path) -> dict[str, dict[str, Any]]:
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"), "MLRUNWAY_SCHEDULE": "none",
           "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True", "AIRFLOW_CONN_MLRUNWAY_DEFAULT": json.dumps(connection)}
    done = subprocess.run([sys.executable, __file__, "--one-run", json.dumps(conf)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("TASKS ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the {kind} run failed (exit {done.returncode}): {done.stderr[-2000:]}")
    tasks: dict[str, dict[str, Any]] = json.loads(lines[-1].removeprefix("TASKS "))
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--one-run", help=argparse.SUPPRESS)
    harness_args(parser, repeats=3)
    args = parser.parse_args()
    if args.one_run:
        print("TASKS " + json.dumps(one_run(json.loads(args.one_run))), flush=True)
        return
    sys.path.insert(0, str(REPO))
    from mlrunway.data import write_digits
    from tests.ray_cluster import ray_cluster

    bench = Bench("ray_vs_local", args)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp)
        home = root / "airflow"
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True,
                       env={**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags")})
        data = write_digits(root / "digits")
        conf = {"epochs": args.epochs, "max_trials": args.trials, "max_concurrent_trials": 2,
                "delay_evaluation": 3, "data_dir": str(data)}
        with ray_cluster(root / "cluster") as cluster:
            bench.add("cluster: start", cluster.started_s, "s")
            bench.add("cluster: resident memory", cluster.rss_mb, "MB")
            for repeat, order in bench.repeats(["local", "ray"], rows):
                for kind in order:
                    connection: dict[str, Any]
                    if kind == "local":
                        connection = {"conn_type": "mlrunway_local", "extra": {"workspace": str(root / f"ws{repeat}")}}
                    else:
                        connection = {"conn_type": "mlrunway_ray", "password": cluster.token, "extra": {
                            "address": cluster.address, "storage": str(cluster.storage),
                            "tracking_uri": cluster.tracking_uri, "namespace": f"bench{repeat}",
                            "profiles": {"cpu": {"num_cpus": 1}}}}
                    tasks = run_dag(kind, connection, conf, home)
                    states = {t: tasks[t]["state"] for t in TASKS}
                    if set(states.values()) != {"success"}:
                        raise SystemExit(f"the {kind} run's tasks did not all succeed: {states}: nothing recorded")
                    for task in TASKS:
                        bench.add(f"{task}: {kind}", tasks[task]["s"], "s")
                    total = sum(tasks[t]["s"] for t in TASKS)
                    bench.add(f"four tasks: {kind}", total, "s")
                    rows.append({"repeat": repeat, "backend": kind, **{t: tasks[t]["s"] for t in TASKS},
                                 "total": total})
    print(table(rows, [("repeat", "repeat"), ("backend", "backend"), *((t, t) for t in TASKS), ("total", "four")]))
    bench.record(rows, ("ray", "mlflow", "apache-airflow"))


if __name__ == "__main__":
    main()
