"""The sweep report page for a large sweep: how long the page takes to build (its plot and its HTML), warm.

    .venv/bin/python bench/report_page.py [--trials 200] [--epochs 3 20] [--repeats 5]

The sweep is a record, not a run: N Completed trials with curves of E epochs (seeded), as a sweep of N trials
leaves them; the page is what the Airflow UI's report tab and the cleanup task's saved report build
(``mlrunway.report``: ``plot_curves`` then ``render_html``). Each repeat builds it once per epoch count (order
rotated), after one warm-up build (matplotlib's imports and fonts). ``bench/trial_overhead.py`` times the same
page for the sweep it runs; this one takes a minute, so the page is measured after any change to it.

Records bench/results/report_page.json.
"""

from __future__ import annotations

import argparse
import random
import time

from _common import Bench, Target, harness_args, interleaved, table

COLUMNS = [("repeat", "repeat"), ("epochs", "epochs"), ("page_s", "page s"), ("png_kb", "plot KB")]


def sweep_record(trials: int, epochs: int) -> object:
    from mlrunway.backend.types import JobStatus, TrialInfo
    from mlrunway.report import SweepReport
    from mlrunway.specs.sweep import Objective

    rnd = random.Random(trials * 1000 + epochs)
    records = []
    for i in range(trials):
        rate, ceiling = rnd.uniform(0.1, 0.6), rnd.uniform(0.6, 0.99)
        curve = tuple(round(ceiling * (1 - (1 - rate) ** (e + 1)), 4) for e in range(epochs))
        records.append(TrialInfo(name=f"large_trial_{i}", params={"learning_rate": rnd.uniform(1e-3, 1e-1)},
                                 status=JobStatus.COMPLETED, history=curve))
    best = max(records, key=lambda t: max(t.history)).name
    return SweepReport(sweep="large", sweep_status="Completed", objective=Objective(primary_metric="best_val_acc"),
                       trials=records, best_trial=best)


def build(report: object) -> tuple[float, int]:
    from mlrunway.report import plot_curves, render_html

    started = time.perf_counter()
    png = plot_curves(report)  # type: ignore[arg-type]
    render_html(report, png)  # type: ignore[arg-type]
    return time.perf_counter() - started, len(png) // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--epochs", type=int, nargs="+", default=[3, 20])
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    bench = Bench("report_page", args)
    reports = {epochs: sweep_record(args.trials, epochs) for epochs in args.epochs}
    build(reports[args.epochs[0]])  # warm: matplotlib's imports, its font cache
    rows = []
    for repeat, order in interleaved(args.epochs, args.repeats):
        for epochs in order:
            seconds, kb = build(reports[epochs])
            rows.append({"repeat": repeat, "epochs": epochs, "page_s": round(seconds, 3), "png_kb": kb})
            bench.add(f"{args.trials} trials of {epochs} epochs: page s", seconds, "s")
    print(table(rows, COLUMNS))
    targets = [Target(f"{args.trials} trials of {epochs} epochs: page s", "<=", 1.0,
                      f"the report page of {args.trials} trials of {epochs} epochs in under 1 s") for epochs in args.epochs]
    bench.record(rows, ("matplotlib",), targets)


if __name__ == "__main__":
    main()
