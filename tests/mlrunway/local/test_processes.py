from __future__ import annotations

import os
import shutil
import subprocess

import psutil
import pytest

from mlrunway.local.processes import Identity, create_time


def test_a_process_start_is_read_as_psutil_reads_it(tmp_path):
    """A supervisor records its start without importing psutil; readers compare it with psutil's."""
    odd = tmp_path / "a (b) c"  # the name in /proc/<pid>/stat is in parentheses and may hold both
    shutil.copy(shutil.which("sleep") or "/bin/sleep", odd)
    child = subprocess.Popen([str(odd), "30"])
    try:
        for pid in (os.getpid(), child.pid):
            assert create_time(pid) == pytest.approx(psutil.Process(pid).create_time(), abs=1e-6)
        assert Identity.of(child.pid).alive()
    finally:
        child.kill()
        child.wait()
    with pytest.raises(psutil.NoSuchProcess):
        create_time(child.pid)


def test_a_start_read_a_second_off_after_the_boot_time_moved_is_the_same_process_and_a_reused_pid_is_not():
    """/proc/stat's boot time is a whole second that moves with clock corrections: the same process read again
    can start a second earlier or later than recorded, and must still be alive (it was once read as dead)."""
    me = Identity.of(os.getpid())
    for shift in (-1.0, 1.0, -2.5):
        assert Identity(me.pid, me.started + shift).alive(), shift
    assert not Identity(me.pid, me.started - 60).alive()  # another process that got the PID later
