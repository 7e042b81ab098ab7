"""Early termination against none: the default sweep with BanditPolicy and the same seeds and trials without.

    .venv/bin/python bench/early_termination.py [--trials 8] [--epochs 20] [--concurrency 2]

Prints a table and records it in bench/results/early_termination.json (date, cores, versions).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from mlrunway.data import write_digits
from mlrunway.local import tracking
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.workspace import Workspace
from mlrunway.sweep.presets import train_job, tutorial_sweep

REPO = Path(__file__).resolve().parent.parent


def run_sweep(jobs: LocalJobs, name: str, spec) -> dict:
    started = time.perf_counter()
    jobs.submit_sweep(name, spec, poll_s=0.5)
    info = jobs.wait(name, poll_s=1.0)
    wall = time.perf_counter() - started
    result = jobs.sweep_result(name)
    trials = result["trials"]
    best = next(t for t in trials if t.name == result["best_trial"])
    trial_times = [jobs.get(t.name).ended - jobs.get(t.name).started for t in trials]
    store = tracking.client(jobs.workspace)
    startups = []  # from the trial's processes starting to its first logged metric: imports, data, epoch 1
    for trial in trials:
        record = jobs.get(trial.name)
        first = min(m.timestamp for m in store.get_metric_history(record.mlflow_run_id, "best_val_acc")) / 1000
        startups.append(first - record.started)
    return {
        "status": info.status.value, "error": info.error, "wall_s": round(wall, 1), "trials": len(trials),
        "stopped_early": sum(1 for t in trials if t.early_termination),
        "epochs": sum(len(t.history) for t in trials), "best_trial_index": int(best.name.rsplit("_", 1)[1]),
        "best_metric": max(best.history), "mean_trial_s": round(sum(trial_times) / len(trial_times), 1),
        "mean_to_first_epoch_s": round(sum(startups) / len(startups), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workspace", help="keep the jobs here (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.workspace or scratch
        data = write_digits(Path(tmp) / "digits")
        jobs = LocalJobs(Workspace.at(Path(tmp) / "ws"))
        trial = train_job(str(REPO / "training"), str(data), num_epochs=args.epochs)
        # Warm-up: create the tracking store and load torch and mlflow from disk once, outside the timings.
        jobs.submit("warm-up", dataclasses.replace(trial, inputs={**trial.inputs, "num_epochs": 1}))
        jobs.wait("warm-up", poll_s=0.5)
        bandit = tutorial_sweep(trial, max_total_trials=args.trials, max_concurrent_trials=args.concurrency, seed=args.seed)
        rows = {"bandit": run_sweep(jobs, "with-bandit", bandit),
                "none": run_sweep(jobs, "no-policy", dataclasses.replace(bandit, early_termination=None))}
    saved = 1 - rows["bandit"]["epochs"] / rows["none"]["epochs"]
    print(f"{'policy':<8} {'status':<10} {'trials':>6} {'stopped':>7} {'epochs':>6} {'wall s':>7} {'trial s':>7} "
          f"{'1st epoch s':>11} {'best':>6} {'best trial':>10}")
    for label, r in rows.items():
        print(f"{label:<8} {r['status']:<10} {r['trials']:>6} {r['stopped_early']:>7} {r['epochs']:>6} {r['wall_s']:>7} "
              f"{r['mean_trial_s']:>7} {r['mean_to_first_epoch_s']:>11} {r['best_metric']:>6.4f} {r['best_trial_index']:>10}")
    print(f"epochs saved by Bandit: {saved:.0%}; same best trial: {rows['bandit']['best_trial_index'] == rows['none']['best_trial_index']}")
    record = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "cores": os.cpu_count(), "machine": platform.machine(),
        "versions": {p: version(p) for p in ("torch", "mlflow")}, "python": platform.python_version(),
        "args": vars(args), "results": rows, "epochs_saved": round(saved, 3),
    }
    out = REPO / "bench" / "results" / "early_termination.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"recorded in {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
