"""Process helpers shared by local jobs and endpoints: a group's liveness, stopping a group, reaping, ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import psutil

POLL_S = 0.2

__all__ = ["free_port", "group_alive", "reap", "terminate_group", "wait_port_free"]


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
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def reap(pid: int, timeout_s: float = 5.0) -> None:
    """Wait for ``pid`` to exit (and collect it when it is our child); gone already is fine."""
    try:
        psutil.Process(pid).wait(timeout=timeout_s)
    except (psutil.NoSuchProcess, psutil.TimeoutExpired, ChildProcessError):
        pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_port_free(port: int, timeout_s: float = 10.0) -> bool:
    """Wait until nothing listens on ``port``; False when something still does after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
              for c in psutil.net_connections("tcp")):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
