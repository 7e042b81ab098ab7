"""Bayesian sampling: each trial's hyperparameters are asked of an Optuna study as earlier
trials end, and each trial's score is told to it when it ends (Optuna's ask-and-tell interface).

The optimizer is Optuna's TPE sampler (multivariate, seeded with the sweep's seed), the library's default and
its best-kept: Azure ML documents its bayesian sampling only as Bayesian optimization, so the two pick different
points, under the same rules (choice, uniform and quniform only, no early termination; ``SweepSpec`` enforces
them on both backends). The study lives in ``optuna.db`` in the folder the controller is given (SQLite, Optuna's
RDB storage; the local backend gives its workspace, and not its ``mlflow.db``, whose ``alembic_version`` table
Optuna's migrations would share), one study per sweep, so a controller started again (the local backend's
``recover``, a retry) takes it on: trials it had told stay learnt, a running trial
adopted from the record is told when it ends, and a trial asked for but not in the record (the controller died
between asking and writing its record, perhaps after submitting the trial's job) runs with the parameters it was
asked with, not with a second ask.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlrunway.backend.types import JobStatus, TrialInfo
from mlrunway.locks import locked
from mlrunway.specs.search_space import Choice, QUniform, SearchExpression, Uniform
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep.controller import trial_index

__all__ = ["OptunaSearch"]

log = logging.getLogger(__name__)


class OptunaSearch:
    """The sweep's :class:`~mlrunway.sweep.controller.ParamSource` for ``sampling_algorithm="bayesian"``.

    :param folder: where the study is kept (``optuna.db``), a folder that outlives the controller.
    :param recorded: the names of the trials the sweep's record holds already (a controller taking a study on).
    """

    def __init__(self, folder: Path, sweep_name: str, spec: SweepSpec, *, recorded: Iterable[str] = ()) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.spec = spec
        self.distributions = {name: _distribution(expr) for name, expr in spec.search_space.items()}
        storage = optuna.storages.RDBStorage(f"sqlite:///{folder / 'optuna.db'}",
                                             engine_kwargs={"connect_args": {"timeout": 60}})
        with locked(folder / ".optuna.lock"):  # two sweeps must not create the schema at once
            self.study = optuna.create_study(study_name=sweep_name, storage=storage, load_if_exists=True,
                                             direction=spec.objective.goal)
        # The sampler's generator starts again with each controller: seeded as the sweep says at the start, and
        # with the trials already asked mixed in when a controller takes a study on (the seed alone would draw
        # the first trials' points again while TPE still samples at random).
        asked = len(self.study.trials)
        seed = spec.seed if spec.seed is None or not asked else (spec.seed * 1_000_003 + asked) % 2**32
        self.study.sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True)
        started = {trial_index(name) for name in recorded}
        # Asked by a controller that died before its record named the trial: index -> the asked trial; and asked
        # by one that died between the ask and writing the trial's index (two writes): the next index takes it.
        running = self._running()
        self.unrecorded = {t.user_attrs["index"]: t for t in running
                           if "index" in t.user_attrs and t.user_attrs["index"] not in started}
        self.unindexed = [t for t in running if "index" not in t.user_attrs]

    def params(self, index: int) -> dict[str, Any]:
        if (asked := self.unrecorded.pop(index, None)) is not None:
            log.info("Optuna trial %d was asked for trial %d before the controller died: its parameters stand",
                     asked.number, index)
        else:
            asked = self._unindexed(index)
        if asked is None:
            asked = self.study.ask(self.distributions)
            asked.set_user_attr("index", index)
        return {name: _value(self.spec.search_space[name], asked.params[name]) for name in self.distributions}

    def _unindexed(self, index: int) -> Any:
        """A trial asked by a controller that died before it named its trial, now trial ``index``; None when there
        is none. One killed inside ``ask()`` left a trial with only some parameters drawn (Optuna stores them one by
        one): no trial ran with it, so it is told failed and the next one is looked at."""
        from optuna.trial import TrialState

        while self.unindexed:
            asked = self.unindexed.pop(0)
            if set(asked.params) >= set(self.distributions):
                self.study._storage.set_trial_user_attr(asked._trial_id, "index", index)  # a FrozenTrial has no setter
                log.info("Optuna trial %d was asked before the controller died, its trial unnamed: it is trial %d",
                         asked.number, index)
                return asked
            self.study.tell(asked.number, state=TrialState.FAIL)
            log.info("Optuna trial %d was cut short inside ask() (parameters %s of %s): told failed", asked.number,
                     sorted(asked.params), sorted(self.distributions))
        return None

    def ended(self, trial: TrialInfo, score: float | None) -> None:
        """Tell the study how trial ``trial`` ended: its score if it completed with one, failed otherwise."""
        from optuna.trial import TrialState

        index = trial_index(trial.name)
        for asked in self._running():
            if asked.user_attrs.get("index") == index:
                if trial.status is JobStatus.COMPLETED and score is not None:
                    self.study.tell(asked.number, score)
                else:
                    self.study.tell(asked.number, state=TrialState.FAIL)
                return

    def _running(self) -> list[Any]:
        from optuna.trial import TrialState

        return list(self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def _distribution(expr: SearchExpression) -> Any:
    """Choice by index (any JSON value may be a choice), uniform as a float range, quniform as the whole
    multiples of q that round(uniform(min, max) / q) can give."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(expr, Choice):
        return CategoricalDistribution(list(range(len(expr.values))))
    if isinstance(expr, Uniform):
        return FloatDistribution(expr.min_value, expr.max_value)
    if isinstance(expr, QUniform):
        return IntDistribution(round(expr.min_value / expr.q), round(expr.max_value / expr.q))
    raise ValueError(f"bayesian sampling takes choice, uniform and quniform, not {expr.type}")


def _value(expr: SearchExpression, raw: Any) -> Any:
    if isinstance(expr, Choice):
        return expr.values[int(raw)]
    if isinstance(expr, QUniform):
        return round(int(raw) * expr.q, 12)
    return float(raw)
