from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from mlrunway.local import processes
from mlrunway.local.processes import Identity, boot_time, create_time


def test_a_process_start_is_read_as_psutil_reads_it(tmp_path):
    """A supervisor records its start without importing psutil; readers compare it with psutil's."""
    odd = tmp_path / "a (b) c"  # the name in /proc/<pid>/stat is in parentheses and may hold both
    shutil.copy(shutil.which("sleep") or "/bin/sleep", odd)
    child = subprocess.Popen([str(odd), "30"])
    try:
        for pid in (os.getpid(), child.pid):  # the same ticks after boot (the boot time is this boot's first read)
            assert create_time(pid) - boot_time() == pytest.approx(
                psutil.Process(pid).create_time() - psutil.boot_time(), abs=1e-6)
        assert Identity.of(child.pid).alive()
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ProcessLookupError):  # said from /proc, without importing psutil (a controller's 20 ms)
        create_time(child.pid)
    assert not Identity.of(os.getpid())._replace(pid=child.pid).alive()


def test_a_start_read_a_second_off_after_the_boot_time_moved_is_the_same_process_and_a_reused_pid_is_not():
    """/proc/stat's boot time is a whole second that moves with clock corrections: the same process read again
    can start a second earlier or later than recorded, and must still be alive (it was once read as dead)."""
    me = Identity.of(os.getpid())
    for shift in (-1.0, 1.0, -2.5):
        assert Identity(me.pid, me.started + shift).alive(), shift
    assert not Identity(me.pid, me.started - 60).alive()  # another process that got the PID later


@pytest.fixture
def a_boot(tmp_path, monkeypatch):
    """A boot of our own: its id, where its boot time is kept, and a clock the test can step."""
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("b1\n")
    clock = {"btime": processes._live_btime()}
    monkeypatch.setattr(processes, "_BOOT_ID", str(boot_id))
    monkeypatch.setattr(processes, "_BOOT_DIR", str(tmp_path))
    monkeypatch.setattr(processes, "_live_btime", lambda: clock["btime"])
    monkeypatch.setattr(processes, "_boot", None)
    return boot_id, clock


def another_process(monkeypatch):
    """What a process started later reads: nothing of this one's memory."""
    monkeypatch.setattr(processes, "_boot", None)


def test_a_clock_step_does_not_make_a_running_process_read_as_another(a_boot, monkeypatch, tmp_path):
    """/proc/stat's boot time is the clock minus the time since boot: an NTP step or a resumed VM moves it by as
    much as the clock moved. Identities are computed with the boot's first reading, so a supervisor recorded before
    an hour's step is still itself to a reader started after it; after a reboot (a new boot id) it is not."""
    boot_id, clock = a_boot
    me = Identity.of(os.getpid())
    assert [p.name for p in tmp_path.glob("mlrunway-*")] == [f"mlrunway-{os.getuid()}-boot-b1"]
    for step in (3600.0, -86400.0):
        clock["btime"] += step
        another_process(monkeypatch)
        assert me.alive() and Identity.of(os.getpid()) == me, step
    boot_id.write_text("b2\n")  # rebooted: the boot time is read again, the old record is another process's
    another_process(monkeypatch)
    assert not me.alive()


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_boot_time_planted_by_another_user_is_not_trusted(a_boot, monkeypatch, tmp_path):
    _, clock = a_boot
    planted = tmp_path / f"mlrunway-{os.getuid()}-boot-b1"
    planted.write_text("12345.0")
    os.chown(planted, os.getuid() + 1, -1)
    assert boot_time() == clock["btime"]
    planted.unlink()
    another_process(monkeypatch)
    clock["btime"] += 7
    assert boot_time() == clock["btime"] and float(planted.read_text()) == clock["btime"]


def test_an_exited_process_not_yet_reaped_is_not_alive():
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # exited; its parent has not waited yet
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not Identity.of(child.pid).alive()
    child.wait()
    assert not Identity(child.pid, 0.0).alive()


HALF_DEAD = """
import ctypes, platform, socket, sys, threading
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
print(sock.getsockname()[1], flush=True)
threading.Thread(target=sys.stdin.read).start()  # holds the process's files until its stdin closes
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)  # SYS_exit: the main thread only
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="SYS_exit's number is per architecture")
def test_a_zombie_whose_threads_still_run_is_not_gone_until_they_are_and_its_port_is_free_then():
    """What a SIGKILL mid-way looks like: the main thread is a zombie while the others still die, and they keep
    its listening socket (read as held by no process). The chaos test that binds the port after killing a
    server failed in CI on that window."""
    child = subprocess.Popen([sys.executable, "-c", HALF_DEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    port = int(child.stdout.readline())
    proc = psutil.Process(child.pid)
    deadline = time.monotonic() + 5
    while proc.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert proc.num_threads() == 2 and [c.pid for c in psutil.net_connections("tcp")
                                        if c.laddr and c.laddr.port == port and c.status == "LISTEN"] == [None]
    assert processes.wait_gone([proc], 0.3) == [proc]  # not gone: its thread holds the port
    child.stdin.close()
    assert processes.wait_gone([proc], 10.0) == []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # nothing listens any more
    child.wait()


def test_a_signal_reaches_only_the_process_recorded():
    """``Identity.send`` opens a pidfd, then checks the identity: a recorded start time that is not the process's
    (its PID since taken by another) sends nothing."""
    proc = subprocess.Popen(["sleep", "30"])
    try:
        me = Identity.of(proc.pid)
        assert not Identity(proc.pid, me.started - 3600).send(signal.SIGTERM)
        time.sleep(0.1)
        assert proc.poll() is None
        assert me.send(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
