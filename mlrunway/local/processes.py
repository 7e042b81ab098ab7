"""Process helpers shared by local jobs and endpoints: identities, a group's liveness, stopping a group,
reaping, ports.

A PID or a process group id read back from a file is never trusted alone: after a reboot, or once the process
is gone, the same number may belong to another program. ``Identity`` pairs a PID with its start time, and a
job's processes carry a token in their environment (``JOB_TOKEN_ENV``), so only verified processes are signalled.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import psutil

    from mlrunway.local.workspace import Workspace

POLL_S = 0.2
JOB_TOKEN_ENV = "MLRUNWAY_JOB_TOKEN"
_SETPRIV = shutil.which("setpriv")

__all__ = ["JOB_TOKEN_ENV", "Identity", "ProcessLaunch", "die_with_parent", "free_port", "group_alive", "kill_marked",
           "leftovers", "marked", "reap", "signal_name", "terminate_group", "wait_port_free"]
# The backend's own processes, by their command lines (a job's script is found by its folder instead).
MARKERS = ("mlrunway.local.supervisor", "mlrunway.local.sweep_controller", "mlrunway.local.serving.server",
           "mlrunway.local.serving.provision")


class ProcessLaunch(NamedTuple):
    """One process of a job: its command line and environment (:func:`mlrunway.local.launch.plan`)."""

    argv: list[str]
    env: dict[str, str]


# How far a process's start time, read again, may be from the one recorded. Linux gives the start in clock ticks
# after boot; the time of day adds the boot time, which /proc/stat holds in whole seconds and which moves when the
# clock is corrected (NTP, a resumed VM): the same process read a moment apart can start a whole second "earlier".
# With a tolerance of one second, a job whose supervisor was healthy read once as dead (Failed, and its processes
# signalled). A PID reused by another process that started within seconds of the first is not a real case.
SAME_START_S = 5.0


class Identity(NamedTuple):
    """A process as it was recorded: its PID and start time (``psutil``'s ``create_time``)."""

    pid: int
    started: float

    @classmethod
    def of(cls, pid: int) -> Identity:
        return cls(pid, create_time(pid))

    @classmethod
    def recorded(cls, pid: object, started: object) -> Identity | None:
        """The identity stored as ``pid`` and ``started``; None when either is missing."""
        if isinstance(pid, int) and isinstance(started, (int, float)):
            return cls(pid, float(started))
        return None

    def alive(self) -> bool:
        """True while this very process runs: same PID, same start time (within ``SAME_START_S``), not a zombie."""
        import psutil

        try:
            proc = psutil.Process(self.pid)
            return abs(proc.create_time() - self.started) < SAME_START_S and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


def create_time(pid: int) -> float:
    """``psutil.Process(pid).create_time()``, read on Linux as psutil reads it (the process's start in clock ticks
    after boot, plus the boot time) without importing psutil: a supervisor records its own before every trial's
    script starts, and psutil's import is a sixth of that start. Raises ``psutil.NoSuchProcess`` for no process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            after_name = stat.read().rpartition(b")")[2].split()  # the name, in parentheses, may hold spaces
        with open("/proc/stat", "rb") as system:
            boot = next(float(line.split()[1]) for line in system if line.startswith(b"btime"))
        return int(after_name[19]) / os.sysconf("SC_CLK_TCK") + boot  # field 22, starttime
    except (OSError, StopIteration, IndexError, ValueError):  # not Linux, or no such process: psutil says which
        import psutil

        return float(psutil.Process(pid).create_time())


def marked(token: str) -> list[psutil.Process]:
    """The live processes whose environment carries ``JOB_TOKEN_ENV=token``: a job's own, wherever they are."""
    import psutil

    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.environ().get(JOB_TOKEN_ENV) == token:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def kill_marked(token: str, sig: int = signal.SIGKILL, sparing: int | None = None) -> int:
    """Send ``sig`` to every process marked with ``token`` but ``sparing`` (a PID: the caller, marked too); return
    how many there were. Never blocks."""
    import psutil

    procs = [proc for proc in marked(token) if proc.pid != sparing]
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass
    return len(procs)


def die_with_parent(argv: list[str], sig: str = "KILL") -> list[str]:
    """``argv`` launched so that the kernel sends ``sig`` when its parent dies (Linux's PR_SET_PDEATHSIG), set by
    util-linux's ``setpriv`` just before it execs ``argv``. Nothing runs in Python between the fork and the exec:
    a ``preexec_fn`` would, in the child of a multithreaded parent, and its ``dlopen`` there could fail in
    ld.so at random. It does not reach the child's own children (torchrun's workers): a marked-process kill does."""
    if _SETPRIV is None:
        raise RuntimeError("setpriv (util-linux) is not on PATH: the local backend needs it to tie a job's processes "
                           "to their supervisor; install util-linux")
    return [_SETPRIV, "--pdeathsig", sig, "--", *argv]


def signal_name(returncode: int) -> str | None:
    """``SIGKILL`` for a return code of -9 (a process killed by a signal); None for an exit."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def terminate_group(pgid: int, procs: list[subprocess.Popen[bytes]] | None, grace_s: float) -> None:
    """SIGTERM the group, then SIGKILL whatever is left of it after ``grace_s``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        # poll() first: group_alive() reaps our children, and a Popen whose child it reaped reads exit code 0.
        if (procs is None or all(p.poll() is not None for p in procs)) and not group_alive(pgid):
            return
        time.sleep(POLL_S)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in the group; our own exited children are reaped on the way."""
    try:
        while os.waitpid(-pgid, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    import psutil

    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def wait_gone(procs: list[Any], timeout_s: float) -> list[Any]:
    """Wait up to ``timeout_s`` for ``procs`` (psutil Processes) to exit; those still running. A zombie counts as
    gone: ``psutil.wait_procs`` waits out its whole timeout on one, and an orphan stays a zombie for as long as
    the machine's init leaves it unreaped (a container's init may never reap it)."""
    import psutil

    def running(proc: Any) -> bool:
        try:
            return bool(proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if running(p)]
    return left


def reap(pid: int, timeout_s: float = 5.0) -> None:
    """Wait for ``pid`` to exit (and collect it when it is our child); gone already is fine."""
    import psutil

    try:
        psutil.Process(pid).wait(timeout=timeout_s)
    except (psutil.NoSuchProcess, psutil.TimeoutExpired, ChildProcessError):
        pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_port_free(port: int, timeout_s: float = 10.0) -> bool:
    """Wait until nothing listens on ``port``; False when something still does after ``timeout_s``."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
              for c in psutil.net_connections("tcp")):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def leftovers(workspace: Workspace) -> list[str]:
    """The workspace's job supervisors, sweep controllers, endpoint servers and job processes still running."""
    import psutil

    root = str(workspace.root)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd", "status"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        ours = root in cmd and any(marker in cmd for marker in MARKERS)
        in_job = (proc.info["cwd"] or "").startswith(f"{root}/jobs/")
        if (ours or in_job) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"pid {proc.info['pid']}: {cmd[:120]}")
    return found
