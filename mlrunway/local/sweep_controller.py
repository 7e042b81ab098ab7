"""The local sweep's process: ``python -m mlrunway.local.sweep_controller <sweep_job_dir>``.

It runs under the sweep job's supervisor, starts each trial as a named local job whose MLflow run is nested
under the sweep's, reads the primary metric from the tracking store, and writes ``outputs/sweep.json`` after
every poll that changed it, so the record survives whatever stops it. SIGTERM (a canceled sweep) cancels the
running trials.
Started again on a sweep that has a record (``LocalJobs.recover`` after the controller died), it takes the
sweep on from that record: it adopts the trials still running, judges them, and starts the ones never started.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlrunway.backend.types import JobStatus
from mlrunway.errors import NotFound
from mlrunway.local import formats, tracking
from mlrunway.local.files import Stamp, dumps, stamp, write_text
from mlrunway.local.jobs import LocalJobs, SupervisorForks
from mlrunway.local.records import read
from mlrunway.local.supervisor import JobState
from mlrunway.local.workspace import Workspace
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep import record
from mlrunway.sweep.budget import BudgetWatch, admitted
from mlrunway.sweep.controller import SweepController, SweepOutcome

SWEEP_RESULT = record.FILE
# How often the controller looks for a change while it waits: a stat of each running trial's folder and of the
# store. Each look costs CPU the trials share (0.2 ms with 8 trials: at 20 ms, a fifth of a trial's overhead at 200
# trials, 8 at once on 2 cores); a freed slot waits half of it on average.
WATCH_S = 0.05
MIN_REFRESH_S = 0.25  # the least time between two refreshes, however often the trials log
# A running trial whose status file has not changed since it was read is read again (its supervisor's life checked)
# only this long after: a dead supervisor is seen within it, as with the sweep's 1 s poll.
REREAD_S = 1.0


class LocalTrialRunner:
    """Trials as local jobs; metrics from the workspace's MLflow store."""

    def __init__(self, jobs: LocalJobs, sweep: SweepSpec, parent_run_id: str | None) -> None:
        self.jobs = jobs
        self.trial = replace(sweep.trial, timeout=sweep.limits.trial_timeout,
                             environment_variables=trial_threads(sweep, os.cpu_count() or 1))
        self.metric = sweep.objective.primary_metric
        self.parent_run_id = parent_run_id
        self.watched: set[str] = set()  # the trials whose folders may still change
        self.seen: tuple[tuple[Stamp, ...], tuple[Stamp, ...]] = ((), ())
        self.run_ids: dict[str, str] = {}  # trial -> its MLflow run, which never changes once it has one
        self.histories: dict[str, list[float]] = {}  # run -> its primary metric, read since the last poll
        self.paths: dict[str, tuple[str, str]] = {}  # trial -> its folder and status file, stat'ed on every look
        self.polled: dict[str, tuple[Stamp, float, tuple[JobStatus, str | None]]] = {}  # trial -> last read

    def start(self, name: str, params: dict[str, Any]) -> None:
        """Submit the trial with its MLflow run already created (its supervisor then starts the script at once).
        A trial a dead controller had submitted is left as is."""
        try:
            self.jobs.get(name)
        except NotFound:
            run = tracking.start_run(self.jobs.workspace, name, self.trial.experiment_name, self.parent_run_id)
            self.jobs.submit(name, self.trial.with_inputs(**params), parent_run_id=self.parent_run_id, mlflow_run=run)
            self.run_ids[name] = run[1]
        self.watched.add(name)

    def poll(self, name: str) -> tuple[JobStatus, str | None]:
        """The trial's status, as :meth:`LocalJobs.get` reconciles it; a running trial whose status file is the
        same file as at its last read (inode, mtime, size), read less than REREAD_S ago, as it was then."""
        self.histories = {}  # a history is read after its trial's status, never before: an ended trial's is whole
        key, now = stamp(self._paths(name)[1]), time.monotonic()
        if (last := self.polled.get(name)) is not None and key is not None and last[0] == key \
                and now - last[1] < REREAD_S:
            return last[2]
        info = self.jobs.get(name)
        if info.status.is_terminal():
            self.watched.discard(name)
            self.polled.pop(name, None)
        else:
            self.watched.add(name)  # adopted from a dead controller's record
            self.polled[name] = (key, now, (info.status, info.error))  # the key read before: a change since is seen
        return info.status, info.error

    def _paths(self, name: str) -> tuple[str, str]:
        if name not in self.paths:
            folder = self.jobs.workspace.job_dir(name)
            self.paths[name] = (os.fspath(folder), os.fspath(JobState(folder).status_file))
        return self.paths[name]

    def wait_for_change(self, seconds: float) -> None:
        """The controller's sleep: up to ``seconds``, over as soon as a trial's status changes (its folder
        does: a freed slot is refilled when its trial ends, not on the next poll), or a trial logs a metric (the
        tracking store's files change), the latter never sooner than MIN_REFRESH_S after the last wait ended,
        however often the trials log. So a decision lands a fraction of a second after the value it needs."""
        start = time.monotonic()
        now = self.seen
        while (left := start + seconds - time.monotonic()) > 0:
            time.sleep(min(WATCH_S, left))
            now = self._signature()
            if now[0] != self.seen[0] or (now[1] != self.seen[1] and time.monotonic() - start >= MIN_REFRESH_S):
                break
        self.seen = now

    def _signature(self) -> tuple[tuple[Stamp, ...], tuple[Stamp, ...]]:
        """A stat of each watched trial's folder and of the store's files (strings, not Paths: this runs 20 times
        a second, and building the Paths was most of its cost)."""
        root = os.fspath(self.jobs.workspace.root)
        folders = tuple(stamp(self._paths(name)[0]) for name in sorted(self.watched))
        return folders, (stamp(f"{root}/mlflow.db"), stamp(f"{root}/mlflow.db-wal"))

    def history(self, name: str) -> list[float]:
        """All the trial logged of the primary metric; the first call after a poll reads every watched trial's."""
        if (run_id := self._run_id(name)) is None:
            return []
        if run_id not in self.histories:
            runs = {run_id, *(self.run_ids[n] for n in self.watched if n in self.run_ids)}
            self.histories.update(tracking.metric_histories(self.jobs.workspace, runs, self.metric))
        return self.histories[run_id]

    def metrics(self, name: str) -> dict[str, float]:
        run_id = self._run_id(name)
        return tracking.latest_metrics(self.jobs.workspace, run_id) if run_id else {}

    def _run_id(self, name: str) -> str | None:
        if name not in self.run_ids and (run_id := self.jobs.get(name).mlflow_run_id) is not None:
            self.run_ids[name] = run_id  # an adopted trial's, once its supervisor recorded it
        return self.run_ids.get(name)

    def cancel(self, name: str, reason: str) -> None:
        self.jobs.request_cancel(name, reason)

    def waiting(self, name: str) -> str | None:
        """Nothing: a local trial starts as soon as its supervisor does."""
        return None

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
    # never taken as a sweep with no trials: a damaged record raises
    return record.outcome(read(path, "restore it, or cancel the sweep and run it again") if path.exists() else None)


def main(job_dir: Path) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    job = JobState(job_dir).job()
    jobs = LocalJobs(Workspace(Path(job["workspace"])), kill_grace_s=job.get("kill_grace_s", 10.0))
    jobs.forks = SupervisorForks(job_dir)
    jobs.forks.start()
    try:
        return _control(job_dir, job, jobs)
    finally:
        jobs.forks.close()


def _control(job_dir: Path, job: dict[str, Any], jobs: LocalJobs) -> int:
    sweep = SweepSpec.from_dict(job["sweep"])
    canceled: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: canceled.append("the sweep was canceled"))
    result = job_dir / "outputs" / SWEEP_RESULT

    written = [""]

    def keep(outcome: SweepOutcome) -> None:  # after every poll: written when it changed
        text = dumps(formats.stamped(record.content(job["name"], job["sweep"]["objective"], outcome)))
        if text != written[0]:
            write_text(result, text)
            written[0] = text

    runner = LocalTrialRunner(jobs, sweep, os.environ.get("MLFLOW_RUN_ID"))
    outcome = recorded(result)
    source = None
    if sweep.sampling.type == "bayesian":
        from mlrunway.sweep.bayesian import OptunaSearch

        source = OptunaSearch(jobs.workspace.root, job["name"], sweep, recorded=outcome.trials)
    poll_s = float(job.get("poll_s", 1.0))
    budget = None if sweep.budget is None else BudgetWatch(sweep.budget, jobs.usage, admitted(sweep.budget), poll_s,
                                                           exit_s=jobs.kill_grace_s)
    controller = SweepController(
        outcome=outcome, source=source, spec=sweep, runner=runner, name=job["name"], sleep=runner.wait_for_change,
        poll_s=poll_s, on_update=keep, stop_requested=lambda: canceled[0] if canceled else None, budget=budget,
    )
    return record.ended(controller.run(), sweep)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
