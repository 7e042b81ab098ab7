"""The recorded figures: every results file names a clean commit of this history with its repeats and spread, and
the docs' benchmark blocks say what the results files say (bench/readme.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import readme  # noqa: E402

BENCHMARKS = ["endpoint", "onnx_runtime", "early_termination", "orchestration", "rollout", "faults", "trial_overhead",
              "report_page", "samplers", "gate", "capture", "ray_vs_local",
              "ddp_ray_vs_local", "endpoint_ray", "rollout_ray", "ray_faults"]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_results_file_names_a_clean_commit_of_this_history_with_its_spread(name: str) -> None:
    doc = json.loads((REPO / "bench" / "results" / f"{name}.json").read_text())
    assert doc["clean"] and not doc["forced"], f"{name}.json was recorded from a tree that differed from its commit"
    if git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("a shallow clone does not hold the history to look the commit up in")
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", doc["commit"], "HEAD"], cwd=REPO)
    assert ancestor.returncode == 0, f"{name}.json names {doc['commit']}, which is not in HEAD's history"
    assert doc["repeats"] >= 1 and doc["figures"]
    for figure in doc["figures"].values():
        assert len(figure["runs"]) >= 1 and figure["min"] <= figure["median"] <= figure["max"]


def test_the_docs_say_what_the_results_files_say() -> None:
    texts = {page.relative_to(REPO).as_posix(): page.read_text() for page in readme.pages()}
    assert sorted(m["name"] for text in texts.values() for m in readme.BLOCK.finditer(text)) == sorted(BENCHMARKS)
    stale = [page for page, text in texts.items() if readme.render(text) != text]
    assert not stale, f"the benchmark figures of {stale} are stale: run make bench-readme"
