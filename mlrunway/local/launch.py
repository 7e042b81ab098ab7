"""Turn a command job into the processes that run it on this machine, as Azure ML would launch them.

- no distribution: the command, once;
- ``pytorch``: torchrun with ``process_count_per_instance`` workers; torchrun sets WORLD_SIZE, RANK,
  LOCAL_RANK, MASTER_ADDR and MASTER_PORT, and NODE_RANK is set here (Azure sets all six);
- ``tensorflow``: one process per worker and parameter server, each with its own ``TF_CONFIG``;
- ``mpi``: ``mpirun -np N`` when an MPI launcher is installed.

A leading ``python`` runs under this interpreter, so a job uses the backend's environment.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from mlrunway.errors import NotSupportedOnBackend
from mlrunway.local.processes import ProcessLaunch, free_port
from mlrunway.specs.job import PLACEHOLDER, CommandJobSpec, Input, MpiDistribution, PyTorchDistribution

_PYTHONS = {"python", "python3", f"python3.{sys.version_info.minor}"}


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
    if isinstance(dist, MpiDistribution) and shutil.which("mpirun") is None:
        raise NotSupportedOnBackend(
            "distribution mpi: no mpirun on PATH; install Open MPI (apt-get install openmpi-bin) or use "
            "distribution pytorch, or run on the Azure ML backend"
        )


def resolve_command(command: str, inputs: Mapping[str, object], outputs: Mapping[str, Path]) -> list[str]:
    """Split the command line and substitute ``${{inputs.x}}`` / ``${{outputs.y}}`` in each argument."""

    def value(match: re.Match[str]) -> str:
        section, name = match.groups()
        if section == "outputs":
            return str(outputs[name])
        item = inputs[name]
        return item.path if isinstance(item, Input) else str(item)

    argv = [PLACEHOLDER.sub(value, token) for token in shlex.split(command)]
    if argv and argv[0] in _PYTHONS:
        argv[0] = sys.executable
    return argv


def plan(spec: CommandJobSpec, argv: list[str], env: dict[str, str]) -> list[ProcessLaunch]:
    """The processes to start for ``spec``; all of them go into one process group."""
    dist = spec.distribution
    if dist is None:
        return [ProcessLaunch(argv, env)]
    if isinstance(dist, PyTorchDistribution):
        return [ProcessLaunch(_torchrun(argv, dist.process_count_per_instance), {**env, "NODE_RANK": "0"})]
    if isinstance(dist, MpiDistribution):
        mpirun = shutil.which("mpirun") or "mpirun"
        return [ProcessLaunch([mpirun, "-np", str(dist.process_count_per_instance), *argv], env)]
    return _tensorflow(argv, env, dist.worker_count, dist.parameter_server_count)


def _torchrun(argv: list[str], processes: int) -> list[str]:
    launcher = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={processes}",
        "--node-rank=0", "--master-addr=127.0.0.1", f"--master-port={free_port()}",
    ]
    if argv[0] == sys.executable:
        rest = argv[1:]
        return [*launcher, "--module", *rest[1:]] if rest[:1] == ["-m"] else [*launcher, *rest]
    return [*launcher, "--no-python", *argv]


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
