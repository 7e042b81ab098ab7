"""An endpoint's server process (the uvicorn master and its workers): start it on its port, tell whether it
lives, stop it, and restart it after its master died, keeping the port, the keys, the deployments and traffic.

Every process of a server carries the endpoint's token in its environment, so a master's orphaned workers are
found (and only they are signalled) without trusting a stored PID. Each worker listens on a socket of its own,
all bound to the port with SO_REUSEPORT, so the kernel deals each new connection to a worker by a hash of its
addresses, a fair draw whichever worker is awake (one shared socket let the worker that woke first accept a whole
burst: 15 of 16 keep-alive connections on one of two workers, about half the throughput). A recovered master adopts the orphans' own listening sockets (``pidfd_getfd``,
Linux 5.6+), one for each new worker: the same sockets, so the same accept queues, and the orphans serve until
the new workers are up, then finish what they are serving and exit; no connection that reached the port is
dropped. Where adoption is refused (an older kernel, no ptrace permission) it binds new sockets beside them
instead; an orphan's socket then closes with whatever connections were still queued on it. A master kill thus
costs at most the requests in flight.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from mlrunway.errors import EndpointError
from mlrunway.local.files import tail
from mlrunway.local.processes import JOB_TOKEN_ENV, Identity, free_port, marked, reap, wait_gone
from mlrunway.local.serving.state import EndpointState
from mlrunway.serving import client

START_TIMEOUT_S = 60.0
READY_DIR = "ready"  # each worker writes its PID here once it serves
ADOPT_ENV = "MLRUNWAY_ADOPT_SOCKET"  # "pid:fd,pid:fd...": a dead master's orphans and their listening sockets
SYS_PIDFD_GETFD = 438  # the same number on every architecture Linux has (the unified syscall table)

__all__ = ["alive", "dead_reason", "listening_sockets", "start", "stop"]


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """The server's ``count`` sockets, one per worker: those a dead master's workers still listen on, where
    ``ADOPT_ENV`` names them and they can be taken (each once: an older release's workers shared one), then new
    ones, SO_REUSEPORT, bound beside them."""
    sockets: list[socket.socket] = []
    seen: set[int] = set()
    for named in filter(None, os.environ.get(ADOPT_ENV, "").split(",")):
        adopted = _adopt(named, port)
        if adopted is None:
            continue
        inode = os.fstat(adopted.fileno()).st_ino
        if inode in seen or len(sockets) == count:  # fewer workers now: the orphans' own copy closes when they exit
            adopted.close()
            continue
        seen.add(inode)
        sockets.append(adopted)
    return sockets + [bind_slot(host, port) for _ in range(count - len(sockets))]


def bind_slot(host: str, port: int) -> socket.socket:
    """A new socket in the port's SO_REUSEPORT group, for one worker."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _adopt(named: str, port: int) -> socket.socket | None:
    """A duplicate of the listening socket ``named`` ("pid:fd") holds, or None when there is none or it cannot be
    taken (the process is gone, the kernel is older than 5.6, no ptrace permission, another socket)."""
    if not named:
        return None
    pid, fd = (int(part) for part in named.split(":"))
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        dup = ctypes.CDLL(None, use_errno=True).syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
    finally:
        os.close(pidfd)
    if dup < 0:
        return None
    sock = socket.socket(fileno=dup)
    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    if sock.type != socket.SOCK_STREAM or not listening or sock.getsockname()[1] != port:
        sock.close()
        return None
    sock.set_inheritable(True)
    return sock


def _listeners(orphans: list[psutil.Process], port: int) -> str:
    """"pid:fd,..." of the orphans' sockets listening on ``port``; "" when none is found."""
    found = []
    for orphan in orphans:
        try:
            for conn in orphan.net_connections("tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.fd >= 0:
                    found.append(f"{orphan.pid}:{conn.fd}")
        except psutil.Error:
            continue
    return ",".join(found)


def alive(state: EndpointState) -> bool:
    master = Identity.recorded(state.pid, state.pid_started)
    return master is not None and master.alive()


def dead_reason(state: EndpointState) -> str | None:
    """None while the master runs; else what is known: it died, and whether its workers still serve."""
    if alive(state):
        return None
    orphans = len(marked(state.token)) if state.token else 0
    serving = f"; its {orphans} orphaned worker(s) still serve" if orphans else "; nothing serves"
    return (f"endpoint {state.name}: server (pid {state.pid}) is not running (killed, the OOM killer or a reboot)"
            f"{serving}; `create_or_update` or `python -m mlrunway.local recover` restarts it on port {state.port}")


def _foreign_holders(state: EndpointState) -> list[psutil.Process]:
    """Processes other than this endpoint's own that listen on its port."""
    ours = {p.pid for p in marked(state.token)} if state.token else set()
    holders = []
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == state.port and conn.pid:
            if conn.pid not in ours:
                try:
                    holders.append(psutil.Process(conn.pid))
                except psutil.Error:
                    continue
    return holders


def start(folder: Path, state: EndpointState) -> EndpointState:
    """Start the server on ``state.port`` (a free one when 0) and wait until its own workers serve; then let the
    workers a dead master left behind finish and exit. Another program on the port is an error naming it."""
    if state.port:
        holders = _foreign_holders(state)
        if holders:
            named = ", ".join(f"{p.name()} (pid {p.pid})" for p in holders)
            raise EndpointError(f"endpoint {state.name}: port {state.port} is held by {named}; stop it, or delete "
                                "the endpoint to create it anew on another port (its scoring URI would change)")
    else:
        state.port = free_port()
    orphans = marked(state.token)
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    ready = folder / READY_DIR
    ready.mkdir(exist_ok=True)
    for stale in ready.iterdir():
        stale.unlink()
    with open(folder / "logs" / "server.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mlrunway.local.serving.server", str(folder)],
                                env={**os.environ, JOB_TOKEN_ENV: state.token, ADOPT_ENV: _listeners(orphans, state.port)},
                                stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
    master = Identity.of(proc.pid)
    state.pid, state.pid_started = master.pid, master.started
    state.save(folder)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _serving(state, ready, master):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(state, grace_s=5)
            raise EndpointError(f"endpoint {state.name}: server did not start; log tail:\n"
                                f"{tail(folder / 'logs' / 'server.log')}")
        time.sleep(0.1)
    for orphan in orphans:  # SIGTERM: uvicorn stops accepting and finishes the requests it holds
        try:
            orphan.terminate()
        except psutil.Error:
            pass
    wait_gone(orphans, 15.0)
    return state


def _serving(state: EndpointState, ready: Path, master: Identity) -> bool:
    """The new master's own workers have started serving (each wrote its PID) and the port answers."""
    try:
        children = {c.pid for c in psutil.Process(master.pid).children()}
    except psutil.Error:
        return False
    up = {int(p.name) for p in ready.iterdir() if p.name.isdigit()} & children
    return len(up) >= state.workers and client.answers(f"http://{state.host}:{state.port}/healthz/live", 1.0)


def processes_of(folder: Path) -> list[psutil.Process]:
    """Every live process of the server of the endpoint in ``folder``, found without its record (a damaged
    ``endpoint.json`` holds the token): the master by its command line (``-m mlrunway.local.serving.server
    <folder>``), then everything marked with the token its environment carries (its workers, orphaned or not)."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if proc.info["status"] == psutil.STATUS_ZOMBIE or "mlrunway.local.serving.server" not in cmdline:
                continue
            if Path(cmdline[-1]).resolve() == folder.resolve():
                found[proc.pid] = proc
                if token := proc.environ().get(JOB_TOKEN_ENV):
                    found.update((p.pid, p) for p in marked(token))
        except (psutil.Error, OSError, IndexError):
            continue
    return list(found.values())


def listening_ports(procs: list[psutil.Process]) -> set[int]:
    """The TCP ports ``procs`` listen on (an endpoint's, when its record that names it cannot be read)."""
    ports = set()
    for proc in procs:
        try:
            connections = getattr(proc, "net_connections", None) or proc.connections  # psutil < 6 names it so
            ports |= {c.laddr.port for c in connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            continue
    return ports


def stop_processes(procs: list[psutil.Process], grace_s: float = 10.0) -> None:
    """SIGTERM ``procs``, SIGKILL what outlives ``grace_s``."""
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    for proc in wait_gone(procs, grace_s):
        try:
            proc.kill()
        except psutil.Error:
            pass


def stop(state: EndpointState, grace_s: float = 10.0) -> None:
    """SIGTERM every process of the server (master and workers, orphaned or not), SIGKILL what outlives
    ``grace_s``; reap the master when it is our child."""
    stop_processes(marked(state.token) if state.token else [], grace_s)
    if state.pid:
        reap(state.pid)
