"""The Ray endpoint's rollout lease on the shared storage, without file locks (mlrunway.ray.lease)."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

from mlrunway.ray.lease import LEASE, release, take


def test_one_holder_at_a_time_renewed_by_its_holder_released_by_it_only(tmp_path: Path) -> None:
    assert take(tmp_path, "run-1", 60) is None
    assert (take(tmp_path, "run-2", 60) or "").startswith("run-1 (until ")
    first = json.loads((tmp_path / LEASE).read_text())["until"]
    time.sleep(0.01)
    assert take(tmp_path, "run-1", 60) is None and json.loads((tmp_path / LEASE).read_text())["until"] > first
    release(tmp_path, "run-2")  # not its lease: nothing changes
    assert json.loads((tmp_path / LEASE).read_text())["holder"] == "run-1"
    release(tmp_path, "run-1")
    assert not (tmp_path / LEASE).exists() and take(tmp_path, "run-2", 60) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEASE]  # nothing left aside


def test_an_expired_lease_is_taken_over_and_a_damaged_one_is_taken_by_nobody(tmp_path: Path) -> None:
    assert take(tmp_path, "run-1", 0.05) is None
    time.sleep(0.1)
    assert take(tmp_path, "run-2", 60) is None
    assert json.loads((tmp_path / LEASE).read_text())["holder"] == "run-2"
    (tmp_path / LEASE).write_text("{not json")
    held = take(tmp_path, "run-3", 60) or ""
    assert "cannot be read" in held and "for good" in held


def _contend(folder: str, holder: str, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    results.put((holder, take(Path(folder), holder, 60) is None))


def test_of_many_takers_of_an_expired_lease_exactly_one_holds_it(tmp_path: Path) -> None:
    """Eight processes race for a lease that expired: one holds it, the seven others are told who."""
    for _ in range(5):
        (tmp_path / LEASE).write_text(json.dumps({"holder": "old", "until": time.time() - 1}))
        results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
        takers = [multiprocessing.Process(target=_contend, args=(str(tmp_path), f"t{i}", results)) for i in range(8)]
        for process in takers:
            process.start()
        for process in takers:
            process.join(30)
        won = [holder for holder, got in (results.get(timeout=5) for _ in takers) if got]
        assert len(won) == 1 and json.loads((tmp_path / LEASE).read_text())["holder"] == won[0]
