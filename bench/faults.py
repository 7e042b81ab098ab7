"""How fast the local backend tells the truth after its own processes die, and how fast it recovers.

    .venv/bin/python bench/faults.py [--repeats 5]

About 2 minutes. Each fault kills something of a real job, sweep or endpoint with SIGKILL, then measures, from
the kill (the process gone):

- **to a true status**: the first read that reports it (polling every 50 ms, as a reader would); asserted to say
  what happened (``Failed``, naming the dead process), not just any terminal status;
- **from a fresh process**: the same read as a new Python process makes it (a retried Airflow task): its start,
  imports and read, timed as a whole;
- **to nothing left**: until no process carrying the job's token (or the endpoint's) is alive but those that
  should be;
- **to recovered**: where there is a recovery (a sweep controller resumed, an endpoint master restarted), until
  it serves again.

The faults run in turn, their order rotated each repeat. A fault whose outcome is not the truth (a status that
never comes, a process left behind) stops the run: nothing is recorded. Records bench/results/faults.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from _common import REPO, Bench, harness_args, interleaved, table

from mlrunway.backend.types import (
    DeploymentSettings,
    EndpointSettings,
    JobStatus,
    ProvisioningState,
)
from mlrunway.local.backend import LocalBackend
from mlrunway.local.processes import marked
from mlrunway.local.supervisor import JobState
from mlrunway.specs import CommandJobSpec

SLEEPER = "import os, pathlib, time\npathlib.Path('outputs/pid').write_text(str(os.getpid()))\ntime.sleep(600)\n"
SCORE = "def init():\n    pass\ndef run(raw):\n    return {'ok': True}\n"
FRESH_READ = """
import sys
from mlrunway.local.backend import LocalBackend
info = LocalBackend.at(sys.argv[1]).jobs.get(sys.argv[2])
print(info.status.value)
"""


class Untrue(SystemExit):
    """What the backend reported is not what happened: the run measures nothing, and is not recorded."""


def until(predicate: Callable[[], bool], what: str, timeout_s: float = 60) -> float:
    """Seconds until ``predicate()`` holds, polling as fast as a reader would (every 50 ms)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise Untrue(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def failed_naming(backend: LocalBackend, name: str, *words: str) -> Callable[[], bool]:
    def check() -> bool:
        info = backend.jobs.get(name)
        if info.status is not JobStatus.FAILED:
            return False
        if not all(word in (info.error or "") for word in words):
            raise Untrue(f"{name} is Failed, but its error does not name {words}: {info.error}")
        return True
    return check


def running_job(backend: LocalBackend, root: Path, name: str) -> dict[str, Any]:
    code = root / f"code-{name}"
    code.mkdir()
    (code / "script.py").write_text(SLEEPER)
    backend.jobs.submit(name, CommandJobSpec(code=str(code), command="python script.py"))
    folder = backend.workspace.job_dir(name)
    until(lambda: (folder / "outputs" / "pid").exists(), f"{name}'s script started")
    status = json.loads((folder / "status.json").read_text())
    return {**status, "trainer": int((folder / "outputs" / "pid").read_text()), "token": JobState(folder).job()["token"]}


def supervisor_killed(backend: LocalBackend, root: Path, repeat: int) -> dict[str, Any]:
    name = f"sup-{repeat}"
    status = running_job(backend, root, name)
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    until(lambda: gone(status["supervisor_pid"]), "the supervisor gone")
    to_truth = until(failed_naming(backend, name, "supervisor"), f"{name} reported Failed, naming its supervisor")
    to_clean = until(lambda: not marked(status["token"]), f"{name}'s processes gone")
    return {"true_status_s": to_truth, "nothing_left_s": to_clean}


def supervisor_killed_fresh_read(backend: LocalBackend, root: Path, repeat: int) -> dict[str, Any]:
    """The same fault, read by a new process: what a retried task (a fresh interpreter) pays to see it."""
    name = f"fresh-{repeat}"
    status = running_job(backend, root, name)
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    until(lambda: gone(status["supervisor_pid"]), "the supervisor gone")
    start = time.monotonic()
    read = subprocess.run([sys.executable, "-c", FRESH_READ, str(backend.workspace.root), name], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    to_truth = time.monotonic() - start
    if read.stdout.strip() != JobStatus.FAILED.value:
        raise Untrue(f"a fresh process read {name} as {read.stdout.strip()!r}, not Failed: {read.stderr[-500:]}")
    to_clean = until(lambda: not marked(status["token"]), f"{name}'s processes gone")
    return {"true_status_s": to_truth, "nothing_left_s": to_clean}


def reboot(backend: LocalBackend, root: Path, repeat: int) -> dict[str, Any]:
    name = f"boot-{repeat}"
    status = running_job(backend, root, name)
    killed = time.monotonic()
    for pid in (status["trainer"], status["supervisor_pid"]):
        os.kill(pid, signal.SIGKILL)
    until(lambda: gone(status["supervisor_pid"]) and gone(status["trainer"]), "the supervisor and trainer gone")
    to_clean = time.monotonic() - killed + until(lambda: not marked(status["token"]), f"{name}'s processes gone")
    to_truth = until(failed_naming(LocalBackend.at(backend.workspace.root), name, "supervisor"),
                     f"{name} reported Failed after the reboot")
    return {"true_status_s": to_truth, "nothing_left_s": to_clean}


def sweep_controller(backend: LocalBackend, root: Path, repeat: int) -> dict[str, Any]:
    from mlrunway.specs import Choice, Objective, SweepLimits, SweepSpec

    name = f"swp-{repeat}"
    code = root / f"code-{name}"
    code.mkdir()
    (code / "script.py").write_text("import time\ntime.sleep(600)\n")
    trial = CommandJobSpec(code=str(code), command="python script.py ${{inputs.x}}", inputs={"x": 0})
    backend.jobs.submit_sweep(name, SweepSpec(trial=trial, search_space={"x": Choice(values=(1, 2))},
                                              objective=Objective(primary_metric="best_val_acc"),
                                              limits=SweepLimits(max_total_trials=2)), poll_s=0.3)
    until(lambda: len(backend.jobs.sweep_result(name).trials) == 2, f"{name}'s two trials started")
    folder = str(backend.workspace.job_dir(name))
    (controller,) = [p for p in psutil.process_iter(["cmdline"])
                     if " ".join(p.info["cmdline"] or []).endswith(f"mlrunway.local.sweep_controller {folder}")]
    controller.kill()
    controller.wait(10)
    to_truth = until(failed_naming(backend, name, "sweep controller"), f"{name} reported Failed, naming its controller")
    start = time.monotonic()
    backend.jobs.recover(name)
    recovered = time.monotonic() - start + until(lambda: backend.jobs.get(name).status is JobStatus.RUNNING,
                                                 f"{name} Running again after recover")
    trials = [t.name for t in backend.jobs.sweep_result(name).trials]
    if any(backend.jobs.get(t).status.is_terminal() for t in trials):
        raise Untrue(f"{name}'s trials did not run on through the controller's death: "
                     f"{[(t, backend.jobs.get(t).status.value) for t in trials]}")
    until(lambda: all(backend.jobs.get(t).status is JobStatus.RUNNING for t in trials), f"{name}'s trials Running")
    tokens = [JobState(backend.workspace.job_dir(t)).job()["token"] for t in trials]
    canceled = time.monotonic()
    backend.jobs.cancel(name)
    until(lambda: backend.jobs.get(name).status is JobStatus.CANCELED, f"{name} Canceled")
    to_clean = time.monotonic() - canceled + until(lambda: not any(marked(token) for token in tokens),
                                                   f"{name}'s trials' processes gone after the cancel")
    return {"true_status_s": to_truth, "recovered_s": recovered, "nothing_left_s": to_clean}


def endpoint_master(backend: LocalBackend, root: Path, repeat: int) -> dict[str, Any]:
    endpoints, name = backend.endpoints, f"bench-ep-{repeat}"
    endpoints.create_or_update(name, EndpointSettings(workers=2))
    code, model = root / f"score-{repeat}", root / f"model-{repeat}"
    code.mkdir()
    model.mkdir()
    (code / "score.py").write_text(SCORE)
    version = backend.models.register("m", model)
    endpoints.create_or_update_deployment(name, "blue", DeploymentSettings(model=f"m:{version.version}",
                                                                            code_dir=str(code)))
    endpoints.set_traffic(name, {"blue": 100})
    state = endpoints.state(name)
    master = state.pid
    assert master is not None, f"{name} has no master recorded"
    os.kill(master, signal.SIGKILL)
    until(lambda: gone(master), "the master gone")
    to_truth = until(lambda: endpoints.get(name).provisioning_state is ProvisioningState.FAILED,
                     f"{name} reported Failed")
    start = time.monotonic()
    endpoints.recover(name)
    recovered = time.monotonic() - start
    if endpoints.get(name).provisioning_state is not ProvisioningState.SUCCEEDED:
        raise Untrue(f"{name} is {endpoints.get(name).provisioning_state.value} after recover")
    to_clean = until(lambda: all(p.ppid() == endpoints.state(name).pid or p.pid == endpoints.state(name).pid
                                 for p in marked(state.token)), f"{name}'s orphaned workers retired")
    endpoints.delete(name)
    return {"true_status_s": to_truth, "recovered_s": recovered, "nothing_left_s": to_clean}


FAULTS = {
    "supervisor killed while its trainer runs": supervisor_killed,
    "the same, read by a fresh process": supervisor_killed_fresh_read,
    "supervisor and trainer killed together (a reboot)": reboot,
    "sweep controller killed": sweep_controller,
    "endpoint master killed": endpoint_master,
}
MEASURES = {"true_status_s": "to a true status", "nothing_left_s": "to nothing left", "recovered_s": "to recovered"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    bench = Bench("faults", args)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        backend = LocalBackend.at(root / "ws")
        for repeat, order in interleaved(list(FAULTS), args.repeats):
            for fault in order:
                measured = FAULTS[fault](backend, root, repeat)
                rows.append({"repeat": repeat, "fault": fault, **measured})
                for key, value in measured.items():
                    bench.add(f"{fault}: {MEASURES[key]} (s)", value, "s")
                print(table(rows[-1:], [("repeat", "repeat"), ("fault", "fault"),
                                        *[(k, f"{v} (s)") for k, v in MEASURES.items()]]), flush=True)
    bench.record(rows, ("psutil", "uvicorn", "mlflow"), faults=list(FAULTS), measures=MEASURES)


if __name__ == "__main__":
    main()
