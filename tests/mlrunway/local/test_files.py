"""Long-lived logs: rotated in place while their writers keep appending, and read from their end."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mlrunway.local.files import LOG_MAX_BYTES, log_max_bytes, rotate_log, tail

WRITER = """
import sys, time
with open(sys.argv[1], "ab", buffering=0) as log:  # O_APPEND, held open for good: as an endpoint's workers hold theirs
    for i in range(int(sys.argv[2])):
        log.write(b"line %06d " % i + b"x" * 90 + b"\\n")
        if i % 50 == 0:
            time.sleep(0.001)
"""


def test_a_log_its_writers_keep_open_is_rotated_in_place_and_they_go_on_at_its_start(tmp_path):
    log = tmp_path / "score.log"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(log), "4000"]) for _ in range(2)]
    rotations = 0
    while any(w.poll() is None for w in writers):
        rotations += rotate_log(log, max_bytes=20_000, keep=3)
        time.sleep(0.005)
    assert all(w.wait() == 0 for w in writers)
    assert rotations >= 4  # 800 KB written against 20 KB: rotated many times
    kept = [log, *(tmp_path / f"score.log.{i}" for i in (1, 2, 3))]
    assert all(path.exists() for path in kept) and not (tmp_path / "score.log.4").exists()
    for path in kept:  # whole lines only: no hole of zeros where a writer went on past a truncation
        text = path.read_bytes()
        lines = text.splitlines()
        if path != log and not text.endswith(b"\n"):
            # The copy read a line a writer was still appending (a read takes no lock; the truncation waits for the
            # write, and the line goes with it): the rotated file ends with its first part. Rare.
            assert lines[-1].startswith(b"line ") and len(lines[-1]) < 102, path
            lines.pop()
        assert b"\0" not in text and all(len(line) == 102 for line in lines), path
    assert rotate_log(log, max_bytes=os.path.getsize(log)) is False  # under the limit: untouched
    assert rotate_log(tmp_path / "absent.log", max_bytes=1) is False


def test_a_tail_reads_from_the_end_and_goes_on_into_the_last_rotation(tmp_path):
    log = tmp_path / "server.log"
    assert tail(log) == ""
    (tmp_path / "server.log.1").write_text("".join(f"old {i}\n" for i in range(5)))
    log.write_text("".join(f"new {i}\n" for i in range(200_000)))  # 2 MB: read from its end, in blocks
    assert tail(log, 3) == "new 199997\nnew 199998\nnew 199999"
    log.write_text("new 0\nnew 1\n")
    assert tail(log, 4) == "old 3\nold 4\nnew 0\nnew 1"
    assert tail(log, 100).splitlines()[0] == "old 0"


def test_a_rotation_that_cannot_copy_leaves_the_log_whole_and_no_half_copy(tmp_path, monkeypatch):
    """A full disk: the copy fails, so the log is not truncated (nothing lost) and the half copy is removed."""
    log = tmp_path / "server.log"
    log.write_bytes(b"line\n" * 1000)
    real_open = open

    class FullDisk:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            self.handle.write(data[:100])
            raise OSError(28, "No space left on device")

    def opening(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return FullDisk(handle) if str(path).endswith(".rotating") else handle

    monkeypatch.setattr("builtins.open", opening)
    with pytest.raises(OSError, match="No space left"):
        rotate_log(log, max_bytes=100)
    monkeypatch.undo()
    assert log.read_bytes() == b"line\n" * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == [".server.log.rotate.lock", "server.log"]


@pytest.mark.parametrize("value", ["16MB", "0", "-5", ""])
def test_a_log_size_that_is_not_a_positive_number_of_bytes_is_warned_about_and_the_default_used(value, monkeypatch,
                                                                                                caplog):
    monkeypatch.setenv("MLRUNWAY_LOG_MAX_BYTES", value)
    assert log_max_bytes() == LOG_MAX_BYTES
    assert "MLRUNWAY_LOG_MAX_BYTES" in caplog.text and "not a positive number of bytes" in caplog.text
    monkeypatch.setenv("MLRUNWAY_LOG_MAX_BYTES", "4096")
    caplog.clear()
    assert log_max_bytes() == 4096 and not caplog.text
