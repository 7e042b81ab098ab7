"""Early termination: the default sweep with BanditPolicy against no policy and against Optuna's pruners.

    .venv/bin/python bench/early_termination.py [--trials 8] [--epochs 20] [--concurrency 2] [--repeats 5]

About 7 minutes with the defaults (each repeat: both live sweeps, 1.5 minutes). For each live Bandit sweep it
records how late its stops came (the epochs each stopped trial logged past the interval it was stopped at) and
whether the report's replay (``mlrunway.report.advice_of``) reproduces its live decisions. Live: the tutorial's sweep (``BanditPolicy(0.15, 1, 10)``, seeded random sampling) and the same seed and trials
with no policy, as real local sweeps. Replayed: the no-policy run records every trial's full curve of
``best_val_acc``; Optuna's MedianPruner and HyperbandPruner, and Bandit itself, then decide over those same
trials and curves, one trial after another as an Optuna study runs them (each trial sees the earlier ones'
values). A replay is what a live run would do only if a trial's curve does not depend on the policy: the
script checks that each live Bandit trial's curve equals the no-policy curve of the same trial.

The two live sweeps alternate, the first of them swapped each repeat; the replays run over each repeat's
no-policy curves. A sweep with a failed trial is no measurement, and stops the run. Prints a table and records
bench/results/early_termination.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import REPO, Bench, Target, harness_args, interleaved, table

from mlrunway.backend.types import JobInfo
from mlrunway.data import write_digits
from mlrunway.early_termination import bandit, evaluation_points
from mlrunway.local import tracking
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.workspace import Workspace
from mlrunway.report import advice_of
from training.tutorial import TUTORIAL_BANDIT, train_job, tutorial_sweep


def run_sweep(jobs: LocalJobs, name: str, spec) -> dict:
    started = time.perf_counter()
    jobs.submit_sweep(name, spec, poll_s=0.5)
    info = jobs.wait(name, poll_s=1.0)
    wall = time.perf_counter() - started
    result = jobs.sweep_result(name)
    trials = result.trials
    failed = [t for t in trials if t.status.value == "Failed" or not t.history]
    if failed:  # a trial without a curve cannot be compared: this run measures nothing
        raise SystemExit(f"sweep {name}: trial {failed[0].name} ended {failed[0].status.value} with "
                         f"{len(failed[0].history)} epochs logged, so the run is no measurement; run again. "
                         f"Its error: {failed[0].error}")
    best = next((t for t in trials if t.name == result.best_trial), None) or max(trials, key=lambda t: max(t.history))
    # How late each stop came: the epochs a stopped trial logged past the interval it was stopped at (it runs on
    # while it waits for the earlier trials to reach that interval, then until the cancel lands).
    late = sorted(len(t.history) - len(t.judged) for t in trials if t.stopped_early)  # judged: up to its stop
    advice = advice_of(result)  # the report's replay of the policy it ran: its live decisions reproduced?
    trial_times = [_ran_s(jobs.get(t.name)) for t in trials]
    store = tracking.client(jobs.workspace)
    startups = []  # from the trial's processes starting to its first logged metric: imports, data, epoch 1
    for trial in trials:
        record = jobs.get(trial.name)
        logged = store.get_metric_history(record.mlflow_run_id, "best_val_acc") if record.mlflow_run_id else []
        if logged:  # a trial canceled before its first epoch logged nothing
            startups.append(min(m.timestamp for m in logged) / 1000 - (record.started or 0.0))
    return {
        "status": info.status.value, "error": info.error, "wall_s": round(wall, 1), "trials": len(trials),
        "stopped_early": sum(1 for t in trials if t.stopped_early),
        "epochs": sum(len(t.history) for t in trials), "best_trial_index": int(best.name.rsplit("_", 1)[1]),
        "best_metric": max(best.history), "mean_trial_s": round(sum(trial_times) / len(trial_times), 1),
        "mean_to_first_epoch_s": round(sum(startups) / len(startups), 1),
        "late_epochs": late, "late_median": statistics.median(late) if late else None,
        "late_max": max(late) if late else None,
        "replay_reproduced": None if advice is None or advice["reproduced"] is None else bool(advice["reproduced"]),
        "curves": [list(t.history) for t in sorted(trials, key=lambda t: int(t.name.rsplit("_", 1)[1]))],
    }


def _ran_s(info: JobInfo) -> float:
    """From a job's start to its end, as its record says (both are set once it has ended)."""
    assert info.started is not None and info.ended is not None, f"{info.name} has no start or end recorded"
    return info.ended - info.started


def replay_bandit(policy, curves: list[list[float]]) -> list[int]:
    """Epochs each trial runs under ``policy`` when trials run one after another (earlier ones as they ran)."""
    ran: list[int] = []
    for i, curve in enumerate(curves):
        stop = len(curve)
        for k in evaluation_points(policy, len(curve)):
            seen = {f"t{j}": curves[j][:k] for j in range(i) if ran[j] >= k}
            if f"t{i}" in bandit.decide_at(policy, {**seen, f"t{i}": curve[:k]}, "maximize", k):
                stop = k
                break
        ran.append(stop)
    return ran


def replay_optuna(pruner, curves: list[list[float]], study_name: str) -> list[int]:
    """Epochs each trial runs when an Optuna study with ``pruner`` is fed the same curves, one trial at a time.

    HyperbandPruner assigns trials to brackets by a hash of the study's name, so the name is a seed.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ran: list[int] = []

    def objective(trial) -> float:
        curve = curves[trial.number]
        for epoch, value in enumerate(curve, 1):
            trial.report(value, epoch)
            if trial.should_prune():
                ran.append(epoch)
                raise optuna.TrialPruned()
        ran.append(len(curve))
        return max(curve)

    study = optuna.create_study(direction="maximize", pruner=pruner, sampler=optuna.samplers.RandomSampler(seed=0),
                                study_name=study_name)
    study.optimize(objective, n_trials=len(curves))
    return ran


def replayed_studies(label: str, pruner: Callable[[], object], curves: list[list[float]], studies: int) -> dict:
    """The median of ``studies`` replays (by epochs), with the range of epochs and the worst best metric."""
    runs = sorted((replayed(label, replay_optuna(pruner(), curves, f"replay-{i}"), curves) for i in range(studies)),
                  key=lambda r: r["epochs"])
    median = runs[len(runs) // 2]
    return {**median, "mode": f"replay, median of {studies}", "best_metric": min(r["best_metric"] for r in runs),
            "epochs_range": f"{runs[0]['epochs']}-{runs[-1]['epochs']}"}


def replayed(label: str, ran: list[int], curves: list[list[float]]) -> dict:
    best = max(range(len(curves)), key=lambda i: max(curves[i][:ran[i]]))
    return {"policy": label, "mode": "replay", "trials": len(curves), "stopped_early": sum(r < len(c) for r, c in zip(ran, curves, strict=True)),
            "epochs": sum(ran), "best_metric": max(curves[best][:ran[best]]), "best_trial_index": best}


def run_live(jobs: LocalJobs, data: Path, args: argparse.Namespace, repeat: int, order: list[str]) -> dict[str, dict]:
    """The tutorial's sweep and the same seed with no policy, as real local sweeps, in ``order``."""
    trial = train_job(str(REPO / "training"), str(data), num_epochs=args.epochs)
    spec = tutorial_sweep(trial, max_total_trials=args.trials, max_concurrent_trials=args.concurrency, seed=args.seed)
    specs = {"Bandit(0.15, 1, 10)": spec, "none": dataclasses.replace(spec, early_termination=None)}
    return {policy: run_sweep(jobs, f"{'with-bandit' if policy != 'none' else 'no-policy'}-{repeat}", specs[policy])
            for policy in order}


def replays(curves: list[list[float]], args: argparse.Namespace) -> list[dict]:
    import optuna

    policy = TUTORIAL_BANDIT
    return [replayed("Bandit(0.15, 1, 10)", replay_bandit(policy, curves), curves),
            # The tutorial's delay_evaluation=10 makes every trial run 10 epochs; the same rule acting earlier:
            replayed("Bandit(0.15, 1, 3)", replay_bandit(dataclasses.replace(policy, delay_evaluation=3), curves), curves),
            replayed_studies(f"Optuna MedianPruner(warmup {policy.delay_evaluation})",
                             lambda: optuna.pruners.MedianPruner(n_warmup_steps=policy.delay_evaluation), curves, 1),
            replayed_studies("Optuna HyperbandPruner", lambda: optuna.pruners.HyperbandPruner(
                min_resource=1, max_resource=args.epochs), curves, args.studies)]


COLUMNS = [("repeat", "repeat"), ("policy", "policy"), ("mode", "mode"), ("trials", "trials"),
           ("stopped_early", "stopped"), ("late_epochs", "past stop"), ("replay_reproduced", "replayed"),
           ("epochs", "epochs"), ("epochs_range", "range"), ("wall_s", "wall s"),
           ("mean_trial_s", "trial s"), ("mean_to_first_epoch_s", "1st epoch s"), ("best_metric", "best"),
           ("best_trial_index", "best trial")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--studies", type=int, default=10, help="Hyperband replays, each under its own study name")
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    bench = Bench("early_termination", args)
    rows: list[dict] = []
    all_curves: list[list[list[float]]] = []
    curves_match = True
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        data = write_digits(tmp / "digits")
        jobs = LocalJobs(Workspace.at(tmp / "ws"))
        # Warm-up: create the tracking store and load torch and mlflow from disk once, outside the timings.
        trial = train_job(str(REPO / "training"), str(data), num_epochs=1)
        jobs.submit("warm-up", trial)
        jobs.wait("warm-up", poll_s=0.5)
        mode = f"live, {args.concurrency} at once"
        for repeat, order in interleaved(["Bandit(0.15, 1, 10)", "none"], args.repeats):
            live = run_live(jobs, data, args, repeat, order)
            curves = live["none"].pop("curves")
            bandit_curves = live["Bandit(0.15, 1, 10)"].pop("curves")
            curves_match &= all(c == curves[i][:len(c)] for i, c in enumerate(bandit_curves))
            all_curves.append(curves)
            repeat_rows = [{"repeat": repeat, "policy": policy, "mode": mode, **live[policy]} for policy in live]
            repeat_rows += [{"repeat": repeat, **row} for row in replays(curves, args)]
            rows += repeat_rows
            print(table(repeat_rows, COLUMNS), flush=True)
            bandit_live, none = live["Bandit(0.15, 1, 10)"], live["none"]
            bench.add("Bandit(0.15, 1, 10) live: epochs", bandit_live["epochs"], "epochs")
            bench.add("none live: epochs", none["epochs"], "epochs")
            bench.add("Bandit live: fewer epochs than none", 1 - bandit_live["epochs"] / none["epochs"], "fraction")
            bench.add("Bandit live: replay reproduces its decisions", float(bool(bandit_live["replay_reproduced"])),
                      "share")
            if bandit_live["late_median"] is not None:  # a repeat in which the policy stopped nothing has no lateness
                bench.add("Bandit live: epochs logged past a stop, median", bandit_live["late_median"], "epochs")
                bench.add("Bandit live: epochs logged past a stop, max", bandit_live["late_max"], "epochs")
            bench.add("Bandit live: best behind none's (points)",
                      (none["best_metric"] - bandit_live["best_metric"]) * 100, "points")
            for row in repeat_rows[2:]:
                bench.add(f"{row['policy']} replay: epochs", row["epochs"], "epochs")
                bench.add(f"{row['policy']} replay: best behind none's (points)",
                          (none["best_metric"] - row["best_metric"]) * 100, "points")
    same_everywhere = all(c == all_curves[0] for c in all_curves)
    print(f"curves of live Bandit trials equal the no-policy curves: {curves_match}; "
          f"the no-policy curves are the same in every repeat: {same_everywhere}")
    # The targets judge the product, not how the tutorial's settings fit this dataset (what a policy saves is the
    # report's advice): the replay that advice rests on reproduces the live decisions, a stop comes at most an
    # epoch after its interval (the evidence for it), and the policy keeps the best trial.
    bench.record(rows, ("torch", "mlflow", "optuna"), [
        Target("Bandit live: replay reproduces its decisions", ">=", 1.0,
               "the report's replay makes the live sweep's decisions exactly"),
        Target("Bandit live: epochs logged past a stop, median", "<=", 1.0,
               "a stopped trial logs at most one epoch past the interval it was stopped at (median)"),
        Target("Bandit live: best behind none's (points)", "<=", 0.5, "Bandit's best within 0.5 points of none's")],
        curves_match=curves_match, curves_same_every_repeat=same_everywhere, curves=all_curves[0])


if __name__ == "__main__":
    main()
