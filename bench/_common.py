"""What the benchmarks share: the model they measure, and the harness that records a figure so anyone can trace it.

Every script records ``bench/results/<name>.json`` through :func:`record`, with:

- **provenance**: the commit measured and whether the tree was clean (nothing outside ``bench/results/`` differs
  from HEAD, untracked files included). A dirty tree is refused before anything runs unless ``--force`` is given,
  and then the file says so and lists what differed;
- **the machine**: CPU model, cores, memory, kernel, Python, and a host-speed probe (a fixed Python loop) taken
  before and after the run, since a shared host's speed drifts between days and within a run;
- versions, arguments, the number of **repeats**, and for each figure its **median, min and max** with every run
  (all of them, not the best);
- **targets**, judged on the median of at least :data:`MIN_REPEATS` interleaved repeats; a miss is recorded and
  printed, never hidden. A run that contradicts what it claims to measure (a rollout that did not end as its
  label says, a failed request under load) is refused by the script before it gets here.

Each recorded run also appends one line to ``bench/results/log.jsonl``: a run is never lost by being overwritten.

A long benchmark loops over :meth:`Bench.repeats` and takes ``--resume`` (:func:`harness_args` with
``resumable=True``): each whole repeat is kept in ``<results>/<name>.partial.json`` as it ends, and a run cut short
(a reboot, a session's end) goes on from its last whole repeat, on the same commit with the same arguments only;
the partial repeat is measured again. The recorded file says in how many chunks it ran. With no run cut short,
``--resume`` with more ``--repeats`` lengthens the finished record of the same commit and arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
RESULTS_PREFIX = "bench/results/"
LOG = "log.jsonl"
MIN_REPEATS = 5  # a ratio target is judged on the median of at least this many interleaved repeats
if str(REPO) not in sys.path:  # the example's specs (training/tutorial.py) for the scripts run as bench/<name>.py
    sys.path.insert(0, str(REPO))


# ---- the harness ----------------------------------------------------------------------------------------------

def harness_args(parser: argparse.ArgumentParser, repeats: int, resumable: bool = False) -> None:
    """The options every benchmark takes: ``--repeats``, ``--force`` and ``--results``; and ``--resume`` for a
    benchmark that loops over :meth:`Bench.repeats`."""
    parser.add_argument("--repeats", type=int, default=repeats,
                        help=f"interleaved repeats of every figure (default {repeats}; targets need {MIN_REPEATS})")
    parser.add_argument("--force", action="store_true",
                        help="run and record although the tree differs from HEAD (the results file says so)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the folder the results file goes to")
    if resumable:
        parser.add_argument("--resume", action="store_true",
                            help="go on from the last whole repeat of a run cut short (same commit and arguments), or "
                                 "lengthen the finished record of that commit to more --repeats")


def tree_state(repo: Path = REPO) -> dict[str, Any]:
    """HEAD's commit and what differs from it outside ``bench/results/`` (untracked files included)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                              check=True).stdout.strip()
        porcelain = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                                   capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        return {"commit": None, "clean": False, "dirty": [f"not a git checkout: {error}"]}
    dirty = []
    for line in porcelain.splitlines():
        for path in line[3:].split(" -> "):  # a rename names both paths
            path = path.strip('"')
            if not path.startswith(RESULTS_PREFIX):
                dirty.append(f"{line[:2].strip()} {path}")
    return {"commit": head, "clean": not dirty, "dirty": dirty}


def host_speed_s() -> float:
    """Seconds a fixed pure-Python loop takes (the best of 3): how fast this host is right now."""
    def loop() -> float:
        start = time.perf_counter()
        total = 0
        for i in range(3_000_000):
            total += i & 7
        return time.perf_counter() - start

    return round(min(loop() for _ in range(3)), 3)


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        memory_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemTotal:"))
        memory_gib: float | None = round(memory_kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        memory_gib = None
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": memory_gib, "arch": platform.machine(),
            "kernel": platform.release(), "python": platform.python_version()}


@dataclass
class Target:
    """A figure's target: its median over the repeats ``op`` ``threshold`` (``op`` is ``>=`` or ``<=``)."""

    figure: str
    op: str
    threshold: float
    what: str  # in words, for the table and the README

    def judge(self, figures: dict[str, dict[str, Any]], repeats: int) -> dict[str, Any]:
        spread = figures[self.figure]
        if repeats < MIN_REPEATS:
            verdict = f"not judged: {repeats} repeats, {MIN_REPEATS} needed"
        else:
            met = spread["median"] >= self.threshold if self.op == ">=" else spread["median"] <= self.threshold
            verdict = "met" if met else "missed"
        return {"figure": self.figure, "target": f"{self.op} {self.threshold:g}", "what": self.what,
                "median": spread["median"], "min": spread["min"], "max": spread["max"], "verdict": verdict}


class Bench:
    """One benchmark's run: checks the tree before anything is measured, collects every run of every figure, and
    records them with their provenance. ``name`` is the results file's name."""

    def __init__(self, name: str, args: argparse.Namespace, repo: Path = REPO) -> None:
        self.name, self.args, self.repo = name, args, repo
        self.tree = tree_state(repo)
        if not self.tree["clean"] and not args.force:
            shown = "; ".join(self.tree["dirty"][:5]) + (" ..." if len(self.tree["dirty"]) > 5 else "")
            raise SystemExit(f"the tree differs from HEAD outside {RESULTS_PREFIX} ({shown}): a figure must name the "
                             f"commit it measured. Commit or stash, or pass --force to record it as not clean.")
        self.started = datetime.now(UTC)
        self.speed_before = host_speed_s()
        self.runs: dict[str, list[float]] = {}
        self.units: dict[str, str] = {}
        self.done = 0  # whole repeats measured, by this process or the chunks before it
        self.chunks: list[dict[str, Any]] = []  # earlier chunks of a resumed run: each one's start and seconds
        self._rows: list[dict[str, Any]] = []
        if getattr(args, "resume", False):
            self._restore()
        elif self.partial.exists():
            print(f"a run cut short is kept in {_shown(self.partial)} (--resume goes on from it): this run starts "
                  f"over and replaces it", flush=True)

    @property
    def partial(self) -> Path:
        return Path(self.args.results) / f"{self.name}.partial.json"

    def _identity(self) -> dict[str, Any]:
        """What a resumed run must share with the run it goes on from."""
        kept = {k: v for k, v in vars(self.args).items() if k not in ("results", "resume")}
        return json.loads(json.dumps({"commit": self.tree["commit"], "dirty": self.tree["dirty"], "args": kept},
                                     default=str))

    def _restore(self) -> None:
        try:
            saved = json.loads(self.partial.read_text())
        except FileNotFoundError:
            if (lengthened := self._shorter_record()) is None:
                print(f"nothing to resume in {_shown(self.partial)}: starting from the first repeat", flush=True)
                return
            saved = lengthened
        except (OSError, ValueError) as error:
            raise SystemExit(f"cannot resume from {_shown(self.partial)} ({error}): delete it to start over") from None
        if saved["identity"] != self._identity():
            raise SystemExit(f"cannot resume from {_shown(self.partial)}: it was measured at {saved['identity']}, this "
                             f"run is {self._identity()}. Resume on that commit with those arguments, or run without "
                             f"--resume to start over.")
        self.done, self.runs, self.units = saved["done"], saved["runs"], saved["units"]
        self._rows, self.chunks = saved["rows"], saved["chunks"]
        self.speed_before = saved["speed_before"]
        print(f"resuming {self.name} after {self.done} whole repeat(s) of {self.args.repeats}", flush=True)

    def _shorter_record(self) -> dict[str, Any] | None:
        """This benchmark's finished record (``<results>/<name>.json``) in the partial file's shape, where it
        measured this commit with these arguments but fewer repeats: ``--resume --repeats 5`` after a 3-repeat
        record measures repeats 3 and 4 only, and records all five."""
        record = Path(self.args.results) / f"{self.name}.json"
        try:
            saved = json.loads(record.read_text())
        except (OSError, ValueError):
            return None
        ours = self._identity()
        args = {**{k: v for k, v in saved.get("args", {}).items() if k != "resume"}, "repeats": self.args.repeats}
        if (saved.get("commit"), saved.get("dirty"), args) != (ours["commit"], ours["dirty"], ours["args"]) \
                or not saved["repeats"] < self.args.repeats:
            return None
        print(f"lengthening the record of {saved['repeats']} repeat(s) in {_shown(record)}", flush=True)
        figures = saved["figures"]
        return {"identity": ours, "done": saved["repeats"], "runs": {n: f["runs"] for n, f in figures.items()},
                "units": {n: f["unit"] for n, f in figures.items() if "unit" in f}, "rows": saved["results"],
                "chunks": saved.get("chunks") or [{"started": saved["date"], "seconds": saved["duration_s"]}],
                "speed_before": saved["machine"]["host_speed_s"]["before"]}

    def repeats(self, items: Sequence[Any], rows: list[dict[str, Any]]) -> Iterator[tuple[int, list[Any]]]:
        """:func:`interleaved` for a resumable benchmark: the repeats not yet measured, each kept (its figures and
        ``rows``, the script's table) in :attr:`partial` as it ends. A resumed run's earlier rows are put back
        into ``rows`` first."""
        rows[:0] = self._rows
        for repeat, order in interleaved(items, self.args.repeats):
            if repeat < self.done:
                continue
            yield repeat, order
            self.done = repeat + 1
            self._save(rows)

    def _save(self, rows: list[dict[str, Any]]) -> None:
        chunk = {"started": self.started.isoformat(timespec="seconds"),
                 "seconds": round((datetime.now(UTC) - self.started).total_seconds())}
        saved = {"identity": self._identity(), "done": self.done, "runs": self.runs, "units": self.units,
                 "rows": rows, "chunks": [*self.chunks, chunk], "speed_before": self.speed_before}
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.partial.with_suffix(".tmp")
        scratch.write_text(json.dumps(saved, default=str))
        os.replace(scratch, self.partial)

    def add(self, figure: str, value: float, unit: str = "") -> None:
        """One run of ``figure``: every call is kept."""
        self.runs.setdefault(figure, []).append(value)
        if unit:
            self.units[figure] = unit

    def figures(self) -> dict[str, dict[str, Any]]:
        return {name: {**spread(values), **({"unit": self.units[name]} if name in self.units else {})}
                for name, values in self.runs.items()}

    def record(self, rows: list[dict[str, Any]], packages: Sequence[str], targets: Sequence[Target] = (),
               **extra: Any) -> Path:
        """Print the figures' spread and the targets, write ``<results>/<name>.json``, append to the log."""
        after = tree_state(self.repo)
        if after["commit"] != self.tree["commit"] or (after["dirty"] != self.tree["dirty"] and not self.args.force):
            raise SystemExit(f"the tree changed while the benchmark ran ({self.tree['commit']} -> {after['commit']}, "
                             f"differing now: {after['dirty'][:5]}): not recorded")
        figures = self.figures()
        repeats = self.args.repeats
        judged = [t.judge(figures, repeats) for t in targets]
        print(table([{"figure": n, "n": len(f["runs"]), **f} for n, f in figures.items()],
                    [("figure", "figure"), ("n", "runs"), ("median", "median"), ("min", "min"), ("max", "max")]))
        if judged:
            print(table(judged, [("what", "target"), ("target", "rule on the median"), ("median", "median"),
                                 ("min", "min"), ("max", "max"), ("verdict", "verdict")]))
        ended = datetime.now(UTC)
        chunks = [*self.chunks, {"started": self.started.isoformat(timespec="seconds"),
                                 "seconds": round((ended - self.started).total_seconds())}]
        document = {
            "benchmark": self.name, "commit": self.tree["commit"], "clean": self.tree["clean"],
            "forced": bool(self.args.force and not self.tree["clean"]), "dirty": self.tree["dirty"],
            "date": chunks[0]["started"], "duration_s": sum(c["seconds"] for c in chunks),
            **({"chunks": chunks} if len(chunks) > 1 else {}),
            "machine": {**machine(), "host_speed_s": {"before": self.speed_before, "after": host_speed_s(),
                                                      "probe": "a 3M-step Python loop, best of 3"}},
            "versions": versions(*packages), "args": {k: v for k, v in vars(self.args).items() if k != "results"},
            "repeats": repeats, "figures": figures, "targets": judged, **extra, "results": rows,
        }
        folder: Path = self.args.results
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / f"{self.name}.json"
        out.write_text(json.dumps(document, indent=1, default=str) + "\n")
        with (folder / LOG).open("a") as log:
            log.write(json.dumps({
                "benchmark": self.name, "commit": document["commit"], "clean": document["clean"],
                "forced": document["forced"], "date": document["date"], "repeats": repeats, "args": document["args"],
                "figures": {n: {k: f[k] for k in ("median", "min", "max")} for n, f in figures.items()},
                "targets": {t["what"]: t["verdict"] for t in judged}}, default=str) + "\n")
        self.partial.unlink(missing_ok=True)
        missed = [t["what"] for t in judged if t["verdict"] == "missed"]
        print(f"recorded in {_shown(out)} (commit {str(document['commit'])[:10]}, "
              f"{'clean' if document['clean'] else 'NOT CLEAN, forced'}); "
              f"{'targets missed: ' + '; '.join(missed) if missed else 'no target missed'}")
        return out


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min and max of ``values``, with every value."""
    if not values:
        raise ValueError("a figure with no run")
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": list(values)}


def interleaved(items: Sequence[Any], repeats: int) -> Iterator[tuple[int, list[Any]]]:
    """``(repeat, order)`` for each repeat: every item once per repeat, the order rotated each time, so no item
    always runs first (a warm cache) or last (a host that slows down)."""
    for repeat in range(repeats):
        shift = repeat % len(items) if items else 0
        yield repeat, [*items[shift:], *items[:shift]]


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


# ---- what the scripts share ---------------------------------------------------------------------------------

def build_model(tmp: Path, epochs: int = 3) -> tuple[Path, Path, Path]:
    """Train training/train.py in-process and export it; return (torch model, ONNX model, data) folders."""
    import importlib.util

    from mlrunway.data import write_digits
    from mlrunway.onnx_export import export_onnx

    data = write_digits(tmp / "digits")
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
    spec = importlib.util.spec_from_file_location("train", REPO / "training" / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    train.main(["--data-dir", str(data), "--num-epochs", str(epochs), "--output-dir", str(tmp / "trained")])
    import mlflow

    mlflow.end_run()  # close train.py's run now, not at exit when its store is gone
    export_onnx(tmp / "trained" / "model", tmp / "onnx", data_dir=data)
    return tmp / "trained" / "model", tmp / "onnx", data


def validation_images(model_dir: Path, data: Path, limit: int | None = None) -> Any:
    """The validation split, preprocessed as the model's signature says: (N, 1, 8, 8) float32."""
    from mlrunway.onnx_export.images import load_labeled

    signature = json.loads((model_dir / "signature.json").read_text())
    inputs, _ = load_labeled(data / "val", signature["classes"], signature["preprocessing"], limit=limit)
    return inputs


def versions(*packages: str) -> dict[str, str]:
    found = {}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """A plain aligned table: ``columns`` are (key, header) pairs."""
    cells = [[header for _, header in columns]] + [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
             for line in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)
