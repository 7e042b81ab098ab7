"""SweepOperator: the hyperparameter sweep with early termination, its leaderboard in the task log."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway.backend.types import JobInfo
from mlrunway.pipeline import require_completed
from mlrunway.specs import BanditPolicy, Choice, Objective, SweepLimits, SweepSpec, Uniform
from mlrunway.specs.search_space import LogUniform, SearchExpression
from mlrunway.sweep.attempts import carried_trials, spec_for_attempt, sweep_result
from mlrunway.sweep.leaderboard import format_leaderboard, trial_score
from mlrunway.sweep.presets import train_job
from operators._job import MlrunwayJobOperator


def search_space(sampling: str, lr: tuple[float, float], momentum: tuple[float, float]) -> dict[str, SearchExpression]:
    """Random: log-uniform learning rate, uniform momentum. Grid: 3 values of each, evenly spread."""
    if sampling == "grid":
        def spread(low: float, high: float) -> Choice:
            return Choice(values=tuple(round(low + (high - low) * i / 2, 6) for i in range(3)))

        return {"learning_rate": spread(*lr), "momentum": spread(*momentum)}
    return {"learning_rate": LogUniform.from_range(*lr), "momentum": Uniform(min_value=momentum[0], max_value=momentum[1])}


def sweep_spec(*, code_dir: str, data_dir: str, num_epochs: Any, learning_rate_range: Any, momentum_range: Any,
               sampling_algorithm: Any, max_total_trials: Any, max_concurrent_trials: Any, slack_factor: Any,
               evaluation_interval: Any, delay_evaluation: Any, primary_metric: Any, goal: Any, seed: Any,
               experiment_name: str = "mlrunway", data_interval: tuple[str, str] | None = None) -> SweepSpec:
    """The sweep the operator's arguments (rendered templates: strings or numbers) describe; a pure function,
    so preflight checks a run's params with it before any job starts."""
    lr = (float(learning_rate_range[0]), float(learning_rate_range[1]))
    momentum = (float(momentum_range[0]), float(momentum_range[1]))
    return SweepSpec(
        trial=train_job(code_dir, data_dir, num_epochs=int(num_epochs), experiment_name=experiment_name,
                        data_interval=data_interval),
        search_space=search_space(str(sampling_algorithm), lr, momentum),
        objective=Objective(primary_metric=primary_metric, goal=goal),
        sampling_algorithm=sampling_algorithm, seed=int(seed),
        limits=SweepLimits(max_total_trials=int(max_total_trials), max_concurrent_trials=int(max_concurrent_trials)),
        early_termination=BanditPolicy(slack_factor=float(slack_factor), evaluation_interval=int(evaluation_interval),
                                       delay_evaluation=int(delay_evaluation)),
    )


class SweepOperator(MlrunwayJobOperator):
    """Run a sweep over learning rate and momentum with a Bandit policy and wait for it.

    :param code_dir: folder with the training script.
    :param data_dir: ImageFolder data.
    :param num_epochs: epochs per trial (one interval per epoch).
    :param learning_rate_range: (min, max), sampled log-uniformly.
    :param momentum_range: (min, max), sampled uniformly.
    :param sampling_algorithm: ``random`` or ``grid``.
    :param max_total_trials: trials at most.
    :param max_concurrent_trials: trials at once.
    :param slack_factor: Bandit slack factor.
    :param evaluation_interval: Bandit evaluation interval, in epochs.
    :param delay_evaluation: epochs before the first evaluation.
    :param primary_metric: metric the script logs once per epoch.
    :param goal: ``maximize`` or ``minimize``.
    :param seed: random sampling seed.
    :param max_wait_s: cancel the sweep and fail past this many seconds.
    :param deferrable: wait in the triggerer (default) or, with False, in the worker.
    """

    link_kind = "sweep"
    template_fields = (*MlrunwayJobOperator.template_fields, "code_dir", "data_dir", "num_epochs",
                       "learning_rate_range", "momentum_range", "sampling_algorithm", "max_total_trials",
                       "max_concurrent_trials", "slack_factor", "evaluation_interval", "delay_evaluation",
                       "primary_metric", "goal", "seed")

    def __init__(self, *, code_dir: str, data_dir: str, num_epochs: int | str = 20,
                 learning_rate_range: Any = (1e-3, 1e-1), momentum_range: Any = (0.5, 0.95),
                 sampling_algorithm: str = "random", max_total_trials: int | str = 8,
                 max_concurrent_trials: int | str = 2, slack_factor: float | str = 0.15,
                 evaluation_interval: int | str = 1, delay_evaluation: int | str = 10,
                 primary_metric: str = "best_val_acc", goal: str = "maximize", seed: int | str = 0,
                 experiment_name: str = "mlrunway", max_wait_s: float = 7200, **kwargs: Any) -> None:
        super().__init__(max_wait_s=max_wait_s, **kwargs)
        self.code_dir, self.data_dir, self.num_epochs = code_dir, data_dir, num_epochs
        self.learning_rate_range, self.momentum_range = learning_rate_range, momentum_range
        self.sampling_algorithm, self.seed = sampling_algorithm, seed
        self.max_total_trials, self.max_concurrent_trials = max_total_trials, max_concurrent_trials
        self.slack_factor, self.evaluation_interval, self.delay_evaluation = slack_factor, evaluation_interval, delay_evaluation
        self.primary_metric, self.goal, self.experiment_name = primary_metric, goal, experiment_name

    def spec(self, data_interval: tuple[str, str] | None = None) -> SweepSpec:
        return sweep_spec(
            code_dir=self.code_dir, data_dir=self.data_dir, num_epochs=self.num_epochs,
            learning_rate_range=self.learning_rate_range, momentum_range=self.momentum_range,
            sampling_algorithm=self.sampling_algorithm, max_total_trials=self.max_total_trials,
            max_concurrent_trials=self.max_concurrent_trials, slack_factor=self.slack_factor,
            evaluation_interval=self.evaluation_interval, delay_evaluation=self.delay_evaluation,
            primary_metric=self.primary_metric, goal=self.goal, seed=self.seed, experiment_name=self.experiment_name,
            data_interval=data_interval,
        )

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
        return TrialReporter(self, name, self.spec().objective)

    def finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        result = sweep_result(self.backend.jobs, info.name)
        self.log.info("Leaderboard of %s:\n%s", info.name, format_leaderboard(result.trials, result.objective))
        require_completed(info, "sweep")
        stopped = [t.name for t in result.trials if t.early_termination]
        return {"sweep_name": info.name, "trials": len(result.trials), "stopped_early": stopped,
                "best_trial": result.best_trial, "epochs": sum(len(t.history) for t in result.trials),
                "carried_over": list(result.carried_over)}


class TrialReporter:
    """Log each trial once when it ends: its status, metric, epochs and, for early terminations, why."""

    def __init__(self, operator: SweepOperator, name: str, objective: Objective) -> None:
        self.operator, self.name, self.objective = operator, name, objective
        self.reported: set[str] = set()

    def __call__(self, _info: Any) -> None:
        for trial in self.operator.backend.jobs.sweep_result(self.name).trials:
            if trial.status.is_terminal() and trial.name not in self.reported:
                self.reported.add(trial.name)
                why = trial.early_termination["reason"] if trial.early_termination else trial.error or ""
                score = trial_score(trial, self.objective)
                best = "-" if score is None else f"{score:.4f}"
                self.operator.log.info("Trial %s %s after %d epochs, best %s %s", trial.name, trial.status.value,
                                       len(trial.history), best, f"({why.splitlines()[0]})" if why else "")
