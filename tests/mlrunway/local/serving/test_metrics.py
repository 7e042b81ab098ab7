"""The endpoint's per-second counts: a second still running is written in parts and read as their sum; the reader
reads each file once, incrementally, and reads again a file that shrank (a write cut short) or was replaced."""

from __future__ import annotations

import json
import time

import pytest

from mlrunway.serving import metrics
from mlrunway.serving.metrics import Reader, Recorder


def line(second: int, deployment: str, requests: int, errors: int = 0) -> str:
    return json.dumps({"t": second, "d": deployment, "n": requests, "e": errors, "h": {"10": requests}}) + "\n"


def test_a_running_second_is_written_in_parts_and_read_as_their_sum(tmp_path):
    recorder, reader = Recorder(tmp_path), Reader(tmp_path, horizon_s=3600)
    now = time.time()
    for status in (200, 500, 200):
        recorder.record("green", status, None, 0.01)
    recorder.flush()  # the second is still running: its part so far is written
    seen = reader.read("green", now - 5, now + 5)
    assert (seen.requests, seen.errors) == (3, 1)
    recorder.record("green", 503, None, 0.01)
    recorder.flush()
    assert not recorder.pending
    seen = reader.read("green", now - 5, now + 5)
    assert (seen.requests, seen.errors) == (4, 2)
    fresh = Reader(tmp_path).read("green", now - 5, now + 5)  # a fresh reader of the whole day agrees
    assert (fresh.requests, fresh.errors) == (4, 2) and fresh.p99_ms == seen.p99_ms


def test_the_reader_takes_only_new_whole_lines_and_rereads_a_file_that_shrank(tmp_path):
    folder = tmp_path / metrics.METRICS_DIR
    folder.mkdir()
    now = int(time.time())
    path = folder / f"123-{now // 3600}.jsonl"
    path.write_text(line(now, "blue", 5) + line(now, "blue", 2)[:-10])  # the second line is still being written
    reader = Reader(tmp_path, horizon_s=3600)
    assert reader.read("blue", now, now + 1).requests == 5
    path.write_text(line(now, "blue", 5) + line(now, "blue", 2))  # now whole
    assert reader.read("blue", now, now + 1).requests == 7
    path.write_text(line(now, "blue", 5))  # cut back: a write the disk refused
    assert reader.read("blue", now, now + 1).requests == 5
    path.unlink()
    assert reader.read("blue", now, now + 1).requests == 0
    old = now - 7200
    (folder / f"124-{old // 3600}.jsonl").write_text(line(old, "blue", 9))
    assert reader.read("blue", old, old + 1).requests == 9  # older than the horizon: read afresh


def test_mirrored_answers_are_kept_in_pairs_off_the_request_path_and_read_by_deployment_and_window(tmp_path,
                                                                                                monkeypatch):
    from types import SimpleNamespace

    recorder = Recorder(tmp_path)
    start = time.time()
    champion = SimpleNamespace(at_deployment=200, body=b'{"predictions": [{"label": "3"}]}', ms=4.0)
    recorder.mirrored("green", "blue", (champion, SimpleNamespace(at_deployment=200, body=b'{"predictions": []}', ms=9.5)))
    assert metrics.mirrored_answers(tmp_path, "green", start - 1, time.time() + 1) == []  # not written before a flush
    big = b"[" + b"0," * metrics.KEEP_ANSWER_BYTES + b"0]"
    recorder.mirrored("green", "blue", (champion, SimpleNamespace(at_deployment=500, body=big, ms=12.0)))
    recorder.mirrored("red", "blue", (champion, champion))

    def full(*args):  # the disk refuses once: the pairs wait for the next flush
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metrics, "_append", full)
    with pytest.raises(OSError):
        recorder.flush()
    monkeypatch.undo()
    assert len(recorder.pairs) == 3
    recorder.flush()
    with next((tmp_path / metrics.SHADOW_DIR).glob("*.jsonl")).open("a") as file:
        file.write('{"t": 1, "d": "green", "c"')  # a line a killed worker left half-written
    pairs = metrics.mirrored_answers(tmp_path, "green", start - 1, time.time() + 1)
    assert [(p.champion, p.champion_status, p.shadow_status, p.shadow_ms) for p in pairs] == [
        ("blue", 200, 200, 9.5), ("blue", 200, 500, 12.0)]
    assert pairs[0].champion_answer == champion.body.decode() and pairs[0].shadow_answer == '{"predictions": []}'
    assert pairs[1].shadow_answer is None and len(pairs[1].shadow_digest) == 64  # too large: its SHA-256
    assert metrics.mirrored_answers(tmp_path, "green", time.time() + 5, time.time() + 10) == []
