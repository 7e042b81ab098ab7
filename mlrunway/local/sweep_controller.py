"""The local sweep's process: ``python -m mlrunway.local.sweep_controller <sweep_job_dir>``.

It runs under the sweep job's supervisor, starts each trial as a named local job whose MLflow run is nested
under the sweep's, reads the primary metric from the tracking store, and writes ``outputs/sweep.json`` after
every poll, so the record survives whatever stops it. SIGTERM (a canceled sweep) cancels the running trials.
Started again on a sweep that has a record (``LocalJobs.recover`` after the controller died), it takes the
sweep on from that record: it adopts the trials still running, judges them, and starts the ones never started.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlrunway.backend.types import JobStatus, TrialInfo
from mlrunway.local import tracking
from mlrunway.local.files import read_json, write_json
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.supervisor import JobState
from mlrunway.local.workspace import Workspace
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep.controller import SweepController, SweepOutcome
from mlrunway.sweep.leaderboard import format_leaderboard

SWEEP_RESULT = "sweep.json"


class LocalTrialRunner:
    """Trials as local jobs; metrics from the workspace's MLflow store."""

    def __init__(self, jobs: LocalJobs, sweep: SweepSpec, parent_run_id: str | None) -> None:
        self.jobs = jobs
        self.trial = replace(sweep.trial, timeout=sweep.limits.trial_timeout,
                             environment_variables=trial_threads(sweep, os.cpu_count() or 1))
        self.metric = sweep.objective.primary_metric
        self.parent_run_id = parent_run_id
        self.tracking = tracking.client(jobs.workspace)

    def start(self, name: str, params: dict[str, Any]) -> None:
        self.jobs.submit(name, self.trial.with_inputs(**params), parent_run_id=self.parent_run_id)

    def poll(self, name: str) -> tuple[JobStatus, str | None]:
        info = self.jobs.get(name)
        return info.status, info.error

    def history(self, name: str) -> list[float]:
        run_id = self.jobs.get(name).mlflow_run_id
        return tracking.metric_history(self.tracking, run_id, self.metric) if run_id else []

    def metrics(self, name: str) -> dict[str, float]:
        run_id = self.jobs.get(name).mlflow_run_id
        return tracking.latest_metrics(self.tracking, run_id) if run_id else {}

    def cancel(self, name: str, reason: str) -> None:
        self.jobs.request_cancel(name, reason)

    def lost(self, name: str) -> bool:
        """Its supervisor died without recording an outcome, the trainer with it (``killed``): not a failure."""
        return bool(JobState(self.jobs.workspace.job_dir(name)).status().get("killed"))


def trial_threads(sweep: SweepSpec, cores: int) -> dict[str, str]:
    """Give each concurrent trial its share of the cores (on Azure each trial has a node of its own);
    without it every trial's PyTorch and ONNX Runtime start one thread per core and they fight."""
    env = dict(sweep.trial.environment_variables)
    share = max(1, cores // sweep.limits.max_concurrent_trials)  # type: ignore[operator]
    env.setdefault("OMP_NUM_THREADS", str(share))
    return env


def recorded(path: Path) -> SweepOutcome:
    """The outcome a previous controller of this sweep recorded; an empty one for a new sweep."""
    if not path.exists():
        return SweepOutcome()
    data = read_json(path)
    trials = [TrialInfo.from_dict(t) for t in data.get("trials", [])]
    return SweepOutcome(trials={t.name: t for t in trials}, best=data.get("best_trial"))


def main(job_dir: Path) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    job = read_json(job_dir / "job.json")
    sweep = SweepSpec.from_dict(job["sweep"])
    jobs = LocalJobs(Workspace(Path(job["workspace"])), kill_grace_s=job.get("kill_grace_s", 10.0))
    canceled: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: canceled.append("the sweep was canceled"))
    result = job_dir / "outputs" / SWEEP_RESULT

    def record(outcome: SweepOutcome) -> None:
        write_json(result, {"name": job["name"], "objective": job["sweep"]["objective"], **outcome.to_dict()})

    controller = SweepController(
        outcome=recorded(result),
        spec=sweep, runner=LocalTrialRunner(jobs, sweep, os.environ.get("MLFLOW_RUN_ID")), name=job["name"],
        poll_s=float(job.get("poll_s", 1.0)), on_update=record, stop_requested=lambda: canceled[0] if canceled else None,
    )
    outcome = controller.run()
    print(format_leaderboard(outcome.trials.values(), sweep.objective), flush=True)
    if outcome.failed:
        print(outcome.error, file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
