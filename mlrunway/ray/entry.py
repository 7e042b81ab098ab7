"""What every Ray job of mlrunway runs first, shipped in its ``working_dir`` as ``_mlrunway_entry.py`` (the standard
library only, and MLflow's client where the cluster's Python has it)::

    python _mlrunway_entry.py <record folder> <timeout s or -> -- <the job's command ...>

Ray starts each job in the folder its ``working_dir`` was unpacked to, which jobs of the same code share; so the
job runs in a copy of its own, whose ``outputs`` is the job's outputs folder on the shared storage. It enforces the
job's timeout (Canceled, as Azure ML's and the local backend's), passes a stop (SIGTERM) to the command, records the
outcome on storage (``outcome.json``: what a head that forgot the job cannot say) beside the command's output
(``output.log``, also in Ray's log), and ends the job's MLflow run with it. It exits with the command's code.
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
LOG = "output.log"  # in the job's record
KILL_GRACE_S = 5.0
RUN_STATUS = {"Completed": "FINISHED", "Failed": "FAILED", "Canceled": "KILLED"}  # mlrunway.tracking_names's


def _write(path: Path, data: dict[str, object]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def _copy(proc: subprocess.Popen[bytes], log: Path) -> None:
    """The command's output, line by line, to Ray's log (this process's stdout) and to ``log`` on the storage, which
    outlives the cluster's own copy (a head that restarted forgets its jobs' logs)."""
    assert proc.stdout is not None
    with open(log, "ab") as kept:
        for line in iter(proc.stdout.readline, b""):
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            kept.write(line)
            kept.flush()


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
    outputs = record / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mlrunway-job-"))
    shutil.copytree(os.getcwd(), work, dirs_exist_ok=True, symlinks=True,
                    ignore=lambda folder, names: [n for n in names if n == NAME and folder == os.getcwd()])
    if (work / "outputs").is_symlink() or (work / "outputs").is_file():
        (work / "outputs").unlink()
    elif (work / "outputs").is_dir():  # files the code folder held there go to the job's outputs first
        shutil.copytree(work / "outputs", outputs, dirs_exist_ok=True)
        shutil.rmtree(work / "outputs")
    (work / "outputs").symlink_to(outputs)
    _write(record / "started.json", {"started": time.time(), "node": socket.gethostname(), "pid": os.getpid()})

    stopped: list[str] = []
    proc = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    copier = threading.Thread(target=_copy, args=(proc, record / LOG), daemon=True)
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
    code = proc.returncode
    copier.join(timeout=KILL_GRACE_S)
    if timed_out:
        status, error = "Canceled", f"timed out after {timeout:g} s (timeout)"
    elif stopped:
        status, error = "Canceled", "stopped"
    elif code == 0:
        status, error = "Completed", None
    else:
        status, error = "Failed", f"exit code {code}"
    _write(record / "outcome.json", {"status": status, "exit_code": code, "ended": time.time(), "error": error,
                                     "timed_out": timed_out})
    _end_run(status)
    shutil.rmtree(work, ignore_errors=True)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
