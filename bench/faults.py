"""How fast the local backend tells the truth after its own processes die, and how fast it recovers.

Each row kills something of a real job, sweep or endpoint with SIGKILL, then measures the time from the kill
(the process gone) to the first read that reports it, and where there is one, to recovery. Records
``bench/results/faults.json``. Usage: ``python bench/faults.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record, table  # noqa: E402
from mlrunway.backend.types import DeploymentSettings, EndpointSettings, JobStatus, ProvisioningState  # noqa: E402
from mlrunway.local.backend import LocalBackend  # noqa: E402
from mlrunway.local.processes import marked  # noqa: E402
from mlrunway.specs import CommandJobSpec  # noqa: E402

SLEEPER = "import os, pathlib, time\npathlib.Path('outputs/pid').write_text(str(os.getpid()))\ntime.sleep(600)\n"
SCORE = "def init():\n    pass\ndef run(raw):\n    return {'ok': True}\n"


def until(predicate: Callable[[], bool], timeout_s: float = 60) -> float:
    """Seconds until ``predicate()`` holds, polling as fast as a reader would (every 50 ms)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError("the condition was not met")
        time.sleep(0.05)
    return time.monotonic() - start


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def running_job(backend: LocalBackend, root: Path, name: str) -> dict:
    code = root / f"code-{name}"
    code.mkdir()
    (code / "script.py").write_text(SLEEPER)
    backend.jobs.submit(name, CommandJobSpec(code=str(code), command="python script.py"))
    until(lambda: (backend.workspace.job_dir(name) / "outputs" / "pid").exists())
    status = json.loads((backend.workspace.job_dir(name) / "status.json").read_text())
    return {**status, "trainer": int((backend.workspace.job_dir(name) / "outputs" / "pid").read_text())}


def supervisor_killed(backend: LocalBackend, root: Path) -> dict:
    status = running_job(backend, root, "sup")
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    until(lambda: gone(status["supervisor_pid"]))
    to_truth = until(lambda: backend.jobs.get("sup").status is JobStatus.FAILED)
    to_clean = until(lambda: gone(status["trainer"]))
    return {"fault": "supervisor killed while its trainer runs", "true_status_s": to_truth,
            "nothing_left_s": to_clean, "recovered_s": None}


def reboot(backend: LocalBackend, root: Path) -> dict:
    status = running_job(backend, root, "boot")
    for pid in (status["trainer"], status["supervisor_pid"]):
        os.kill(pid, signal.SIGKILL)
    until(lambda: gone(status["supervisor_pid"]) and gone(status["trainer"]))
    to_truth = until(lambda: LocalBackend.at(backend.workspace.root).jobs.get("boot").status is JobStatus.FAILED)
    return {"fault": "supervisor and trainer killed together", "true_status_s": to_truth, "nothing_left_s": 0.0,
            "recovered_s": None}


def sweep_controller(backend: LocalBackend, root: Path) -> dict:
    from mlrunway.specs import Choice, Objective, SweepLimits, SweepSpec

    code = root / "code-sweep"
    code.mkdir()
    (code / "script.py").write_text("import time\ntime.sleep(600)\n")
    trial = CommandJobSpec(code=str(code), command="python script.py ${{inputs.x}}", inputs={"x": 0})
    backend.jobs.submit_sweep("swp", SweepSpec(trial=trial, search_space={"x": Choice(values=(1, 2))},
                                               objective=Objective(primary_metric="best_val_acc"),
                                               limits=SweepLimits(max_total_trials=2)), poll_s=0.3)
    until(lambda: len(backend.jobs.sweep_result("swp").trials) == 2)
    folder = str(backend.workspace.job_dir("swp"))
    (controller,) = [p for p in psutil.process_iter(["cmdline"])
                     if " ".join(p.info["cmdline"] or []).endswith(f"mlrunway.local.sweep_controller {folder}")]
    controller.kill()
    controller.wait(10)
    to_truth = until(lambda: backend.jobs.get("swp").status is JobStatus.FAILED)
    start = time.monotonic()
    backend.jobs.recover("swp")
    recovered = time.monotonic() - start + until(lambda: backend.jobs.get("swp").status is JobStatus.RUNNING)
    backend.jobs.cancel("swp")
    return {"fault": "sweep controller killed", "true_status_s": to_truth, "nothing_left_s": None,
            "recovered_s": recovered}


def endpoint_master(backend: LocalBackend, root: Path) -> dict:
    endpoints = backend.endpoints
    endpoints.create_or_update("bench-ep", EndpointSettings(workers=2))
    code, model = root / "score", root / "model"
    code.mkdir()
    model.mkdir()
    (code / "score.py").write_text(SCORE)
    version = backend.models.register("m", model)
    endpoints.create_or_update_deployment("bench-ep", "blue", DeploymentSettings(model=f"m:{version.version}",
                                                                                  code_dir=str(code)))
    endpoints.set_traffic("bench-ep", {"blue": 100})
    state = endpoints.state("bench-ep")
    os.kill(state.pid, signal.SIGKILL)
    until(lambda: gone(state.pid))
    to_truth = until(lambda: endpoints.get("bench-ep").provisioning_state is ProvisioningState.FAILED)
    start = time.monotonic()
    endpoints.recover("bench-ep")
    recovered = time.monotonic() - start
    to_clean = until(lambda: all(p.ppid() == endpoints.state("bench-ep").pid or p.pid == endpoints.state("bench-ep").pid
                                 for p in marked(state.token)))
    endpoints.delete("bench-ep")
    return {"fault": "endpoint master killed", "true_status_s": to_truth, "nothing_left_s": to_clean,
            "recovered_s": recovered}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        backend = LocalBackend.at(root / "ws")
        for fault in (supervisor_killed, reboot, sweep_controller, endpoint_master):
            rows.append(fault(backend, root))
    print(table(rows, [("fault", "fault"), ("true_status_s", "to a true status (s)"),
                       ("nothing_left_s", "to nothing left (s)"), ("recovered_s", "to recovered (s)")]))
    record("faults", args, rows, ("psutil", "uvicorn", "mlflow"))


if __name__ == "__main__":
    main()
