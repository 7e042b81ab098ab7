"""What a local sweep costs over its trials' scripts: the same N scripts run by ``xargs -P C`` against a sweep of
N trials at concurrency C.

    .venv/bin/python bench/trial_overhead.py [--sizes 8x2 8x8 200x2 200x8] [--repeats 5] [--resume]

The script is trivial and the same in both: it imports mlflow and logs 3 metrics to the run it is given
(``MLFLOW_RUN_ID``; the baseline's runs are created beforehand, outside its timing, as a sweep's trials' are by
the sweep). Both write to a fresh workspace whose SQLite tracking store has been created (as any workspace's is, by
its first job: MLflow's migrations take seconds, once), and neither's experiment exists yet. For each size, per
repeat (order rotated):

- ``xargs -P C``: wall time of the N scripts, C at a time, with the environment a trial gets;
- the sweep: from ``submit_sweep`` to the sweep read Completed, grid over N values, no policy;
- the **overhead per trial**: (sweep - xargs) / N * C, the time each of a slot's trials costs beyond its script;
  the target is at most 0.5 s (the sweep at most xargs + 0.5 s * N / C);
- a size of one wave (N <= C) takes ``WAVE_PAIRS`` pairs a repeat, each order in turn, and its repeat's figures
  are their means: one pair's difference varies by up to a second (0.8 s over a 10 s baseline at 8x8), as much
  as the target, where a size of several waves averages its trials' noise within one run;
- for the largest N: the controller's memory (RSS) when a tenth of the trials had started and at the end, and
  the report page's time for the sweep (the leaderboard and plot from ``mlrunway.report``; the second call).

Records bench/results/trial_overhead.json. A repeat of the four sizes takes about 25 minutes on 2 cores (the 200-trial
sizes are most of it), so the default 5 take about 2 h: each whole repeat is kept as it ends, and ``--resume``
goes on from the last one after a run is cut short (same commit and arguments).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from _common import Bench, Target, harness_args, table

WAVE_PAIRS = 5  # xargs/sweep pairs a repeat, for a size whose trials are one wave (N <= C)
SCRIPT = """
import mlflow
for step in range(3):
    mlflow.log_metric("m", float(step), step=step)
"""
COLUMNS = [("repeat", "repeat"), ("size", "N x C"), ("pair", "pair"), ("runner", "runner"), ("wall_s", "wall s"),
           ("per_trial_s", "over script, per trial s"), ("rss_start_mb", "controller MB at 10%"),
           ("rss_end_mb", "at end"), ("report_s", "report s")]


def script_folder(tmp: Path) -> Path:
    """A code folder under ``tmp`` holding :data:`SCRIPT` as ``script.py``, the trials' and the baseline's."""
    code = tmp / "code"
    code.mkdir()
    (code / "script.py").write_text(SCRIPT)
    return code


def workspace_jobs(root: Path) -> Any:
    from mlrunway.local.jobs import LocalJobs
    from mlrunway.local.workspace import Workspace

    return LocalJobs(Workspace.at(root))


def run_xargs(root: Path, code: Path, n: int, c: int) -> float:
    """The N scripts, C at a time, each with its own run created beforehand, as a trial's is."""
    from mlrunway.local import tracking

    jobs = workspace_jobs(root)
    runs = [tracking.start_run(jobs.workspace, f"plain-{i}", "plain", None)[1] for i in range(n)]
    env = {**os.environ, "MLFLOW_TRACKING_URI": jobs.workspace.tracking_uri, "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // c))}
    started = time.perf_counter()
    subprocess.run(["xargs", "-P", str(c), "-I", "{}", "env", "MLFLOW_RUN_ID={}", sys.executable, "script.py"],
                   input="\n".join(runs) + "\n", text=True, cwd=code, env=env, check=True)
    return time.perf_counter() - started


def run_sweep(root: Path, code: Path, n: int, c: int, watch: bool) -> dict[str, float]:
    from mlrunway.backend.types import JobStatus
    from mlrunway.local import tracking
    from mlrunway.specs import Choice, CommandJobSpec, Objective, SweepLimits, SweepSpec

    jobs = workspace_jobs(root)
    trial = CommandJobSpec(code=str(code), command="python script.py --i ${{inputs.i}}", inputs={"i": 0},
                           experiment_name="overhead")
    spec = SweepSpec(trial=trial, search_space={"i": Choice(values=tuple(range(n)))}, sampling_algorithm="grid",
                     objective=Objective(primary_metric="m"), limits=SweepLimits(max_total_trials=n, max_concurrent_trials=c))
    rss: dict[str, float] = {}
    tracking.client(jobs.workspace)  # the store, as a workspace's first job leaves it
    started = time.perf_counter()
    jobs.submit_sweep("overhead", spec)
    sampler = threading.Thread(target=_sample_rss, args=(jobs, n, rss), daemon=True) if watch else None
    if sampler:
        sampler.start()
    info = jobs.wait("overhead")  # sees the end within 20 ms, at a stat's cost (its polls would cost the sweep CPU)
    wall = time.perf_counter() - started
    if info.status is not JobStatus.COMPLETED or len(jobs.sweep_result("overhead").trials) != n:
        raise SystemExit(f"the sweep ended {info.status.value} ({info.error}): no measurement")
    out = {"wall_s": wall}
    if sampler:
        sampler.join(timeout=30)  # it ends when the controller has exited
        if "end" not in rss:
            raise SystemExit("the controller's memory was not read: no measurement")
        out.update(rss_start_mb=rss["start"], rss_end_mb=rss["end"], report_s=_report_s(jobs))
    return out


def _sample_rss(jobs: Any, n: int, rss: dict[str, float]) -> None:
    """The controller's RSS once a tenth of the trials have started, and its last reading before it exits."""
    folder = str(jobs.workspace.job_dir("overhead"))
    controller = None
    while controller is None:
        controller = next((p for p in psutil.process_iter(["cmdline"])
                           if " ".join(p.info["cmdline"] or []).endswith(f"sweep_controller {folder}")), None)
        time.sleep(0.05)
    readings: list[tuple[int, float]] = []  # (trials started, MB)
    while True:
        try:
            if controller.status() == psutil.STATUS_ZOMBIE:  # exited, not yet reaped: it reads 0 MB
                break
            mb = controller.memory_info().rss / 2**20
        except psutil.Error:
            break
        if mb == 0:  # exiting: its memory is already released (a reading of 0 MB once made a growth of -24 MB)
            break
        readings.append((len([e for e in os.scandir(jobs.workspace.jobs) if e.name.startswith("overhead_trial_")]), mb))
        time.sleep(0.5)  # light: a stat of the controller and a listing of the jobs folder
    later = [mb for started, mb in readings if started >= max(1, n // 10)]
    if later:
        rss.update(start=round(later[0], 1), end=round(readings[-1][1], 1))


def _report_s(jobs: Any) -> float:
    from mlrunway.report import SweepReport, plot_curves, render_html

    def page() -> None:
        result = jobs.sweep_result("overhead")
        report = SweepReport(sweep="overhead", sweep_status=result.status.value, objective=result.objective,
                             trials=list(result.trials), best_trial=result.best_trial)
        render_html(report, plot_curves(report))

    page()  # warm: matplotlib's fonts, the imports
    started = time.perf_counter()
    page()
    return time.perf_counter() - started


def compile_package() -> None:
    """mlrunway's modules compiled to bytecode, as an installed wheel has them and as Python writes them on the first
    import, unless PYTHONDONTWRITEBYTECODE is set (a container may set it; the machine these figures come from does): else
    every trial's supervisor compiles its modules from source again, 15 to 50 ms of CPU a trial (on hosts of speed
    probe 0.09 and 0.2 s), which the baseline's script, importing MLflow from compiled site-packages, does not pay."""
    import compileall

    import mlrunway

    if not compileall.compile_dir(str(Path(mlrunway.__file__).parent), quiet=1):
        raise SystemExit("mlrunway's modules could not be compiled to bytecode: no measurement")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["8x2", "8x8", "200x2", "200x8"])
    harness_args(parser, repeats=5, resumable=True)
    args = parser.parse_args()
    bench = Bench("trial_overhead", args)
    sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes]
    largest = max(n for n, _ in sizes)
    compile_package()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        code = script_folder(tmp)
        for repeat, order in bench.repeats(["xargs", "sweep"], rows):
            for n, c in sizes:
                walls: dict[str, list[float]] = {"xargs": [], "sweep": []}
                pairs = WAVE_PAIRS if n <= c else 1
                for pair in range(pairs):
                    for runner in (order if pair % 2 == 0 else order[::-1]):
                        root = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{runner}-{n}x{c}-"))
                        if runner == "xargs":
                            walls["xargs"].append(run_xargs(root, code, n, c))
                            row = {"wall_s": round(walls["xargs"][-1], 2)}
                        else:
                            swept = run_sweep(root, code, n, c, watch=n == largest)
                            walls["sweep"].append(swept["wall_s"])
                            row = {k: round(v, 3) for k, v in swept.items()}
                        rows.append({"repeat": repeat, "size": f"{n}x{c}", "pair": pair, "runner": runner, **row})
                    rows[-1]["per_trial_s"] = round((walls["sweep"][-1] - walls["xargs"][-1]) / n * c, 3)
                xargs, sweep = statistics.fmean(walls["xargs"]), statistics.fmean(walls["sweep"])
                bench.add(f"{n}x{c}: xargs", xargs, "s")
                bench.add(f"{n}x{c}: sweep", sweep, "s")
                bench.add(f"{n}x{c}: over script, per trial", (sweep - xargs) / n * c, "s")
                if n == largest:
                    sweep_row = next(r for r in reversed(rows) if r["runner"] == "sweep")
                    bench.add(f"{n}x{c}: controller RSS growth", sweep_row["rss_end_mb"] - sweep_row["rss_start_mb"], "MB")
                    bench.add(f"{n}x{c}: report page", sweep_row["report_s"], "s")
                print(table(rows[-2 * pairs:], COLUMNS), flush=True)
    targets = [Target(f"{n}x{c}: over script, per trial", "<=", 0.5,
                      f"a sweep of {n} at {c} at once costs at most 0.5 s per trial over its script") for n, c in sizes]
    targets += [Target(f"{largest}x{c}: report page", "<=", 1.0, f"the report of {largest} trials ({c} at once) in under 1 s")
                for n, c in sizes if n == largest]
    bench.record(rows, ("mlflow", "psutil"), targets)


if __name__ == "__main__":
    main()
