"""``python -m mlrunway.local recover [--workspace DIR]``: restart what of a workspace died, e.g. after a reboot.
``python -m mlrunway.local keys ENDPOINT``: print the endpoint's primary key, for a client of this machine.
``python -m mlrunway.local prune [--dry-run] [--keep-runs N] [--keep-versions K] [--capture-days D]``: remove what
the retention policy lets go of (:mod:`mlrunway.local.prune`), listing each thing and the space freed.

Every sweep whose controller died resumes from its record, and every endpoint whose server died restarts on its
own port with its keys, deployments and traffic. Jobs that simply failed are left as they are (a task's retry
submits them anew). Run it at boot, before the Airflow workers (a systemd unit: README, "Surviving faults").
"""

from __future__ import annotations

import argparse
import sys

from mlrunway.backend.retention import RetentionPolicy
from mlrunway.backend.types import JobStatus, ProvisioningState
from mlrunway.errors import MlrunwayError, NotFound
from mlrunway.local.backend import LocalBackend


def recover_workspace(backend: LocalBackend) -> list[str]:
    """Recover every dead sweep controller and endpoint server; one line per thing done or refused."""
    done = []
    for job in backend.jobs.list():
        if job.kind == "sweep" and job.status is JobStatus.FAILED and backend.jobs.resume(job.name):
            done.append(f"sweep {job.name}: resumed ({job.error.splitlines()[0] if job.error else 'died'})")
    for endpoint in backend.endpoints.list():
        if endpoint.provisioning_state is ProvisioningState.FAILED:
            try:
                info, restarted = backend.endpoints.restart(endpoint.name)
                if restarted:  # else another recover restarted it meanwhile
                    done.append(f"endpoint {endpoint.name}: restarted at {info.scoring_uri}")
            except MlrunwayError as exc:
                done.append(f"endpoint {endpoint.name}: not restarted: {exc}")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlrunway.local", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["recover", "keys", "prune"])
    parser.add_argument("endpoint", nargs="?", help="keys: the endpoint whose primary key is printed")
    parser.add_argument("--workspace", help="workspace folder (default: $MLRUNWAY_WORKSPACE or ./.workspace)")
    parser.add_argument("--dry-run", action="store_true", help="prune: list what would go, remove nothing")
    defaults = RetentionPolicy()
    parser.add_argument("--keep-runs", type=int, default=defaults.keep_runs, help="prune: each DAG's last N runs")
    parser.add_argument("--keep-versions", type=int, default=defaults.keep_versions,
                        help="prune: each model's newest K versions")
    parser.add_argument("--capture-days", type=float, default=defaults.capture_days,
                        help="prune: days captured requests and monitoring reports stay")
    args = parser.parse_args(argv)
    try:
        backend = LocalBackend.at(args.workspace)
        if args.command == "prune":
            policy = RetentionPolicy.parse({"keep_runs": args.keep_runs, "keep_versions": args.keep_versions,
                                            "capture_days": args.capture_days}, "prune")
            print("\n".join(backend.prune(policy, dry_run=args.dry_run).lines()))
            return 0
    except MlrunwayError as exc:
        print(f"{exc}", file=sys.stderr)
        return 1
    if args.command == "keys":  # for a client on this machine: KEY=$(python -m mlrunway.local keys <endpoint>)
        if not args.endpoint:
            parser.error("keys needs the endpoint's name: python -m mlrunway.local keys <endpoint>")
        try:
            print(backend.endpoints.get_keys(args.endpoint)["primary"])
        except NotFound as exc:
            print(f"{exc}", file=sys.stderr)
            return 1
        return 0
    lines = recover_workspace(backend)
    print("\n".join(lines) or "nothing to recover")
    return 1 if any("not restarted" in line for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
