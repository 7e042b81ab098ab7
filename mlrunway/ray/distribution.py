"""How a command job's ``distribution`` maps onto a Ray cluster: planned here, on the Airflow side, before any job;
carried out on the cluster by the job's driver (:mod:`mlrunway.ray.ranks`), which reads the plan from the job's record
(``launch.json``).

- **Bundles.** One placement-group bundle per instance (``instance_count``), each holding the job's profile (its
  ``compute``) once per process placed on it. Several instances are ``STRICT_SPREAD``: each on a node of its own, as
  Azure ML's instances are machines of their own; one instance is ``PACK``. A placement group is placed whole or not
  at all, so two jobs never hold half of what each needs.
- **Processes.** Each process is started by an actor on its bundle, holding the profile's resources (its GPUs, too:
  Ray sets ``CUDA_VISIBLE_DEVICES`` for it), the job's driver asking for none.
- ``pytorch``: ``process_count_per_instance`` processes per bundle with torchrun's environment (RANK, LOCAL_RANK,
  WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK here; MASTER_ADDR, the node of rank 0's bundle, and MASTER_PORT,
  a port free there, by the driver once placed). The team's torchrun-style script runs unchanged; Ray Train is not
  used (it runs a Python function and opens the process group itself: a torchrun script under it would rendezvous
  twice).
- ``tensorflow``: the workers, then the parameter servers, dealt over the bundles in turn, each with its
  ``TF_CONFIG`` (every task's node address and a port free there, by the driver).
- ``mpi`` on one instance: one process, Open MPI's ``mpirun -np <process_count_per_instance>`` found on the node,
  holding the whole bundle. On several instances it is refused before any job: mpirun reaches other machines through
  ssh or a batch system's launcher (Slurm, PBS), which a Ray cluster's nodes do not offer; the azure_ml backend runs
  it (Azure ML starts mpirun across its nodes).
"""

from __future__ import annotations

from typing import Any

from mlrunway import check
from mlrunway.ray.connection import Profile
from mlrunway.specs.command import process_count
from mlrunway.specs.job import CommandJobSpec, MpiDistribution, PyTorchDistribution

__all__ = ["LAUNCH", "fits", "kept", "plan", "processes"]

LAUNCH = "launch.json"  # in a distributed job's record: the plan its driver carries out


def processes(spec: CommandJobSpec) -> int:
    """How many processes of the team's code the job runs on the cluster, each holding its profile once."""
    if spec.distribution is None:
        return 1
    return process_count(spec) * (1 if _tensorflow(spec) else spec.instance_count)


def plan(spec: CommandJobSpec, profile_name: str, profile: Profile, name: str) -> dict[str, Any] | None:
    """The placement and processes of a distributed ``spec`` on profile ``profile`` (None: one process, no
    distribution); a SpecError naming the field for what the cluster cannot run."""
    dist = spec.distribution
    nodes = spec.instance_count
    if dist is None:
        if nodes != 1:
            raise check.fail("command_job.instance_count", f"{nodes} instances with no distribution: nothing says how "
                             "their processes would meet", 'give a distribution ({"type": "pytorch"}, "mpi" or '
                             '"tensorflow"), or use instance_count 1')
        return None
    per_process = _resources(profile)
    if not per_process:
        raise check.fail("command_job.compute", f"profile {profile_name!r} asks for no resources, and each process of "
                         "a distributed job holds its profile's on its instance's bundle",
                         "name a profile with num_cpus or num_gpus above 0")
    listed: list[dict[str, Any]] = []
    if isinstance(dist, PyTorchDistribution):
        per = dist.process_count_per_instance
        for node in range(nodes):
            for local in range(per):
                listed.append({"bundle": node, "env": {
                    "RANK": str(node * per + local), "LOCAL_RANK": str(local), "WORLD_SIZE": str(nodes * per),
                    "LOCAL_WORLD_SIZE": str(per), "NODE_RANK": str(node), "GROUP_RANK": str(node)}})
    elif isinstance(dist, MpiDistribution):
        if nodes != 1:
            raise check.fail("command_job.instance_count", f"distribution mpi on {nodes} instances: Open MPI's mpirun "
                             "reaches other machines through ssh or a batch system's launcher, which a Ray cluster's "
                             "nodes do not offer", "run it on one instance (instance_count 1) with more "
                             "process_count_per_instance, use distribution pytorch, or run it on the azure_ml backend")
        listed.append({"bundle": 0, "env": {}, "mpi": dist.process_count_per_instance,
                       "options": _actor_options(profile, dist.process_count_per_instance)})
    else:
        tasks = [("worker", i) for i in range(dist.workers(nodes))] + \
            [("ps", i) for i in range(dist.parameter_server_count)]
        listed = [{"bundle": k % nodes, "env": {}, "tf": {"type": kind, "index": index}}
                  for k, (kind, index) in enumerate(tasks)]
    held = [sum(p.get("mpi", 1) for p in listed if p["bundle"] == b) for b in range(nodes)]
    if 0 in held:
        raise check.fail("command_job.instance_count", f"{nodes} instances for {len(listed)} processes: "
                         f"instance {held.index(0)} would run none", "give at most as many instances as processes")
    return {
        "name": name, "type": dist.type, "strategy": "STRICT_SPREAD" if nodes > 1 else "PACK",
        "bundles": [{key: value * count for key, value in per_process.items()} for count in held],
        "processes": [{"options": _actor_options(profile), **p} for p in listed],
    }


def kept(profile: Profile, name: str) -> dict[str, Any]:
    """The launch of a job the cluster keeps running (an endpoint's server): one process on an actor holding the
    profile's resources, which Ray starts again on another node when its node is lost, the command run again there
    (:func:`mlrunway.ray.ranks.keep`); its driver asks for none (on the head, which outlives a worker node)."""
    return {"type": "keep", "name": name, "options": _actor_options(profile)}


def fits(launch: dict[str, Any], nodes: list[dict[str, Any]]) -> str | None:
    """Why the cluster's nodes (Ray's state API: ``state``, ``resources_total``) could never place ``launch`` even
    when idle, or None where they could: STRICT_SPREAD needs a node of its own for each bundle."""
    alive = [dict(node.get("resources_total") or {}) for node in nodes if node.get("state") == "ALIVE"]
    bundles = sorted(launch["bundles"], key=lambda b: -sum(b.values()))
    if launch["strategy"] == "STRICT_SPREAD":
        free = list(alive)
        for bundle in bundles:  # the largest first, each on the node it fits with the most left
            fitting = [n for n in free if all(n.get(key, 0.0) >= value for key, value in bundle.items())]
            if not fitting:
                able = sum(all(n.get(k, 0.0) >= v for k, v in bundle.items()) for n in alive)
                return (f"{len(bundles)} instances each need a node of their own with {_said(bundle)}, and the "
                        f"cluster's {len(alive)} nodes have {able} such")
            free.remove(max(fitting, key=lambda n: sum(n.values())))
        return None
    bundle = bundles[0]
    if not any(all(n.get(key, 0.0) >= value for key, value in bundle.items()) for n in alive):
        return f"its instance needs a node with {_said(bundle)}, and none of the cluster's {len(alive)} nodes has it"
    return None


def _resources(profile: Profile) -> dict[str, float]:
    """A profile's resources as a bundle names them (Ray's ``CPU``, ``GPU``, ``memory`` and custom ones), the zero
    ones left out (Ray refuses an empty bundle, not a missing key)."""
    found = {"CPU": profile.num_cpus, "GPU": profile.num_gpus, "memory": float(profile.memory or 0),
             **profile.resources}
    return {key: float(value) for key, value in found.items() if value}


def _actor_options(profile: Profile, times: int = 1) -> dict[str, Any]:
    """What a process's actor reserves on its bundle: the profile once (mpirun: once per rank it starts)."""
    options: dict[str, Any] = {"num_cpus": profile.num_cpus * times, "num_gpus": profile.num_gpus * times}
    if profile.memory:
        options["memory"] = profile.memory * times
    if profile.resources:
        options["resources"] = {key: value * times for key, value in profile.resources.items()}
    return options


def _said(bundle: dict[str, float]) -> str:
    return ", ".join(f"{value:g} {key}" for key, value in sorted(bundle.items()))


def _tensorflow(spec: CommandJobSpec) -> bool:
    return spec.distribution is not None and spec.distribution.type == "tensorflow"
