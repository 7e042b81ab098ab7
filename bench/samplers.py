"""Bayesian against random sampling, both as local sweeps of real jobs, on the Hartmann-4 function.

    .venv/bin/python bench/samplers.py [--trials 30] [--concurrency 2] [--repeats 10]

The job script computes Hartmann's 4-dimensional function (the Hartmann-6 constants over the first four
coordinates; minimum about -3.73) at its hyperparameters and logs it: x1 and x2 ``uniform(0, 1)``, x3
``quniform(0, 1, 0.05)``, x4 a ``choice`` of 0, 0.1, ..., 1 (the expressions Azure allows with bayesian). Each
repeat is one seed: a random sweep and a bayesian sweep (Optuna TPE through ``mlrunway.sweep.bayesian``) of
``--trials`` trials each, run in turn (the order rotated), and the best value each found. The target: over the
seeds, bayesian's best beats random's (the median of random's best minus bayesian's is above 0). Recorded in
bench/results/samplers.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import Bench, Target, harness_args, interleaved, table

from mlrunway.backend.types import JobStatus
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.workspace import Workspace
from mlrunway.specs import (
    Choice,
    CommandJobSpec,
    Objective,
    QUniform,
    SamplingAlgorithm,
    SweepLimits,
    SweepSpec,
    Uniform,
)
from mlrunway.specs.search_space import SearchExpression

SCRIPT = """
import argparse, math, mlflow
A = [[10, 3, 17, 3.5], [0.05, 10, 17, 0.1], [3, 3.5, 1.7, 10], [17, 8, 0.05, 10]]
P = [[0.1312, 0.1696, 0.5569, 0.0124], [0.2329, 0.4135, 0.8307, 0.3736],
     [0.2348, 0.1451, 0.3522, 0.2883], [0.4047, 0.8828, 0.8732, 0.5743]]
ALPHA = [1.0, 1.2, 3.0, 3.2]
p = argparse.ArgumentParser()
for name in ("x1", "x2", "x3", "x4"):
    p.add_argument("--" + name, type=float)
x = [getattr(p.parse_args(), n) for n in ("x1", "x2", "x3", "x4")]
value = -sum(a * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(4))) for i, a in enumerate(ALPHA))
mlflow.log_metric("hartmann", value, step=1)
"""
SPACE: dict[str, SearchExpression] = {
    "x1": Uniform(min_value=0, max_value=1), "x2": Uniform(min_value=0, max_value=1),
    "x3": QUniform(min_value=0, max_value=1, q=0.05), "x4": Choice(values=tuple(round(i / 10, 1) for i in range(11)))}
COLUMNS = [("repeat", "seed"), ("sampling", "sampling"), ("trials", "trials"), ("best", "best hartmann"),
           ("best_trial", "found at trial"), ("wall_s", "wall s")]


def sweep(jobs: LocalJobs, code: Path, sampling: str, seed: int, args: argparse.Namespace) -> dict:
    trial = CommandJobSpec(code=str(code), experiment_name="hartmann", inputs={n: 0.5 for n in SPACE},
                           command="python hartmann.py " + " ".join(f"--{n} ${{{{inputs.{n}}}}}" for n in SPACE))
    spec = SweepSpec(trial=trial, search_space=SPACE, objective=Objective(primary_metric="hartmann", goal="minimize"),
                     sampling_algorithm=SamplingAlgorithm(type=sampling), seed=seed,  # type: ignore[arg-type]
                     limits=SweepLimits(max_total_trials=args.trials, max_concurrent_trials=args.concurrency))
    name = f"{sampling}-{seed}"
    started = time.perf_counter()
    jobs.submit_sweep(name, spec)
    info = jobs.wait(name, poll_s=0.5)
    wall = time.perf_counter() - started
    result = jobs.sweep_result(name)
    scored = [t for t in result.trials if t.history]
    if info.status is not JobStatus.COMPLETED or len(scored) != args.trials:
        raise SystemExit(f"sweep {name} ended {info.status.value} with {len(scored)} of {args.trials} trials scored "
                         f"({info.error}): no measurement; run again")
    best = min(scored, key=lambda t: t.history[-1])
    return {"sampling": sampling, "trials": len(scored), "best": round(best.history[-1], 4),
            "best_trial": int(best.name.rsplit("_", 1)[1]), "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=2)
    harness_args(parser, repeats=10)
    args = parser.parse_args()
    bench = Bench("samplers", args)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        code = tmp / "code"
        code.mkdir()
        (code / "hartmann.py").write_text(SCRIPT)
        jobs = LocalJobs(Workspace.at(tmp / "ws"))
        for seed, order in interleaved(["random", "bayesian"], args.repeats):
            found = {sampling: sweep(jobs, code, sampling, seed, args) for sampling in order}
            seed_rows = [{"repeat": seed, **found[s]} for s in ("random", "bayesian")]
            rows += seed_rows
            print(table(seed_rows, COLUMNS), flush=True)
            for sampling in ("random", "bayesian"):
                bench.add(f"{sampling}: best of {args.trials}", found[sampling]["best"])
                bench.add(f"{sampling}: sweep wall", found[sampling]["wall_s"], "s")
            bench.add("random's best minus bayesian's", found["random"]["best"] - found["bayesian"]["best"])
    bench.record(rows, ("mlflow", "optuna", "scipy"), [
        Target("random's best minus bayesian's", ">=", 1e-9,
               f"bayesian's best of {args.trials} beats random's (Hartmann-4, minimized)")])


if __name__ == "__main__":
    main()
