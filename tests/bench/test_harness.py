"""The benchmark harness (bench/_common.py): a figure names the clean commit it measured, keeps every run with its
spread, and judges targets only on enough repeats."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import _common  # noqa: E402


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "bench" / "results").mkdir(parents=True)
    (root / "code.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("/ignored/\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return root


def args(results: Path, force: bool = False, repeats: int = 5, resume: bool = False) -> argparse.Namespace:
    return argparse.Namespace(repeats=repeats, force=force, results=results, duration=1, resume=resume)


def test_tree_state_counts_all_but_results_and_ignored_files(repo: Path) -> None:
    assert _common.tree_state(repo) == {"commit": git(repo, "rev-parse", "HEAD"), "clean": True, "dirty": []}
    (repo / "bench" / "results" / "x.json").write_text("{}")
    (repo / "ignored").mkdir()
    (repo / "ignored" / "venv.txt").write_text("")
    assert _common.tree_state(repo)["clean"]
    (repo / "code.py").write_text("x = 2\n")
    (repo / "new.py").write_text("")
    state = _common.tree_state(repo)
    assert not state["clean"] and state["dirty"] == ["M code.py", "?? new.py"]


def test_a_dirty_tree_is_refused_before_anything_runs_unless_forced(repo: Path) -> None:
    (repo / "code.py").write_text("x = 2\n")
    with pytest.raises(SystemExit, match="differs from HEAD.*code.py.*--force"):
        _common.Bench("b", args(repo / "bench" / "results"), repo)
    bench = _common.Bench("b", args(repo / "bench" / "results", force=True, repeats=1), repo)
    bench.add("speed", 2.0, "x")
    doc = json.loads(bench.record([{"repeat": 0}], ()).read_text())
    assert (doc["clean"], doc["forced"], doc["dirty"]) == (False, True, ["M code.py"])


def test_a_record_names_the_commit_and_keeps_every_run_with_its_spread(repo: Path) -> None:
    results = repo / "bench" / "results"
    bench = _common.Bench("b", args(results), repo)
    for value in (3.0, 1.0, 2.0, 10.0, 4.0):
        bench.add("req/s", value, "req/s")
        bench.add("share", value / 10, "fraction")
    targets = [_common.Target("req/s", ">=", 3.5, "fast"), _common.Target("share", "<=", 0.2, "small")]
    doc = json.loads(bench.record([{"repeat": i} for i in range(5)], ("pytest",), targets).read_text())
    assert doc["commit"] == git(repo, "rev-parse", "HEAD") and doc["clean"] and not doc["forced"]
    assert doc["figures"]["req/s"] == {"median": 3.0, "min": 1.0, "max": 10.0, "runs": [3.0, 1.0, 2.0, 10.0, 4.0],
                                       "unit": "req/s"}
    assert [t["verdict"] for t in doc["targets"]] == ["missed", "missed"]
    assert doc["repeats"] == 5 and doc["machine"]["cores"] and doc["versions"]["pytest"]
    # A second run is appended to the log, not lost by the results file being overwritten.
    again = _common.Bench("b", args(results), repo)
    again.add("req/s", 5.0)
    again.record([], ())
    log = [json.loads(line) for line in (results / "log.jsonl").read_text().splitlines()]
    assert [entry["figures"]["req/s"]["median"] for entry in log] == [3.0, 5.0]


def test_targets_are_judged_only_on_enough_repeats() -> None:
    figures = {"f": _common.spread([1.0, 2.0])}
    assert _common.Target("f", ">=", 1.0, "w").judge(figures, 2)["verdict"].startswith("not judged")
    assert _common.Target("f", ">=", 1.0, "w").judge(figures, 5)["verdict"] == "met"
    assert _common.Target("f", "<=", 1.0, "w").judge(figures, 5)["verdict"] == "missed"


def test_a_tree_changed_during_the_run_is_not_recorded(repo: Path) -> None:
    bench = _common.Bench("b", args(repo / "bench" / "results"), repo)
    bench.add("f", 1.0)
    (repo / "code.py").write_text("x = 3\n")
    with pytest.raises(SystemExit, match="changed while the benchmark ran"):
        bench.record([], ())
    assert not (repo / "bench" / "results" / "b.json").exists()


def measure(repo: Path, repeats: int = 4, resume: bool = False, cut_at: int | None = None) -> tuple[dict, list[int]]:
    """A resumable benchmark of two variants; ``cut_at`` kills it as that repeat starts, as a reboot would."""
    bench = _common.Bench("b", args(repo / "bench" / "results", repeats=repeats, resume=resume), repo)
    rows: list[dict] = []
    measured = []
    for repeat, order in bench.repeats(["x", "y"], rows):
        if repeat == cut_at:
            raise KeyboardInterrupt
        measured.append(repeat)
        for item in order:
            bench.add(item, repeat * 10.0 + (item == "y"), "s")
            rows.append({"repeat": repeat, "item": item})
    return json.loads(bench.record(rows, ()).read_text()), measured


def test_a_run_cut_short_resumes_from_its_last_whole_repeat_on_the_same_commit_and_arguments(repo: Path) -> None:
    whole, measured = measure(repo)
    assert measured == [0, 1, 2, 3] and "chunks" not in whole
    with pytest.raises(KeyboardInterrupt):
        measure(repo, cut_at=2)
    partial = repo / "bench" / "results" / "b.partial.json"
    assert json.loads(partial.read_text())["done"] == 2
    with pytest.raises(SystemExit, match="cannot resume.*start over"):  # other arguments
        measure(repo, repeats=5, resume=True)
    (repo / "code.py").write_text("x = 2\n")
    git(repo, "commit", "-qam", "second")
    with pytest.raises(SystemExit, match="cannot resume"):  # another commit
        measure(repo, resume=True)
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    resumed, measured = measure(repo, resume=True)
    assert measured == [2, 3]  # the repeat cut short and the rest: the whole ones are not measured again
    assert resumed["figures"] == whole["figures"] and resumed["results"] == whole["results"]
    assert len(resumed["chunks"]) == 2 and resumed["duration_s"] == sum(c["seconds"] for c in resumed["chunks"])
    assert not partial.exists()
    fresh, measured = measure(repo, resume=True)  # nothing to resume: it starts from the first repeat
    assert measured == [0, 1, 2, 3] and fresh["figures"] == whole["figures"]


def test_interleaving_rotates_the_order_each_repeat() -> None:
    assert list(_common.interleaved(["a", "b", "c"], 4)) == [
        (0, ["a", "b", "c"]), (1, ["b", "c", "a"]), (2, ["c", "a", "b"]), (3, ["a", "b", "c"])]


def test_no_benchmark_switch_in_the_package() -> None:
    """The unguarded endpoint variant is built by bench/peers/unguarded.py: nothing in mlrunway/ reads a
    benchmark's environment variable that could turn the hostile-client guard off in production."""
    found = [str(path.relative_to(REPO)) for path in (REPO / "mlrunway").rglob("*.py")
             if "MLRUNWAY_BENCH" in path.read_text()]
    assert found == []


def test_resume_with_more_repeats_lengthens_a_finished_record_of_the_same_commit_and_arguments(repo: Path) -> None:
    whole, _ = measure(repo, repeats=4)
    short, measured = measure(repo, repeats=2)
    assert measured == [0, 1]
    longer, measured = measure(repo, repeats=4, resume=True)
    assert measured == [2, 3]  # the record's two repeats are not measured again
    assert longer["repeats"] == 4 and longer["figures"] == whole["figures"] and longer["results"] == whole["results"]
    assert longer["chunks"][0] == {"started": short["date"], "seconds": short["duration_s"]}
    assert longer["machine"]["host_speed_s"]["before"] == short["machine"]["host_speed_s"]["before"]
    _, measured = measure(repo, repeats=4, resume=True)  # as long already: nothing to lengthen, it starts over
    assert measured == [0, 1, 2, 3]
    (repo / "code.py").write_text("x = 2\n")
    git(repo, "commit", "-qam", "second")
    measure(repo, repeats=2)
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    _, measured = measure(repo, repeats=4, resume=True)  # the record is of another commit: it starts over
    assert measured == [0, 1, 2, 3]
