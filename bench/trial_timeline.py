"""Where a sweep's time goes beside its scripts': one N x C sweep of trial_overhead's trivial MLflow script against
the same scripts run by ``xargs -P C``, with each run's creation, first and last metric and end from the tracking
store, in seconds from the runner's start. Not a harness benchmark: it prints, to be kept as text.

    .venv/bin/python bench/trial_timeline.py <N> <C> [xargs] [sweep]

In the sweep, a trial's run is created just before its supervisor starts and ended by it once the script exited;
under xargs, runs are created beforehand and MLflow ends each at the script's exit, before the interpreter's own.
"""

import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from trial_overhead import run_sweep, run_xargs, script_folder


def timeline(store: Path, start: float) -> list[str]:
    """One line a run: its name, then when it was created, logged first and last, and ended."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT r.name, r.start_time, min(m.timestamp), max(m.timestamp), r.end_time FROM runs r "
                          "LEFT JOIN metrics m ON m.run_uuid = r.run_uuid GROUP BY r.run_uuid ORDER BY r.start_time")
        return [f"  {name:20s}" + "".join(f"{label} {v / 1000 - start:7.3f}  " if v else f"{label}       -  "
                                          for label, v in zip(("created", "first metric", "last", "ended"), times, strict=True))
                for name, *times in rows]


def main() -> None:
    n, c = int(sys.argv[1]), int(sys.argv[2])
    tmp = Path(tempfile.mkdtemp())
    code = script_folder(tmp)
    for runner in sys.argv[3:] or ["xargs", "sweep"]:
        root = Path(tempfile.mkdtemp(dir=tmp, prefix=runner))
        wall = run_xargs(root, code, n, c) if runner == "xargs" else run_sweep(root, code, n, c, watch=False)["wall_s"]
        print(f"{runner}: wall {wall:.2f} s")
        print("\n".join(timeline(root / "mlflow.db", time.time() - wall)))


if __name__ == "__main__":
    main()
