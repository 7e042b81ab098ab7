"""``python -m mlrunway.local recover [--workspace DIR]``: restart what of a workspace died, e.g. after a reboot.
``python -m mlrunway.local keys ENDPOINT``: print the endpoint's primary key, for a client of this machine.
``python -m mlrunway.local prune [--dry-run] [--keep-runs N] [--keep-versions K] [--capture-days D]``: remove what
the retention policy lets go of (:mod:`mlrunway.local.prune`), listing each thing and the space freed.
``python -m mlrunway.local endpoints list|show|delete [NAME]`` and ``jobs list|show|cancel [NAME]``: see and end
what a run left (a kept endpoint, a job still running); ``jobs cancel`` of a sweep cancels its trials.

Every sweep whose controller died resumes from its record, and every endpoint whose server died restarts on its
own port with its keys, deployments and traffic. Jobs that simply failed are left as they are (a task's retry
submits them anew). Run it at boot, before the Airflow workers (a systemd unit: docs/how-to/recover.md).

Exit codes: 0 done (a delete of an endpoint already gone too: it says so); 1 what was named does not exist, or a step
failed (the reason on stderr); 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from mlrunway.backend.retention import RetentionPolicy
from mlrunway.backend.types import JobInfo, JobStatus, ProvisioningState, SweepResult
from mlrunway.errors import MlrunwayError
from mlrunway.local.backend import LocalBackend
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.serving.endpoints import Removal


def recover_workspace(backend: LocalBackend) -> list[str]:
    """Recover every dead sweep controller and endpoint server; one line per thing done or refused (a job whose
    record is damaged is named, and the others recovered all the same)."""
    done = []
    for job in backend.jobs.list():
        if job.damaged:  # one bad record never stops the others: said, and recover exits 1
            done.append(f"job {job.name}: not recovered: {job.error}")
        elif job.kind == "sweep" and job.status is JobStatus.FAILED and backend.jobs.resume(job.name):
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


def _workspace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", default=argparse.SUPPRESS,
                        help="workspace folder (default: $MLRUNWAY_WORKSPACE or ./.workspace)")


def build_parser() -> argparse.ArgumentParser:
    """The command line (the docs' reference prints its help)."""
    parser = argparse.ArgumentParser(prog="python -m mlrunway.local", description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", help="workspace folder (default: $MLRUNWAY_WORKSPACE or ./.workspace)")
    commands = parser.add_subparsers(dest="command", required=True)
    _workspace(commands.add_parser("recover", help="restart what of the workspace died"))
    keys = commands.add_parser("keys", help="print an endpoint's primary key")
    keys.add_argument("endpoint", help="the endpoint whose primary key is printed")
    _workspace(keys)
    prune = commands.add_parser("prune", help="remove what the retention policy lets go of")
    prune.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")
    defaults = RetentionPolicy()
    prune.add_argument("--keep-runs", type=int, default=defaults.keep_runs, help="each DAG's last N runs")
    prune.add_argument("--keep-versions", type=int, default=defaults.keep_versions, help="each model's newest K versions")
    prune.add_argument("--capture-days", type=float, default=defaults.capture_days,
                       help="days captured requests and monitoring reports stay")
    _workspace(prune)
    for noun, verbs in (("endpoints", ("list", "show", "delete")), ("jobs", ("list", "show", "cancel"))):
        sub = commands.add_parser(noun, help=f"{'|'.join(verbs)} the workspace's {noun}")
        sub.add_argument("verb", choices=verbs)
        sub.add_argument("name", nargs="?", help=f"the {noun[:-1]} ({' and '.join(verbs[1:])} need it)")
        _workspace(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("endpoints", "jobs") and args.verb != "list" and not args.name:
        parser.error(f"{args.command} {args.verb} needs a name: python -m mlrunway.local {args.command} {args.verb} "
                     "<name>")
    try:
        backend = LocalBackend.at(args.workspace)
        if args.command == "prune":
            policy = RetentionPolicy.parse({"keep_runs": args.keep_runs, "keep_versions": args.keep_versions,
                                            "capture_days": args.capture_days}, "prune")
            print("\n".join(backend.prune(policy, dry_run=args.dry_run).lines()))
            return 0
        if args.command == "keys":  # for a client on this machine: KEY=$(python -m mlrunway.local keys <endpoint>)
            print(backend.endpoints.get_keys(args.endpoint)["primary"])
            return 0
        if args.command == "endpoints":
            return _endpoints(backend, args.verb, args.name)
        if args.command == "jobs":
            return _jobs(backend, args.verb, args.name)
    except MlrunwayError as exc:
        print(f"{exc}", file=sys.stderr)
        return 1
    lines = recover_workspace(backend)
    print("\n".join(lines) or "nothing to recover")
    return 1 if any("not restarted" in line or "not recovered" in line for line in lines) else 0


def _endpoints(backend: LocalBackend, verb: str, name: str | None) -> int:
    """The workspace's endpoints: a line each, one whole (its deployments; never its keys), or one deleted."""
    endpoints = backend.endpoints
    if verb == "list":
        rows = [(e.name, e.provisioning_state.value, _weights(e.traffic), e.scoring_uri) for e in endpoints.list()]
        print(_table(("NAME", "STATE", "TRAFFIC", "SCORING URI"), rows) if rows else "no endpoints")
        return 0
    assert name is not None
    if verb == "delete":  # as the API deletes: another delete of it (a run's cleanup, a person) may be first
        print(_deleted(name, endpoints.remove(name)))
        return 0
    info = endpoints.get(name)
    shown = {k: v for k, v in vars(info).items() if v not in (None, {}, "", False)}
    shown["provisioning_state"] = info.provisioning_state.value
    if not info.damaged:
        shown["deployments"] = [{"name": d.name, "state": d.provisioning_state.value, "model": d.model,
                                 **({"error": d.error} if d.error else {})} for d in endpoints.list_deployments(name)]
    print(json.dumps(shown, indent=1))
    return 0


def _deleted(name: str, removal: Removal | None) -> str:
    """What deleting endpoint ``name`` stopped, in a line."""
    if removal is None:
        return f"endpoint {name} was already gone: nothing to delete"
    if (state := removal.state) is None:  # its record could not be read: its server was found by its command line
        return f"endpoint {name} deleted: its record was damaged; {removal.stopped} process(es) of its server stopped"
    server = f"its server (pid {state.pid}) stopped, port {state.port} freed" if state.pid else "no server was running"
    served = ", ".join(sorted(state.deployments)) or "no deployment"
    return f"endpoint {name} deleted: {server}; it served {served}"


def _jobs(backend: LocalBackend, verb: str, name: str | None) -> int:
    """The workspace's jobs: a line each, one whole (a sweep's trials too), or one canceled (a sweep's trials too)."""
    jobs = backend.jobs
    if verb == "list":
        rows = [(j.name, j.kind, j.status.value, _when(j.created), (j.error or "").split("\n")[0][:60])
                for j in jobs.list()]
        print(_table(("NAME", "KIND", "STATUS", "CREATED", "ERROR"), rows) if rows else "no jobs")
        return 0
    assert name is not None
    info = jobs.get(name)
    if verb == "show":
        shown: dict[str, Any] = {k: v for k, v in vars(info).items() if v not in (None, {}, "")}
        shown["status"] = info.status.value
        if info.kind == "sweep":
            shown.update(_sweep_shown(jobs.sweep_result(name)))
        print(json.dumps(shown, indent=1, default=str))
        return 0
    print(_cancel(jobs, info))
    return 0


def _sweep_shown(result: SweepResult) -> dict[str, Any]:
    """A sweep's part of ``jobs show``: its trials; or, where its record is damaged, that, and which file."""
    if result.damaged:  # what it ran is unknown: never "Completed" with no trials
        return {"status": result.status.value, "damaged": True, "error": result.error}
    return {"trials": [{"name": t.name, "status": t.status.value, "intervals": len(t.history),
                        **({"note": t.note} if t.note else {})} for t in result.trials]}


def _cancel(jobs: LocalJobs, info: JobInfo) -> str:
    """Cancel the job as the API does (a damaged record's processes are found by its token and stopped: what it
    reads as cannot say whether it runs) and say what that stopped."""
    name = info.name
    running = jobs.processes(name)
    ended = jobs.cancel(name, reason="canceled from the command line")
    stopped = f"{running} process(es) stopped"
    if info.damaged:
        return f"job {name}: its record is damaged, {stopped} ({info.error})"
    if not running and ended.status is info.status:
        return f"job {name} had already ended {info.status.value}: nothing to cancel"
    trials = [t.name for t in jobs.sweep_result(name).trials] if info.kind == "sweep" else []
    return f"job {name} {ended.status.value}, {stopped}" + (f", with its trials ({', '.join(trials)})" if trials else "")


def _weights(traffic: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(traffic.items()) if v) or "-"


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in (header, *rows))


if __name__ == "__main__":
    sys.exit(main())
