"""The example DDP project (examples/demand_forecast, world size 2) as one job on the Ray backend against the local
backend, the same script and flags: on Ray its two ranks on two nodes (instance_count 2, a process each), locally
torchrun's two processes on this machine (instance_count 1, process_count_per_instance 2, the most it runs).

    .venv/bin/python bench/ddp_ray_vs_local.py [--repeats 3] [--rows 4000] [--epochs 8]

Under a minute a repeat, after the cluster's start. The cluster is tests/ray_cluster.py's (a head with no CPUs, a
worker node of 4, and a third node of 2 added here, so that the two ranks land on two nodes; an MLflow server), all
on this machine. A job's time is the caller's: from ``submit`` to the first poll that reads it ended (0.2 s polls);
"placed to ended" is the job's own (the local supervisor's start, the Ray driver's placement) to its end. A run that
does not complete records nothing. Prints a table and records bench/results/ddp_ray_vs_local.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, Bench, harness_args, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=8)
    harness_args(parser, repeats=3)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from mlrunway.local.backend import LocalBackend
    from mlrunway.ray.backend import RayBackend
    from mlrunway.specs.job import CommandJobSpec, Output, PyTorchDistribution
    from tests.ray_cluster import ray_cluster

    bench = Bench("ddp_ray_vs_local", args)
    rows: list[dict[str, Any]] = []
    command = f"python fit.py --rows {args.rows} --epochs {args.epochs} --model-dir ${{{{outputs.model}}}}"
    shapes = {"local": (1, 2), "ray": (2, 1)}  # (instance_count, process_count_per_instance)
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp, ray_cluster(Path(tmp) / "cluster") as cluster:
        cluster.add_node("ray-second", 2, {})
        backends: dict[str, Any] = {
            "local": LocalBackend.at(Path(tmp) / "ws"),
            "ray": RayBackend.from_connection({
                "address": cluster.address, "storage": str(cluster.storage), "tracking_uri": cluster.tracking_uri,
                "namespace": "bench", "profiles": {"cpu": {"num_cpus": 1}}}, cluster.token)}
        for repeat, order in bench.repeats(["local", "ray"], rows):
            for kind in order:
                nodes, per = shapes[kind]
                spec = CommandJobSpec(code=str(REPO / "examples" / "demand_forecast"), command=command,
                                      outputs={"model": Output()}, experiment_name="bench-ddp", instance_count=nodes,
                                      distribution=PyTorchDistribution(process_count_per_instance=per))
                name = f"ddp-{kind}-{repeat}"
                jobs = backends[kind].jobs
                began = time.monotonic()
                jobs.submit(name, spec)
                info = jobs.wait(name, timeout=900, poll_s=0.2)
                wall = time.monotonic() - began
                if info.status.value != "Completed":
                    raise SystemExit(f"the {kind} job ended {info.status.value}: {info.error}: nothing recorded")
                ran = (info.ended or 0.0) - (info.started or 0.0)
                bench.add(f"submit to ended: {kind}", wall, "s")
                bench.add(f"placed to ended: {kind}", ran, "s")
                rows.append({"repeat": repeat, "backend": kind, "shape": f"{nodes}x{per}", "wall": wall, "ran": ran})
    print(table(rows, [("repeat", "repeat"), ("backend", "backend"), ("shape", "instances x processes"),
                       ("wall", "submit to ended s"), ("ran", "placed to ended s")]))
    print(json.dumps(bench.figures(), indent=1))
    bench.record(rows, ("ray", "torch", "mlflow"))


if __name__ == "__main__":
    main()
