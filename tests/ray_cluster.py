"""Start a real two-node Ray cluster and a real MLflow server on loopback for the tests.

Each node is Ray's own ``ray start --block`` from the test's venv and the server is
``mlflow server``, each leading its own process group, with Ray's token auth on and every port
Ray lets us choose pinned to a free one on 127.0.0.1. Teardown ends those groups, then hunts
down whatever escaped them (Ray's agents outlive the raylet that forked them) by a marker every
process we start inherits in its environment, and fails if anything survives.

What it takes, with Ray 2.60, to keep every listener on 127.0.0.1 (checked with ``ss``):

- ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` everywhere. Ray swaps a loopback address (a node's
  IP, the GCS address a node or a job's driver joins) for the machine's outward IP and binds
  that, unless it believes multi-node is off; with it off, nodes and drivers stay on 127.0.0.1
  and every agent binds loopback only.
- But `ray start` then refuses to add a worker node, so the worker's `ray start` runs Ray's own
  CLI entry point through ``_WORKER_SHIM``: multi-node on and the swap undone, for that one
  process; all it starts inherits "off". Ray's own test clusters put every node on 127.0.0.1 too.
- ``AUTOSCALER_METRIC_PORT`` and ``DASHBOARD_METRIC_PORT``: the head's two Prometheus servers
  take their ports only from these (default 44217 and 44227).

With both nodes on one IP, a job's driver that calls ``ray.init()`` attaches to the head's raylet
(Ray prefers the head among nodes sharing a host); its tasks still run where the CPUs are.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests

__all__ = ["RayCluster", "ray_cluster"]

VENV_BIN = Path(sys.prefix) / "bin"
READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 10.0
_PORT_RANGE = (20000, 32000)  # below the kernel's ephemeral ports (32768+), which Ray's own picks use
_WORKER_PORTS = 64  # per node: each worker, actor and driver holds one
_OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's minimum is 75 MiB
_MARKER = "MLRUNWAY_TEST_CLUSTER"  # "<cluster id>/<role>"; inherited by everything a role starts
_SCRUBBED = ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH", "MLFLOW_TRACKING_URI")
_WORKER_SHIM = (
    "import sys, ray._private.ray_constants as k, ray._private.services as s;"
    "k.ENABLE_RAY_CLUSTER = True; s.resolve_ip_for_localhost = lambda host: host;"
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; sys.exit(main())"
)


@dataclass(frozen=True)
class _Started:
    """Identify the processes one cluster started: group leaders, environment markers, temp dirs."""

    roots: tuple[int, ...]
    markers: frozenset[str]
    temp_dirs: tuple[str, ...] = ()

    def find(self, *, zombies: bool = False) -> list[psutil.Process]:
        """Return the live ones: the leaders' trees, and any process marked or naming a temp dir.

        :param zombies: also return the dead ones not yet reaped.
        """
        found: dict[int, psutil.Process] = {}
        for pid in self.roots:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(pid)
                found.update((p.pid, p) for p in (root, *root.children(recursive=True)))
        for p in psutil.process_iter():
            if p.pid in found or p.pid == os.getpid():
                continue
            with contextlib.suppress(psutil.Error):
                if p.environ().get(_MARKER) in self.markers or any(map(self._names_temp_dir, p.cmdline())):
                    found[p.pid] = p
        return [p for p in found.values() if zombies or _running(p)]

    def _names_temp_dir(self, arg: str) -> bool:
        """Return whether a command-line argument is, or points into, one of our temp dirs."""
        return any(arg.endswith(d) or f"{d}/" in arg for d in self.temp_dirs)


@dataclass(frozen=True)
class RayCluster:
    """A running two-node Ray cluster and MLflow server, as the tests see them."""

    address: str
    token: str = field(repr=False)
    storage: Path
    tracking_uri: str
    gcs_address: str
    started_s: float
    rss_mb: float
    _started: _Started = field(repr=False)
    add_node: Callable[[str, int, dict[str, float]], subprocess.Popen[bytes]] = field(repr=False, compare=False)
    restart_head: Callable[[], dict[str, Any]] = field(repr=False, compare=False)

    @property
    def headers(self) -> dict[str, str]:
        """Return the header that authenticates a request to the Jobs API."""
        return {"Authorization": f"Bearer {self.token}"}

    def processes(self) -> list[psutil.Process]:
        """Return every live process the cluster or its MLflow server started."""
        return self._started.find()

    def listeners(self) -> list[tuple[str, int, int]]:
        """Return ``(address, port, pid)`` for every TCP listener those processes own."""
        return _listeners({p.pid for p in self.processes()})


@contextlib.contextmanager
def ray_cluster(root: Path, *, head_cpus: int = 0, worker_cpus: int = 4) -> Iterator[RayCluster]:
    """Run a head and a worker node plus an MLflow server on 127.0.0.1 until the block exits.

    :param root: where the nodes' console output, the shared storage and MLflow's store go.
    :param head_cpus: CPUs the head offers; 0 keeps every job that asks for a CPU off it.
    :param worker_cpus: CPUs the worker node offers.
    """
    (root / "storage").mkdir(parents=True, exist_ok=True)
    ports, token, cluster_id = _Ports(), secrets.token_hex(16), secrets.token_hex(8)
    auth = {"Authorization": f"Bearer {token}"}
    env = _node_env(token, ports)
    # Ray's unix sockets live in its temp dir and their paths must stay under 108 bytes, so not
    # under pytest's tmp_path. The worker node shares the head's (and so its session dir), as in
    # Ray's own test clusters: 2.60 numbers the second node's sockets and logs, nothing collides.
    temp_dir = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    popens: dict[str, subprocess.Popen[bytes]] = {}
    commands: dict[str, list[str]] = {}  # each role's command line, to start it again
    gcs_port, dash_port, mlflow_port = ports.one(), ports.one(), ports.one()
    address, gcs_address = f"http://127.0.0.1:{dash_port}", f"127.0.0.1:{gcs_port}"
    tracking_uri = f"http://127.0.0.1:{mlflow_port}"

    def spawn(role: str, args: list[str]) -> None:
        commands[role] = args
        with open(root / f"{role}.out", "ab") as out:  # a role started again: its console output follows on
            out.write(f"--- started at {time.time():.3f}\n".encode())
        popens[role] = _spawn(root / role, args, {**env, _MARKER: f"{cluster_id}/{role}"})

    def wait(what: str, ready: Callable[[], bool]) -> None:
        _wait(what, ready, popens, root)

    try:
        t0 = time.monotonic()
        spawn("ray-head", _head_args(gcs_port, dash_port, temp_dir, head_cpus, ports))
        spawn("mlflow", _mlflow_args(root / "mlflow", mlflow_port))
        wait("the GCS", lambda: _accepts(gcs_port))
        spawn("ray-worker", _worker_args(gcs_address, temp_dir, worker_cpus, ports))
        jobs_api = f"{address}/api/version"
        wait("the Jobs API", lambda: _answers(jobs_api, auth) and _alive_nodes(address, auth) == 2)
        started_s = time.monotonic() - t0
        wait("the MLflow server", lambda: _answers(f"{tracking_uri}/health", {}))
        _check_token(jobs_api, auth)
        started = _started(popens, list(popens), cluster_id, temp_dir)
        rss_mb = sum(_rss(p) for p in started.find()) / 1e6

        def add_node(role: str, cpus: int, resources: dict[str, float]) -> subprocess.Popen[bytes]:
            """Start one more worker node offering ``resources`` (a test's own, to kill); wait until it is alive.
            The teardown stops it with the others (its command line names the shared temp dir)."""
            before = _alive_ids(address, auth)
            spawn(role, [*_worker_args(gcs_address, temp_dir, cpus, ports), f"--resources={json.dumps(resources)}"])
            # A new node id alive (not a count: a node a test killed may be marked dead meanwhile); only the new
            # node and the head are watched, as a node a test killed on purpose stays dead.
            watched = {name: popens[name] for name in (role, "ray-head")}
            _wait(f"node {role}", lambda: bool(_alive_ids(address, auth) - before), watched, root)
            return popens[role]

        def restart_head() -> dict[str, Any]:
            """Kill every process of the head (SIGKILL, as a machine's crash) and start it again on its GCS and
            Jobs API ports. A worker node whose ``ray start`` then ends (a head without GCS fault tolerance is a
            new cluster to its raylet) is started again, as Kubernetes restarts a pod or Compose a service; those
            still running are left. Returns once every node is alive: when the head was gone (``killed``), when its
            Jobs API answered again (``api``), when every node was alive (``alive``; ``time.monotonic()``'s) and the
            worker roles started again, once per start (``again``)."""
            _kill_role(popens, "ray-head", cluster_id)
            killed = time.monotonic()
            nodes = [role for role in popens if role not in ("ray-head", "mlflow") and popens[role].poll() is None]
            # The head's own machine would hold no worker's raylet: `ray start --head` takes those (their
            # --gcs-address) for a GCS still running at its address when the temp dir names it as the last.
            (temp_dir / "ray_current_cluster").unlink(missing_ok=True)
            spawn("ray-head", commands["ray-head"])
            head = {"ray-head": popens["ray-head"]}  # the nodes' own ends are expected meanwhile
            _wait("the GCS again", lambda: _accepts(gcs_port), head, root)
            _wait("the Jobs API again", lambda: _answers(jobs_api, auth), head, root)
            api = time.monotonic()
            # A node whose `ray start` ended (its raylet gave up on the lost head, or its new start failed on a
            # busy machine) is started again, as a restart policy does, until every node is alive.
            again: list[str] = []
            deadline = time.monotonic() + 2 * READY_TIMEOUT_S
            while _alive_nodes(address, auth) < len(nodes) + 1:
                if popens["ray-head"].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"test cluster: {_alive_nodes(address, auth)} of {len(nodes) + 1} nodes alive "
                                       f"after the head's restart (started again: {again})\n{_outputs(root)}")
                for role in nodes:
                    if popens[role].poll() is not None:
                        _kill_role(popens, role, cluster_id)  # its agents, which outlive the raylet
                        spawn(role, commands[role])
                        again.append(role)
                time.sleep(0.5)
            return {"killed": killed, "api": api, "alive": time.monotonic(), "again": again}

        yield RayCluster(address, token, root / "storage", tracking_uri, gcs_address, started_s, rss_mb, started,
                         add_node, restart_head)
    finally:
        with _adopting_orphans():
            _stop(popens, cluster_id, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _node_env(token: str, ports: _Ports) -> dict[str, str]:
    """Return the environment of the nodes and the server: venv first, token auth on, loopback."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",  # a job's `python` is the venv's
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token,
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # see the module's docstring
        AUTOSCALER_METRIC_PORT=str(ports.one()),
        DASHBOARD_METRIC_PORT=str(ports.one()),
        RAY_DEDUP_LOGS="0",
        RAY_USAGE_STATS_ENABLED="0",
        # Prestarting a Python worker per CPU costs seconds and ~100 MB each on a 2-core machine.
        RAY_enable_worker_prestart="0",
        RAY_prestart_worker_first_driver="0",
        # `ray start --block` drains its node for up to 30 s on SIGTERM (for Serve): nothing to drain.
        RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0",
        # MLflow 3's server forks a job runner and eight Huey consumers (~800 MB) the tests never use.
        MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
        PYTHONUNBUFFERED="1",
    )
    return env


def _node_args(temp_dir: Path, cpus: int, ports: _Ports) -> list[str]:
    """Return the ``ray start`` flags both nodes take: loopback, resources, a port per listener."""
    low, high = ports.block(_WORKER_PORTS)
    return [
        "start", "--block", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
        f"--num-cpus={cpus}", "--num-gpus=0", f"--object-store-memory={_OBJECT_STORE_BYTES}",
        "--disable-usage-stats",
        f"--node-manager-port={ports.one()}", f"--object-manager-port={ports.one()}",
        f"--dashboard-agent-listen-port={ports.one()}", f"--dashboard-agent-grpc-port={ports.one()}",
        f"--runtime-env-agent-port={ports.one()}", f"--metrics-export-port={ports.one()}",
        f"--min-worker-port={low}", f"--max-worker-port={high}",
    ]  # fmt: skip


def _head_args(gcs_port: int, dash_port: int, temp_dir: Path, cpus: int, ports: _Ports) -> list[str]:
    """Return the head's ``ray start`` command line."""
    return [
        str(VENV_BIN / "ray"), *_node_args(temp_dir, cpus, ports), "--head", f"--port={gcs_port}",
        "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}",
        f"--ray-client-server-port={ports.one()}",
    ]  # fmt: skip


def _worker_args(gcs_address: str, temp_dir: Path, cpus: int, ports: _Ports) -> list[str]:
    """Return the worker node's ``ray start`` command line, through ``_WORKER_SHIM``."""
    shim = [str(VENV_BIN / "python"), "-c", _WORKER_SHIM]
    return [*shim, *_node_args(temp_dir, cpus, ports), f"--address={gcs_address}"]


def _mlflow_args(store: Path, port: int) -> list[str]:
    """Return the MLflow server's command line: a SQLite store, served artifacts, one worker."""
    store.mkdir(exist_ok=True)
    return [
        str(VENV_BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
        "--serve-artifacts", "--artifacts-destination", str(store / "artifacts"),
        # MLflow 3 checks the Host header; name the two a test may use.
        "--allowed-hosts", f"127.0.0.1:{port},localhost:{port}",
    ]  # fmt: skip


def _spawn(log_stem: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``args`` leading a new process group, its output in ``log_stem``.out and .err."""
    with open(f"{log_stem}.out", "ab") as out, open(f"{log_stem}.err", "ab") as err:  # a restart follows on
        return subprocess.Popen(args, stdout=out, stderr=err, env=env, start_new_session=True)


class _Ports:
    """Hand out free TCP ports, never the same one twice."""

    def __init__(self) -> None:
        self._given: set[int] = set()

    def one(self) -> int:
        """Return a free port."""
        return self.block(1)[0]

    def block(self, n: int) -> tuple[int, int]:
        """Return the first and last of ``n`` consecutive free ports."""
        for _ in range(200):
            low = random.randrange(_PORT_RANGE[0], _PORT_RANGE[1] - n)
            span = range(low, low + n)
            if 6379 not in span and not self._given.intersection(span) and all(map(_is_free, span)):
                self._given.update(span)
                return low, low + n - 1
        raise RuntimeError(f"test cluster: no {n} consecutive free ports in {_PORT_RANGE}")


def _is_free(port: int) -> bool:
    """Return whether nothing listens on ``port``, on any interface."""
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _accepts(port: int) -> bool:
    """Return whether something accepts a TCP connection on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _answers(url: str, headers: dict[str, str]) -> bool:
    """Return whether GET ``url`` answers 200."""
    with contextlib.suppress(requests.RequestException):
        return requests.get(url, headers=headers, timeout=2).status_code == 200
    return False


def _alive_ids(address: str, headers: dict[str, str]) -> set[str]:
    """Return the ids of the nodes Ray's state API reports ALIVE (none while the dashboard is not up)."""
    try:
        reply = requests.get(f"{address}/api/v0/nodes", headers=headers, timeout=5)
        return {node["node_id"] for node in reply.json()["data"]["result"]["result"] if node["state"] == "ALIVE"}
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return set()


def _alive_nodes(address: str, headers: dict[str, str]) -> int:
    """Return how many nodes Ray's state API reports ALIVE (0 while the dashboard is not up)."""
    try:
        reply = requests.get(f"{address}/api/v0/nodes", headers=headers, timeout=5)
        return sum(node["state"] == "ALIVE" for node in reply.json()["data"]["result"]["result"])
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return 0


def _wait(what: str, ready: Callable[[], bool], popens: dict[str, subprocess.Popen[bytes]], root: Path) -> None:
    """Poll ``ready`` until true; on a process's exit or the timeout raise with every output."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if dead := [f"{role} exited {p.returncode}" for role, p in popens.items() if p.poll() is not None]:
            raise RuntimeError(f"test cluster: {', '.join(dead)} before {what} was up\n{_outputs(root)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"test cluster: {what} not up after {READY_TIMEOUT_S:.0f} s\n{_outputs(root)}")
        time.sleep(0.25)


def _outputs(root: Path) -> str:
    """Return the tail of each process's console output under ``root``."""
    files = sorted(root.glob("*.out")) + sorted(root.glob("*.err"))
    return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-4000:]}" for f in files)


def _check_token(url: str, headers: dict[str, str]) -> None:
    """Fail unless ``url`` refuses a request without the token and accepts one with it."""
    bare, authed = requests.get(url, timeout=5).status_code, requests.get(url, headers=headers, timeout=5).status_code
    if (bare, authed) != (401, 200):
        raise AssertionError(f"test cluster: {url} answered {bare} without the token, {authed} with it, not 401, 200")


def _running(p: psutil.Process) -> bool:
    """Return whether ``p`` still runs (a zombie does not)."""
    with contextlib.suppress(psutil.Error):
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    return False


def _rss(p: psutil.Process) -> int:
    """Return ``p``'s resident memory in bytes, 0 once it is gone."""
    with contextlib.suppress(psutil.Error):
        return int(p.memory_info().rss)
    return 0


def _listeners(pids: set[int]) -> list[tuple[str, int, int]]:
    """Return ``(address, port, pid)`` for each TCP listener ``ss -ltnp`` shows owned by ``pids``."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():  # LISTEN 0 4096 127.0.0.1:25735 0.0.0.0:* users:(("raylet",pid=7,fd=9))
        cols = line.split()
        if len(cols) < 6:
            continue
        host, _, port = cols[3].rpartition(":")
        for chunk in cols[5].split("pid=")[1:]:
            if (pid := int(chunk.split(",")[0])) in pids:
                found.add((_plain_host(host), int(port), pid))
    return sorted(found)


def _plain_host(host: str) -> str:
    """Return ``host`` as ``ss`` prints it less brackets, zone and the IPv4-mapped prefix.

    Ray's C++ servers bind IPv6 sockets to ``::ffff:127.0.0.1``: that is 127.0.0.1, over IPv4 only.
    """
    host = host.strip("[]").split("%")[0]
    return host.removeprefix("::ffff:") if "." in host else host


def _stop(popens: dict[str, subprocess.Popen[bytes]], cluster_id: str, temp_dir: Path) -> None:
    """End the groups we started, worker node first, then every straggler; fail if any survives."""
    everything = _started(popens, list(popens), cluster_id, temp_dir)
    # With their pids and sessions, _reap knows the zombies they will leave us.
    seen = {p.pid for p in everything.find(zombies=True)}
    # The worker node first, while the GCS can still hear it leave; then the head and MLflow.
    for roles in (["ray-worker"], ["ray-head", "mlflow"]):
        batch = [popens[r] for r in roles if r in popens]
        group = _started(popens, roles, cluster_id, None)
        _signal_groups(batch, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            found = group.find(zombies=True)
            seen.update(p.pid for p in found)
            if not any(map(_running, found)):
                break
            time.sleep(0.2)
    _signal_groups(list(popens.values()), signal.SIGKILL)
    for p in everything.find():
        seen.add(p.pid)
        with contextlib.suppress(psutil.Error):
            p.kill()
    for p in popens.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
    leftovers = dataclasses.replace(everything, roots=())  # the leaders are reaped: their pids may be reused
    psutil.wait_procs(leftovers.find(), timeout=5)
    _reap(seen, {p.pid for p in popens.values()})
    if left := leftovers.find():
        raise AssertionError(f"test cluster: processes outlived it: {[(p.pid, p.name()) for p in left]}")


def _kill_role(popens: dict[str, subprocess.Popen[bytes]], role: str, cluster_id: str) -> None:
    """SIGKILL every process of ``role`` (its group, and what carries its marker); wait until they are gone."""
    found = _started(popens, [role], cluster_id, None).find()
    _signal_groups([popens[role]], signal.SIGKILL)
    for p in found:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(found, timeout=10)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popens[role].wait(timeout=5)


def _reap(pids: set[int], sessions: set[int]) -> None:
    """Reap the zombies we adopted (see ``_adopting_orphans``): ``pids``, or in one of ``sessions``.

    A zombie keeps its session id: what a leader we started, or one we saw (a job's watcher
    shell), forks stays in its session.
    """
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error, ChildProcessError, ProcessLookupError):
            if child.status() == psutil.STATUS_ZOMBIE and (
                child.pid in pids or os.getsid(child.pid) in sessions | pids
            ):
                os.waitpid(child.pid, os.WNOHANG)


def _started(
    popens: dict[str, subprocess.Popen[bytes]], roles: list[str], cluster_id: str, temp_dir: Path | None
) -> _Started:
    """Return what identifies the processes of ``roles`` (and any naming ``temp_dir``)."""
    return _Started(
        tuple(popens[r].pid for r in roles if r in popens),
        frozenset(f"{cluster_id}/{r}" for r in roles),
        (str(temp_dir),) if temp_dir else (),
    )


def _signal_groups(popens: list[subprocess.Popen[bytes]], sig: int) -> None:
    """Send ``sig`` to each process group we lead (its id is its leader's pid)."""
    for p in popens:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, sig)


@contextlib.contextmanager
def _adopting_orphans() -> Iterator[None]:
    """Adopt our descendants' orphans while the block runs (Linux's child subreaper).

    At teardown Ray's processes outlive their parents; re-parented to an init that does not reap
    (a container's PID 1 often does not), they would linger as zombies. Adopted, ``_stop`` reaps
    them, and only them: never another ``Popen``'s child. Only for the teardown: all the session
    long, orphans (a job's shell wrappers) would pile up here instead of going to init.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        prctl = None
    before = ctypes.c_int(0)
    if prctl is not None:
        prctl(37, ctypes.byref(before), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    try:
        yield
    finally:
        if prctl is not None:
            prctl(36, before.value, 0, 0, 0)
