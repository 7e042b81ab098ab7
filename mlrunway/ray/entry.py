"""What every Ray job of mlrunway runs first, shipped in its ``working_dir`` as ``_mlrunway_entry.py`` (the standard
library only, and MLflow's client where the cluster's Python has it)::

    python _mlrunway_entry.py <record folder> <timeout s or -> -- <the job's command ...>

Ray starts each job in the folder its ``working_dir`` was unpacked to, which jobs of the same code share; so the
job runs in a copy of its own, whose ``outputs`` is the job's outputs folder on the shared storage. It enforces the
job's timeout (Canceled, as Azure ML's and the local backend's), passes a stop (SIGTERM) to the command, records the
outcome on storage (``outcome.json``: what a head that forgot the job cannot say) beside the command's output
(``output.log``, also in Ray's log), and ends the job's MLflow run with it. It exits with the command's code.

A distributed job (its record holds :mod:`mlrunway.ray.distribution`'s ``launch.json``) runs its processes as actors
on a placement group instead: :mod:`mlrunway.ray.ranks`, shipped beside this file, the one part that imports ``ray``
(the cluster's own); this file then waits, records and ends the run as for one process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

NAME = "_mlrunway_entry.py"
RANKS = "_mlrunway_ranks.py"  # mlrunway.ray.ranks, the driver of a distributed job
SHIPPED = (NAME, RANKS, "_mlrunway_launch.json")
LAUNCH = "launch.json"  # mlrunway.ray.distribution's: in a distributed job's record
LOG = "output.log"  # in the job's record
KILL_GRACE_S = 5.0
RUN_STATUS = {"Completed": "FINISHED", "Failed": "FAILED", "Canceled": "KILLED"}  # mlrunway.tracking_names's


def write_json(path: Path, data: dict[str, object]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def copy_output(proc: subprocess.Popen[bytes], log: Path, echo: bool = True) -> None:
    """The command's output, line by line, to ``log`` on the storage, which outlives the cluster's own copy (a head
    that restarted forgets its jobs' logs), and to Ray's log (this process's stdout) where ``echo``."""
    assert proc.stdout is not None
    with open(log, "ab") as kept:
        for line in iter(proc.stdout.readline, b""):
            if echo:
                sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
            kept.write(line)
            kept.flush()


def private_copy(record: Path) -> Path:
    """A copy of the job's code (this process's working folder, which Ray shares between jobs of the same code)
    whose ``outputs`` is the job's outputs folder on the storage; files the code held there go there first."""
    outputs = record / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    work = Path(tempfile.mkdtemp(prefix="mlrunway-job-"))
    shutil.copytree(here, work, dirs_exist_ok=True, symlinks=True,
                    ignore=lambda folder, names: [n for n in names if n in SHIPPED and folder == here])
    if (work / "outputs").is_symlink() or (work / "outputs").is_file():
        (work / "outputs").unlink()
    elif (work / "outputs").is_dir():
        shutil.copytree(work / "outputs", outputs, dirs_exist_ok=True)
        shutil.rmtree(work / "outputs")
    (work / "outputs").symlink_to(outputs)
    return work


def _end_run(status: str) -> None:
    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id:
        return
    try:
        from mlflow.tracking import MlflowClient

        MlflowClient().set_terminated(run_id, RUN_STATUS[status])
    except Exception as exc:  # noqa: BLE001 - the outcome is on storage; the next read ends the run
        print(f"mlrunway: could not end MLflow run {run_id}: {exc}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    record, limit, separator, command = Path(argv[0]), argv[1], argv[2], argv[3:]
    if separator != "--" or not command:
        print("usage: _mlrunway_entry.py <record> <timeout|-> -- <command ...>", file=sys.stderr)
        return 2
    timeout = None if limit == "-" else float(limit)
    stopped: list[str] = []
    if (record / LAUNCH).exists():  # distributed: its processes are actors of the cluster (mlrunway.ray.ranks)
        signal.signal(signal.SIGTERM, lambda signum, _: stopped.append(signal.Signals(signum).name))
        signal.signal(signal.SIGINT, lambda signum, _: stopped.append(signal.Signals(signum).name))
        import _mlrunway_ranks  # shipped beside this file

        code, failure, timed_out = _mlrunway_ranks.run(json.loads((record / LAUNCH).read_text()), command, record,
                                                       timeout, stopped)
    else:
        code, timed_out = _one(record, command, timeout, stopped)
        failure = None
    if timed_out:
        status, error = "Canceled", f"timed out after {timeout:g} s (timeout)"
    elif stopped:
        status, error = "Canceled", "stopped"
    elif code == 0:
        status, error = "Completed", None
    else:
        status, error = "Failed", failure or f"exit code {code}"
    write_json(record / "outcome.json", {"status": status, "exit_code": code, "ended": time.time(), "error": error,
                                     "timed_out": timed_out})
    _end_run(status)
    return code if code >= 0 else 128 - code


def _one(record: Path, command: list[str], timeout: float | None, stopped: list[str]) -> tuple[int, bool]:
    """Run the command as one process in a private copy of the code: its exit code, and whether it timed out."""
    work = private_copy(record)
    write_json(record / "started.json", {"started": time.time(), "node": socket.gethostname(), "pid": os.getpid()})
    proc = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    copier = threading.Thread(target=copy_output, args=(proc, record / LOG), daemon=True)
    copier.start()

    def stop(signum: int, _frame: object) -> None:
        stopped.append(signal.Signals(signum).name)
        proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.terminate()
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    copier.join(timeout=KILL_GRACE_S)
    shutil.rmtree(work, ignore_errors=True)
    return proc.returncode, timed_out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
