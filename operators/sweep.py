"""SweepOperator: the hyperparameter sweep with early termination, its leaderboard in the task log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from airflow.sdk import Context

from mlrunway import lineage
from mlrunway.airflow.triggers import SweepTrigger
from mlrunway.backend.protocol import Metered, StopRecords
from mlrunway.backend.types import JobInfo
from mlrunway.ledger.budget import refusals, spent_before, sweep_budget
from mlrunway.ledger.cost import rates_for
from mlrunway.operators._job import MlrunwayJobOperator
from mlrunway.pipeline import require_completed
from mlrunway.specs import CommandJobSpec, SweepSpec, vocabulary
from mlrunway.specs.sweep import SweepBudget
from mlrunway.sweep.attempts import carried_trials, spec_for_attempt, sweep_result
from mlrunway.sweep.budget import enforce
from mlrunway.sweep.leaderboard import format_leaderboard
from mlrunway.sweep.progress import SaidOnce, TrialWatch


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
    :param budget: the run's budget (:class:`~mlrunway.ledger.budget.Budget`; None: the connection's): the sweep
        may spend it less what Train (and earlier attempts' trials) spent and its reserve; at that, it stops and
        ends with what it completed, the decision recorded.
    """

    link_kind = "sweep"
    trigger_class = SweepTrigger  # waits in the triggerer and logs the trials' progress there
    _resumed = False  # this process resumed the task after a deferral
    _watched: SweepBudget | None = None  # what the watcher holds the sweep to, where the service starts the trials
    template_fields = (*MlrunwayJobOperator.template_fields, "trial", "search_space", "objective",
                       "sampling_algorithm", "seed", "limits", "early_termination", "budget")

    def __init__(self, *, trial: dict[str, Any] | CommandJobSpec, search_space: dict[str, Any],
                 objective: dict[str, Any], sampling_algorithm: str | dict[str, Any] = "random", seed: int | str | None = None,
                 limits: dict[str, Any] | None = None, early_termination: dict[str, Any] | None = None,
                 max_wait_s: float = 7200, budget: Mapping[str, Any] | str | None = None, **kwargs: Any) -> None:
        super().__init__(max_wait_s=max_wait_s, **kwargs)
        self.budget = budget
        self._allowances: dict[str, SweepBudget | None] = {}
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
        if (allowed := self.allowance(context, name)) is not None:
            refusals(self.backend, self.run_budget, {"the sweep's trial": spec.trial})
            spec = replace(spec, budget=allowed)  # a controller of the backend's own holds the sweep to it
        info = self.backend.jobs.submit_sweep(name, spec)
        self.log.info("Sweep %s submitted: %s trials, %s at a time%s%s", name, spec.limits.max_total_trials,
                      spec.limits.max_concurrent_trials,
                      f"; {len(carried)} completed trials carried over from earlier attempts" if carried else "",
                      f"; it may spend {allowed.amount(allowed.limit)} ({allowed.basis})" if allowed else "")
        return info

    def allowance(self, context: Context, name: str) -> SweepBudget | None:
        """What sweep attempt ``name`` may spend: the run's budget less its reserve and what the run's jobs spent
        before it (Train, earlier attempts' trials), the same figures on a re-attach; None without a budget."""
        if name not in self._allowances:
            budget = self.run_budget
            jobs = self.backend.jobs
            planned = [jobs.planned_usage(self.spec(self.data_interval(context)).trial)] \
                if budget is not None and isinstance(jobs, Metered) else []
            self._allowances[name] = None if budget is None else sweep_budget(
                budget, rates_for(self.backend, planned), spent_before(self.backend, self.names(context), name),
                planned)
        return self._allowances[name]

    def submit_job(self, context: Context) -> str:
        name = super().submit_job(context)
        self._watched = self.allowance(context, name) if isinstance(self.backend.jobs, StopRecords) else None
        return name

    def trigger(self, name: str, deadline: float) -> SweepTrigger:
        """The sweep's watcher; where the service starts the trials, it cancels the sweep at the budget."""
        return SweepTrigger(self.backend_conn_id, name, self.poll_s, deadline,
                            budget=self._watched.to_dict() if self._watched is not None else None)

    def progress(self, name: str) -> TrialReporter:
        return TrialReporter(self, name, ends_only=self._resumed, budget=self._watched)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        self._resumed = True  # the trigger logged the trials' progress into this task's log as it waited
        return super().execute_complete(context, event)

    def finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        result = sweep_result(self.backend.jobs, info.name)
        self.log.info("Leaderboard of %s:\n%s", info.name, format_leaderboard(result.trials, result.objective))
        if info.budget_stop is None:  # a sweep its budget stopped ended with what it completed: not a failure
            require_completed(info, "sweep")
        if result.stopped_because:
            self.log.info("Sweep %s: %s", info.name, result.stopped_because)
        stopped = [t.name for t in result.trials if t.stopped_early]
        return {"sweep_name": info.name, "trials": len(result.trials), "stopped_early": stopped,
                "best_trial": result.best_trial, "epochs": sum(len(t.history) for t in result.trials),
                "carried_over": list(result.carried_over), "stopped_because": result.stopped_because}

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

    def __init__(self, operator: SweepOperator, name: str, ends_only: bool = False,
                 budget: SweepBudget | None = None) -> None:
        self.operator, self.name, self.ends_only, self.budget = operator, name, ends_only, budget
        self.watch, self.said = TrialWatch(), SaidOnce()

    def __call__(self, info: Any) -> None:
        try:
            events = self.watch.events(self.operator.backend.jobs.sweep_result(self.name))
        except Exception as exc:  # noqa: BLE001 - progress is a courtesy (as the trigger's): the task goes on
            self.said.warn(self.operator.log, "progress", "the sweep's progress could not be read (%s); going on "
                           "regardless", exc)
        else:
            for event in events:
                if not self.ends_only or event.kind == "ended":
                    self.operator.log.info("%s", event.text)
        if self.budget is not None and not info.status.is_terminal():  # the wait in the worker is the watcher
            verdict = enforce(self.operator.backend, self.name, self.budget)  # Unavailable: the wait reads again
            if verdict.unpriced is not None:
                self.said.warn(self.operator.log, "unpriced", "Sweep %s: its budget was not looked at: %s", self.name,
                               verdict.unpriced)
            else:
                self.said.over("unpriced")
