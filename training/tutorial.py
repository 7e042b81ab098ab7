"""The example's job and sweep as mlrunway specs, for the tests and benchmarks: Azure ML's PyTorch tutorial,
with its faults fixed (see AZURE_CONTRACT.md). Nothing of the package reads this: the DAG builds its jobs from
its params and its own command.

learning_rate and momentum reach the command line; random sampling; ``best_val_acc`` maximized;
``BanditPolicy(slack_factor=0.15, evaluation_interval=1, delay_evaluation=10)``. train.py logs the metric once
per epoch, so one interval is one epoch and the policy first acts after epoch 10.
"""

from __future__ import annotations

from mlrunway.early_termination import EarlyTerminationPolicy
from mlrunway.specs import (
    BanditPolicy,
    CommandJobSpec,
    Input,
    LogUniform,
    Objective,
    SweepLimits,
    SweepSpec,
    Uniform,
)

TUTORIAL_BANDIT = BanditPolicy(slack_factor=0.15, evaluation_interval=1, delay_evaluation=10)
TRAIN_COMMAND = (
    "python train.py --data-dir ${{inputs.data}} --num-epochs ${{inputs.num_epochs}} "
    "--learning-rate ${{inputs.learning_rate}} --momentum ${{inputs.momentum}}"
)


def train_job(code: str, data: str, *, num_epochs: int = 20, learning_rate: float = 0.01, momentum: float = 0.9,
              experiment_name: str = "mlrunway", data_interval: tuple[str, str] | None = None) -> CommandJobSpec:
    """The tutorial's command job: train.py on an ImageFolder dataset.

    ``data_interval`` (ISO start and end, an Airflow run's data interval) reaches the script as the environment
    variables ``MLRUNWAY_DATA_INTERVAL_START`` and ``_END`` on both backends, so a backfill's run can train on
    the data of its own interval while a script that ignores them runs unchanged.
    """
    env = {} if data_interval is None else {"MLRUNWAY_DATA_INTERVAL_START": data_interval[0],
                                            "MLRUNWAY_DATA_INTERVAL_END": data_interval[1]}
    return CommandJobSpec(
        code=code, command=TRAIN_COMMAND, experiment_name=experiment_name, environment_variables=env,
        inputs={"data": Input(path=data), "num_epochs": num_epochs, "learning_rate": learning_rate, "momentum": momentum},
    )


def tutorial_sweep(trial: CommandJobSpec, *, max_total_trials: int = 8, max_concurrent_trials: int = 2,
                   seed: int | None = 0, early_termination: EarlyTerminationPolicy | None = TUTORIAL_BANDIT,
                   lr_range: tuple[float, float] = (1e-3, 1e-1), momentum_range: tuple[float, float] = (0.5, 0.95)) -> SweepSpec:
    """The tutorial's sweep over ``trial``; ``early_termination=None`` runs every trial to the end."""
    return SweepSpec(
        trial=trial,
        search_space={"learning_rate": LogUniform.from_range(*lr_range),
                      "momentum": Uniform(min_value=momentum_range[0], max_value=momentum_range[1])},
        objective=Objective(primary_metric="best_val_acc", goal="maximize"),
        sampling_algorithm="random", seed=seed,
        limits=SweepLimits(max_total_trials=max_total_trials, max_concurrent_trials=max_concurrent_trials),
        early_termination=early_termination,
    )

