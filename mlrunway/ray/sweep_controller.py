"""The Ray sweep's driver: ``python -m mlrunway.ray.sweep_controller <sweep record folder>``, a Ray job asking for no
resources, whose trials are Ray jobs of their own.

It is mlrunway's controller (:class:`mlrunway.sweep.controller.SweepController`: the same sampling, the same Bandit /
median / truncation decisions, the same budget with the admitted rates, the same record as the local backend's)
over :class:`RayTrialRunner`. It reaches the cluster as ``py_modules`` of the modules it imports
(:func:`mlrunway.ray.closure.modules`), and the Jobs API with the token the connection's owner left on the storage
(never in the job's environment). Its record, ``outputs/sweep.json``, is written after every change; a controller
that died is resubmitted by :meth:`mlrunway.ray.jobs.RayJobs.recover` and takes the sweep on from it, adopting the
trials still running.
"""

from __future__ import annotations

import json
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
from mlrunway.ray.connection import RayConnection
from mlrunway.ray.jobs import TOKEN_FILE, RayJobs, write_record
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep import record
from mlrunway.sweep.budget import BudgetWatch, admitted
from mlrunway.sweep.controller import SweepController, SweepOutcome

__all__ = ["RayTrialRunner", "main"]


class RayTrialRunner:
    """Trials as Ray jobs; metrics from the MLflow server."""

    def __init__(self, jobs: RayJobs, sweep: SweepSpec, parent_run_id: str | None) -> None:
        self.jobs = jobs
        self.trial = replace(sweep.trial, timeout=sweep.limits.trial_timeout)
        self.metric = sweep.objective.primary_metric
        self.parent_run_id = parent_run_id
        self.run_ids: dict[str, str] = {}
        self.waits: dict[str, str | None] = {}

    def start(self, name: str, params: dict[str, Any]) -> None:
        """Submit the trial, its run nested under the sweep's; one a dead controller had submitted is left as is."""
        self.jobs.submit(name, self.trial.with_inputs(**params), parent_run_id=self.parent_run_id)
        if self.trial.distribution is not None:  # until a poll finds its processes placed
            self.waits[name] = "for the cluster to place its processes"

    def poll(self, name: str) -> tuple[JobStatus, str | None]:
        info = self.jobs.get(name)
        self.waits[name] = info.properties.get("waiting") if info.status is JobStatus.QUEUED else None
        return info.status, info.error

    def waiting(self, name: str) -> str | None:
        """A distributed trial's driver waits, Queued, until the cluster places all its processes at once."""
        return self.waits.get(name)

    def _run_id(self, name: str) -> str | None:
        if name not in self.run_ids:
            run_id = self.jobs.get(name).mlflow_run_id
            if run_id is None:
                return None
            self.run_ids[name] = run_id
        return self.run_ids[name]

    def history(self, name: str) -> list[float]:
        run_id = self._run_id(name)
        return self.jobs.tracking.metric_history(run_id, self.metric) if run_id else []

    def metrics(self, name: str) -> dict[str, float]:
        run_id = self._run_id(name)
        return self.jobs.tracking.latest_metrics(run_id) if run_id else {}

    def cancel(self, name: str, reason: str) -> None:
        self.jobs.request_cancel(name, reason)

    def lost(self, name: str) -> bool:
        """Its node or the head died before its entry recorded an outcome: not a failure, it runs again."""
        return self.jobs.lost(name)


def main(record_dir: Path) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    job = json.loads((record_dir / "job.json").read_text())
    fields = json.loads((record_dir / "connection.json").read_text())
    token_file = Path(fields["storage"]) / fields["namespace"] / TOKEN_FILE
    token = token_file.read_text().strip() if token_file.exists() else None
    jobs = RayJobs(RayConnection.parse(fields, token))
    sweep = SweepSpec.from_dict(job["sweep"])
    canceled: list[str] = []

    def stopped(*_: object) -> None:
        """A cancel (its request recorded first) stops the trials; any other stop of this Ray job (someone's ``ray
        job stop``, a drained node) is a death: the trials run on, and a new controller adopts them."""
        try:
            canceled.append(str(json.loads((record_dir / "cancel.json").read_text())["reason"]))
        except (OSError, ValueError, KeyError):
            print("mlrunway: the controller was stopped, not canceled: a new one takes the sweep on", flush=True)
            os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, stopped)
    result = record_dir / "outputs" / record.FILE
    written = [""]

    def keep(outcome: SweepOutcome) -> None:  # after every poll: written when it changed
        text = json.dumps(record.content(job["name"], job["sweep"]["objective"], outcome), sort_keys=True)
        if text != written[0]:
            write_record(result, text)
            written[0] = text

    outcome = record.outcome(json.loads(result.read_text()) if result.exists() else None)
    source = None
    if sweep.sampling.type == "bayesian":
        from mlrunway.sweep.bayesian import OptunaSearch

        source = OptunaSearch(record_dir, job["name"], sweep, recorded=outcome.trials)
    poll_s = float(job.get("poll_s", 1.0))
    budget = None if sweep.budget is None else BudgetWatch(sweep.budget, jobs.usage, admitted(sweep.budget), poll_s,
                                                           exit_s=10.0)
    controller = SweepController(
        outcome=outcome, source=source, spec=sweep, runner=RayTrialRunner(jobs, sweep, os.environ.get("MLFLOW_RUN_ID")),
        name=job["name"], sleep=time.sleep, poll_s=poll_s, on_update=keep,
        stop_requested=lambda: canceled[0] if canceled else None, budget=budget)
    return record.ended(controller.run(), sweep)


if __name__ == "__main__":
    try:
        sys.exit(main(Path(sys.argv[1])))
    except NotFound as exc:
        print(f"mlrunway: {exc}", file=sys.stderr)
        sys.exit(1)
