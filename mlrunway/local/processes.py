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
# A supervisor's look at its cancel request when nothing woke it: the canceller wakes it at once with NUDGE
# (SIGUSR1), so this only bounds the wait when that could not be sent (a request written before the supervisor
# recorded its PID). Each look costs CPU beside the job's: at 8 trials on 2 cores, every 5 ms of it a trial is 20 ms
# of the sweep's wall per trial.
CANCEL_LOOK_S = 1.0
NUDGE = signal.SIGUSR1
JOB_TOKEN_ENV = "MLRUNWAY_JOB_TOKEN"
_SETPRIV = shutil.which("setpriv")

__all__ = ["JOB_TOKEN_ENV", "Identity", "ProcessLaunch", "die_with_parent", "free_port", "group_alive", "kill_marked",
           "leftovers", "marked", "reap", "signal_name", "stat_fields", "terminate_group", "wait_port_free"]
# The backend's own processes, by their command lines (a job's script is found by its folder instead).
MARKERS = ("mlrunway.local.supervisor", "mlrunway.local.sweep_controller", "mlrunway.local.serving.server",
           "mlrunway.local.serving.provision")


class ProcessLaunch(NamedTuple):
    """One process of a job: its command line and environment (:func:`mlrunway.local.launch.plan`)."""

    argv: list[str]
    env: dict[str, str]


# How far a process's start time, read again, may be from the one recorded. Linux gives a process's start in clock
# ticks after boot, which never changes; the time of day adds the boot time, and /proc/stat's boot time is the
# clock now minus the time since boot: it moves with every clock correction (NTP, a resumed VM), in whole seconds.
# So every identity of one boot is computed with the boot time as first read in that boot (:func:`boot_time`): a
# clock step cannot make a running process read as another. The tolerance covers records written before that
# (0.2.0 read the boot time live; with one second, a healthy supervisor once read as dead) and the non-Linux path.
# A PID reused by another process that started within seconds of the first is not a real case.
SAME_START_S = 5.0
_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_BOOT_DIR = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None  # gone at reboot
_boot: float | None = None  # this process's boot time, once read (a process never outlives its boot)


class Identity(NamedTuple):
    """A process as it was recorded: its PID and start time (:func:`create_time`)."""

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
        try:
            started, zombie = _start_and_zombie(self.pid)
        except ProcessLookupError:
            return False
        except Exception as exc:
            import psutil  # only here: its import is 20 ms of a sweep controller's CPU, which reads /proc otherwise

            if isinstance(exc, psutil.Error):
                return False
            raise
        return abs(started - self.started) < SAME_START_S and not zombie

    def send(self, sig: int) -> bool:
        """Send ``sig`` to this very process, and say whether it was sent: through a pidfd opened before the
        identity is checked, so a PID that another process took meanwhile is never signalled (Linux 5.3+; elsewhere
        nothing is sent, and the caller relies on what it wrote)."""
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            return False
        try:
            if not self.alive():
                return False
            signal.pidfd_send_signal(fd, sig)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)


def create_time(pid: int) -> float:
    """When process ``pid`` started, in seconds since the epoch: its start in clock ticks after boot plus
    :func:`boot_time`. Read from /proc without importing psutil (a supervisor records its own before every trial's
    script starts, and psutil's import is a sixth of that start). Raises ``ProcessLookupError`` (Linux) or
    ``psutil.NoSuchProcess`` for no process."""
    return _start_and_zombie(pid)[0]


def stat_fields(pid: int | str) -> list[bytes]:
    """``/proc/<pid>/stat`` (``pid`` "self": this process's) from its field 3 on, so field n is at n - 3: the fields
    after the name's closing parenthesis (the name, field 2, may hold spaces and parentheses)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rpartition(b")")[2].split()


def _start_and_zombie(pid: int) -> tuple[float, bool]:
    """Process ``pid``'s start (:func:`create_time`) and whether it is a zombie, from one read of its stat."""
    try:
        fields = stat_fields(pid)
        return int(fields[22 - 3]) / os.sysconf("SC_CLK_TCK") + boot_time(), fields[3 - 3] == b"Z"  # starttime, state
    except (FileNotFoundError, ProcessLookupError):  # (the latter: it exited while its stat was read)
        if os.path.exists("/proc/self/stat"):  # Linux: no such process, said without importing psutil
            raise ProcessLookupError(f"no process {pid}") from None
        return _start_and_zombie_by_psutil(pid)
    except (OSError, StopIteration, IndexError, ValueError):  # not Linux, or unreadable: psutil says which
        return _start_and_zombie_by_psutil(pid)


def _start_and_zombie_by_psutil(pid: int) -> tuple[float, bool]:
    import psutil

    proc = psutil.Process(pid)
    return float(proc.create_time()), proc.status() == psutil.STATUS_ZOMBIE


def boot_time() -> float:
    """This boot's time as every process of it computes identities with: /proc/stat's ``btime`` as first read in
    this boot, kept in a file named by the boot's id in /dev/shm (which a reboot empties) and shared by every
    mlrunway process of this user. Without /dev/shm, or should that file be unusable, the live ``btime``."""
    global _boot
    if _boot is None:
        try:
            if _BOOT_DIR is None:
                raise OSError("no /dev/shm")
            with open(_BOOT_ID) as boot_id:
                _boot = _kept_btime(os.path.join(_BOOT_DIR, f"mlrunway-{os.getuid()}-boot-{boot_id.read().strip()}"))
        except (OSError, ValueError):
            _boot = _live_btime()
    return _boot


def _live_btime() -> float:
    with open("/proc/stat", "rb") as system:
        return next(float(line.split()[1]) for line in system if line.startswith(b"btime"))


def _kept_btime(path: str) -> float:
    """The boot time kept in ``path``; written now, as read now, when no process of this boot has yet. A file
    another user planted is refused (``OSError``)."""
    try:
        with open(path) as kept:
            if os.fstat(kept.fileno()).st_uid != os.getuid():
                raise PermissionError(f"{path} is not this user's")
            return float(kept.read())
    except FileNotFoundError:
        pass
    scratch = f"{path}.{os.getpid()}"
    with open(scratch, "w") as out:
        out.write(repr(_live_btime()))
    try:
        os.link(scratch, path)  # whole or absent: the first process of the boot sets it, the others read it
    except FileExistsError:
        pass
    finally:
        os.unlink(scratch)
    return _kept_btime(path)


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
    the machine's init leaves it unreaped (a container's init may never reap it). But not a zombie whose other
    threads still run: a killed process's main thread can be a zombie while its others finish dying, and they
    hold its files and sockets (its listening port reads as held by no process) until the last one has exited."""
    import psutil

    def running(proc: Any) -> bool:
        try:
            return bool(proc.status() != psutil.STATUS_ZOMBIE or proc.num_threads() > 1)
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
