"""SweepOperator: the hyperparameter sweep with early termination, its leaderboard in the task log."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway import lineage
from mlrunway.airflow.triggers import SweepTrigger
from mlrunway.backend.types import JobInfo
from mlrunway.operators._job import MlrunwayJobOperator
from mlrunway.pipeline import require_completed
from mlrunway.specs import CommandJobSpec, SweepSpec, vocabulary
from mlrunway.sweep.attempts import carried_trials, spec_for_attempt, sweep_result
from mlrunway.sweep.leaderboard import format_leaderboard
from mlrunway.sweep.progress import TrialWatch


def sweep_spec(*, trial: Any, search_space: Any, objective: Any, sampling_algorithm: Any = "random",
               seed: Any = None, limits: Any = None, early_termination: Any = None,
               data_interval: tuple[str, str] | None = None) -> SweepSpec:
    """The sweep the operator's (rendered) arguments describe, in azure-ai-ml's words; a pure function, so a
    preflight builds it from a run's params before any job starts."""
    return SweepSpec(
        trial=vocabulary.command_job(trial, "trial").with_data_interval(data_interval),
        search_space=vocabulary.search_space(search_space), objective=vocabulary.objective(objective),
        sampling_algorithm=sampling_algorithm, seed=None if seed in (None, "") else int(seed),
        limits=vocabulary.limits(limits), early_termination=vocabulary.early_termination(early_termination),
    )


class SweepOperator(MlrunwayJobOperator):
    """Run a hyperparameter sweep over the team's own job, with early termination, and wait for it.

    :param trial: the job each trial runs, in the words of ``azure.ai.ml.command`` (the dict a DAG hands the
        Train task too), or a ``CommandJobSpec``; each search-space name must reach its command as
        ``${{inputs.<name>}}``.
    :param search_space: ``{"lr": {"type": "loguniform", "min_value": -7, "max_value": -2}, "batch_size":
        {"type": "choice", "values": [32, 64]}}``: choice, uniform, loguniform, quniform, qloguniform, normal,
        lognormal, randint, as ``azure.ai.ml.sweep``.
    :param objective: ``{"primary_metric": "val_loss", "goal": "minimize"}``; the script logs the metric once
        per epoch (one interval).
    :param sampling_algorithm: ``random``, ``grid`` (choice only) or ``bayesian`` (Azure ML only); or
        azure-ai-ml's object form, ``{"type": "random", "rule": "sobol", "seed": 999, "logbase": "e"}``.
    :param seed: random sampling's seed (or the object form's).
    :param limits: ``max_total_trials``, ``max_concurrent_trials``, ``timeout``, ``trial_timeout`` (seconds).
    :param early_termination: ``{"type": "bandit", "slack_factor": 0.15, "evaluation_interval": 1,
        "delay_evaluation": 10}``, ``median_stopping``, ``truncation_selection``, or None.
    :param max_wait_s: cancel the sweep and fail past this many seconds.
    :param deferrable: wait in the triggerer (default) or, with False, in the worker.
    """

    link_kind = "sweep"
    trigger_class = SweepTrigger  # waits in the triggerer and logs the trials' progress there
    _resumed = False  # this process resumed the task after a deferral
    template_fields = (*MlrunwayJobOperator.template_fields, "trial", "search_space", "objective",
                       "sampling_algorithm", "seed", "limits", "early_termination")

    def __init__(self, *, trial: dict[str, Any] | CommandJobSpec, search_space: dict[str, Any],
                 objective: dict[str, Any], sampling_algorithm: str | dict[str, Any] = "random", seed: int | str | None = None,
                 limits: dict[str, Any] | None = None, early_termination: dict[str, Any] | None = None,
                 max_wait_s: float = 7200, **kwargs: Any) -> None:
        super().__init__(max_wait_s=max_wait_s, **kwargs)
        self.trial, self.search_space, self.objective = trial, search_space, objective
        self.sampling_algorithm, self.seed = sampling_algorithm, seed
        self.limits, self.early_termination = limits, early_termination

    def spec(self, data_interval: tuple[str, str] | None = None) -> SweepSpec:
        return sweep_spec(trial=self.trial, search_space=self.search_space, objective=self.objective,
                          sampling_algorithm=self.sampling_algorithm, seed=self.seed, limits=self.limits,
                          early_termination=self.early_termination, data_interval=data_interval)

    def job_name(self, context: Context) -> str:
        return self.names(context).sweep

    def submit(self, name: str, context: Context) -> JobInfo:
        """Submit the sweep as ``name``; a later attempt carries over the trials earlier ones completed."""
        carried = carried_trials(self.backend.jobs, name)
        spec = spec_for_attempt(self.spec(self.data_interval(context)), name, carried)
        info = self.backend.jobs.submit_sweep(name, spec)
        self.log.info("Sweep %s submitted: %s trials, %s at a time%s", name, spec.limits.max_total_trials,
                      spec.limits.max_concurrent_trials,
                      f"; {len(carried)} completed trials carried over from earlier attempts" if carried else "")
        return info

    def progress(self, name: str) -> TrialReporter:
        return TrialReporter(self, name, ends_only=self._resumed)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        self._resumed = True  # the trigger logged the trials' progress into this task's log as it waited
        return super().execute_complete(context, event)

    def finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        result = sweep_result(self.backend.jobs, info.name)
        self.log.info("Leaderboard of %s:\n%s", info.name, format_leaderboard(result.trials, result.objective))
        require_completed(info, "sweep")
        stopped = [t.name for t in result.trials if t.stopped_early]
        return {"sweep_name": info.name, "trials": len(result.trials), "stopped_early": stopped,
                "best_trial": result.best_trial, "epochs": sum(len(t.history) for t in result.trials),
                "carried_over": list(result.carried_over)}

    # -- OpenLineage -------------------------------------------------------------------------------------
    def lineage_inputs(self) -> list[lineage.LineageDataset]:
        """The trials' data inputs and code snapshot (versioned by its hash)."""
        return lineage.command_job_inputs(self.spec().trial, self.lineage_namespace)

    def lineage_outputs(self, result: dict[str, Any]) -> list[lineage.LineageDataset]:
        """The sweep's run (the attempt that ran); pick-best reads it."""
        return [lineage.job(self.lineage_namespace, result["sweep_name"])] if result.get("sweep_name") else []


class TrialReporter:
    """The sweep's progress in the task's log, one line per trial event (:class:`~mlrunway.sweep.progress.
    TrialWatch`): on every poll of a task that waits in its worker. A task resumed after a deferral logs only each
    trial's end: the trigger logged the rest as it happened."""

    def __init__(self, operator: SweepOperator, name: str, ends_only: bool = False) -> None:
        self.operator, self.name, self.ends_only = operator, name, ends_only
        self.watch = TrialWatch()

    def __call__(self, _info: Any) -> None:
        for event in self.watch.events(self.operator.backend.jobs.sweep_result(self.name)):
            if not self.ends_only or event.kind == "ended":
                self.operator.log.info("%s", event.text)
