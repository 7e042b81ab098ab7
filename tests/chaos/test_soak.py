"""The soak's bounded profile (:mod:`tests.chaos.soak`): 20 faults drawn from a fixed seed against a running
workload of jobs, sweeps, endpoint traffic and rollouts, every invariant checked after each. The long profile
(1,000 faults) is ``make soak``, outside CI; its results are in tests/chaos/results/soak.json."""

from __future__ import annotations

import pytest

from tests.chaos.soak import FAULTS, draw, run

pytestmark = [pytest.mark.slow, pytest.mark.chaos]


def test_faults_are_drawn_from_the_seed_and_their_index_alone():
    assert [draw(27, i) for i in range(50)] == [draw(27, i) for i in range(50)]
    assert [draw(27, i).kind for i in range(50)] != [draw(28, i).kind for i in range(50)]
    assert {draw(27, i).kind for i in range(400)} == set(FAULTS)  # every class is drawn


def test_twenty_random_faults_break_no_invariant(tmp_path):
    record = run(tmp_path / "soak.json", faults=20, seed=27, chunk_s=150, log=lambda line: None)
    assert record["done"] == 20, record["chunks"]
    assert record["broken"] == []
    chunk = record["chunks"][0]
    assert chunk["answers"].get("200", 0) > 100, chunk  # the endpoint served all along
    assert chunk["rollouts"].get("created") == 1 and sum(chunk["rollouts"].values()) > 3, chunk
    injected = [r for r in record["records"] if r["skipped"] is None]
    assert len(injected) >= 15, [(r["kind"], r["skipped"]) for r in record["records"]]
