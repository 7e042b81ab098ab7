"""A budget a run cannot exceed: the most its jobs may cost (``max_cost``, in the rate card's currency) or the
compute they may take (``max_compute_hours``: node-hours on Azure ML, core-hours locally: wall time × processes).

Declared once (:mod:`mlrunway.settings`): the builder's ``budget=``, the DAG's ``budget`` Param, the connection's
``budget`` (the default a run without one of its own gets, which the Airflow hook reads). Each task resolves the
run's budget once (:func:`budget_of`) and hands it down. What it covers: the run's jobs (train, the trials,
export, the smoke test's reference), priced as :mod:`mlrunway.ledger.cost` prices them; endpoint hours are
reported, not budgeted. The sweep may spend the budget less what Train spent and ``reserve`` (a share kept for
export and the reference, which a budget never stops: a stopped export delivers nothing); what they spend past it
is stated, an overshoot. Where it holds:

- before any job, :func:`refusals`: a budget below one node-minute at its rate, or a ``max_cost`` with a job whose
  rate is unknown, is refused naming ``budget``;
- after Train, :func:`train_verdict`: a Train job that left the sweep nothing fails Train, before any trial;
- during the sweep, :class:`~mlrunway.specs.sweep.SweepBudget` (what the sweep may spend, handed to it): locally the
  sweep's controller stops starting trials before the next would pass it and cancels the running ones at it; on
  Azure ML the sweep's watcher cancels the sweep at it, the decision recorded on the sweep first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.backend.naming import RunNames
from mlrunway.backend.protocol import Backend, Metered
from mlrunway.backend.rates import RateCard, rate_key
from mlrunway.backend.types import Usage
from mlrunway.errors import SpecError
from mlrunway.ledger.cost import CORE_HOUR, NODE_HOUR, Cost, attempt_usages, missing_rate, rates_for, run_cost
from mlrunway.settings import NOT_A_FLAG, SettingsError, limit_setting, parse, setting
from mlrunway.specs.job import CommandJobSpec
from mlrunway.specs.sweep import SweepBudget

__all__ = ["BUDGET_STOP_TAG", "Budget", "against_budget", "budget_of", "refusals", "spend", "spent_before", "sweep_budget",
           "train_verdict"]

FIELD = "budget"
BUDGET_STOP_TAG = "mlrunway.budget_stop"  # where a sweep stopped by its budget records the decision (Azure ML)


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class Budget:
    """The most a run's jobs may spend: one of ``max_cost`` and ``max_compute_hours``, and the ``reserve`` kept for
    export and the smoke test's reference."""

    max_cost: Annotated[float | None, NOT_A_FLAG] = limit_setting(
        None,
        description="The most the run's jobs (train, trials, export, reference) may cost, in the rate card's "
                    "currency, as estimated: each job's run time × its nodes at its rate (the connection's rates, "
                    "or local_rate: every job's must be known). Not counted: node allocation, image pulls and idle "
                    "nodes before a cluster scales down, which Azure ML bills too.",
        problem="{value!r} is not an amount above 0", fix="give the most the run may spend, e.g. 5")
    max_compute_hours: Annotated[float | None, NOT_A_FLAG] = limit_setting(
        None,
        description="The most compute the run's jobs may take: node-hours on Azure ML (hours × nodes), core-hours "
                    "locally (wall time × processes).",
        problem="{value!r} is not a number of hours above 0", fix="give the most compute the run may take, e.g. 2")
    reserve: Annotated[float, NOT_A_FLAG] = setting(
        0.1, ge=0, lt=1, allow_inf_nan=False,
        description="The share of the budget the sweep leaves for the export job and the smoke test's reference "
                    "(which a budget never stops).",
        problem="{value!r} is not a share from 0 up to (not including) 1", fix="give e.g. 0.1 for 10%")

    @model_validator(mode="after")
    def _one_limit(self) -> Budget:
        if (self.max_cost is None) == (self.max_compute_hours is None):
            given = "both are set" if self.max_cost is not None else "neither is set"
            raise SettingsError("max_cost", f"or max_compute_hours: {given}",
                                'give one: {"max_cost": 5} or {"max_compute_hours": 2}')
        return self

    @classmethod
    def parse(cls, value: Any, field: str = FIELD) -> Budget | None:
        """The budget a user gave (an object, or its JSON); None for none (None, "" or {})."""
        if isinstance(value, str):
            if not value.strip():
                return None
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise check.fail(field, f"is not JSON ({exc})", 'write it as {"max_cost": 5} or '
                                                                '{"max_compute_hours": 2}') from None
        if value is None or (isinstance(value, Mapping) and not value):
            return None
        return parse(cls, value, field, noun="budget")

    @property
    def measure(self) -> Literal["cost", "hours"]:
        """``cost`` or ``hours``: what the budget counts."""
        return "cost" if self.max_cost is not None else "hours"

    @property
    def limit(self) -> float:
        return float(self.max_cost if self.max_cost is not None else self.max_compute_hours)  # type: ignore[arg-type]

    @property
    def before_reserve(self) -> float:
        """What Train and the sweep may spend together: the budget less its reserve."""
        return self.limit * (1 - self.reserve)

    def amount(self, value: float, card: RateCard) -> str:
        """``4.93 USD`` or ``1.2 compute-hours``."""
        return f"{value:.4g} {card.currency if self.measure == 'cost' else 'compute-hours'}"


def budget_of(given: Any, default: Callable[[], Budget | None]) -> Budget | None:
    """The run's budget: the task's own (the builder's ``budget``, the DAG's Param), else ``default()``, its
    connection's (the hook's ``get_budget``), read only where the task has none."""
    own = Budget.parse(given)
    return own if own is not None else default()


def spend(cost: Cost, measure: str) -> float | None:
    """What ``cost`` counts against a budget of ``measure``: its amount (None where its rate is unknown), or its
    hours."""
    return cost.amount if measure == "cost" else cost.hours


def spent(costs: Iterable[Cost], budget: Budget, field: str = FIELD) -> float:
    """What ``costs`` count against ``budget``; a SpecError naming ``field`` where a rate is unknown (a budget in
    money cannot count a job it cannot price: refused, never taken as free)."""
    total = 0.0
    for cost in costs:
        value = spend(cost, budget.measure)
        if value is None:
            raise check.fail(field, f"is in money and job {cost.job} ran at a rate unknown", cost.missing)
        total += value
    return total


def refusals(backend: Backend, budget: Budget | None, specs: Mapping[str, CommandJobSpec]) -> None:
    """Refuse, before any job, a budget the run cannot keep: a ``max_cost`` where a job's rate is unknown (locally
    without ``local_rate``; a VM size the rate card lacks), or a budget below one node-minute of its job's compute.
    ``specs``: the jobs the budget stops, by what a message calls them (``job``, ``sweep.trial``)."""
    if budget is None:
        return
    jobs = backend.jobs
    if not isinstance(jobs, Metered):
        raise check.fail(FIELD, f"the {backend.kind} backend does not say what its jobs run on, so no budget can be "
                                "kept there", "drop budget, or run on the local or Azure ML backend")
    planned = {what: jobs.planned_usage(spec) for what, spec in specs.items()}
    card = rates_for(backend, planned.values())
    for what, usage in planned.items():
        rate = card.rate(usage)
        unit = CORE_HOUR if usage.size is None else NODE_HOUR
        if budget.measure == "cost" and rate is None:
            where = "this machine" if usage.size is None else repr(usage.size)
            raise check.fail(FIELD, f"max_cost {budget.limit:g} needs the rate of every job, and {what} runs on "
                                    f"{where}, whose rate is unknown",
                             f"{missing_rate(rate_key(usage))}; or give max_compute_hours instead")
        minute = (rate if budget.measure == "cost" else 1.0) / 60  # type: ignore[operator]
        if budget.limit < minute:
            raise check.fail(FIELD, f"{budget.amount(budget.limit, card)} is below one {unit.replace('-hour', '')}-"
                                    f"minute of {what}'s compute ({budget.amount(minute, card)})",
                             "raise it: a job's first minute would spend it all")


def train_verdict(budget: Budget, card: RateCard, train: Iterable[Cost]) -> tuple[float, str | None]:
    """What Train spent, and why it fails its task (it left the sweep nothing of the budget), or None."""
    used = spent(train, budget)
    if used < budget.before_reserve:
        return used, None
    return used, (f"{FIELD}: Train spent {budget.amount(used, card)} of {budget.amount(budget.limit, card)}, leaving "
                  f"the sweep nothing (the reserve of {budget.reserve:.0%} is export's and the reference's); raise "
                  f"the budget, or train for less")


def against_budget(budget: Budget, cost: Mapping[str, Any]) -> dict[str, Any]:
    """A run's cost (:meth:`~mlrunway.ledger.cost.RunCost.to_dict`) against its budget: what it spent, and what
    past it (export and the reference, which a budget never stops, and the sweep's stated overshoot)."""
    unit = str(cost.get("currency")) if budget.measure == "cost" else "compute-hours"
    used = cost.get("amount") if budget.measure == "cost" else cost["node_hours"] + cost["core_hours"]
    if used is None or (budget.measure == "cost" and cost.get("unknown")):
        text = f"{budget.limit:.4g} {unit}; what the run spent cannot be priced (a job's rate is unknown)"
        return {"limit": budget.limit, "measure": budget.measure, "spent": None, "over": None, "text": text}
    over = max(0.0, used - budget.limit)
    past = f", {over:.4g} {unit} past it (export, the reference or the sweep's stated overshoot)" if over else ""
    return {"limit": budget.limit, "measure": budget.measure, "spent": used, "over": over,
            "text": f"spent {used:.4g} of {budget.limit:.4g} {unit}{past}"}


def spent_before(backend: Backend, names: RunNames, sweep: str | None = None) -> list[Cost]:
    """What the run's jobs spent before sweep attempt ``sweep``: every attempt of Train, and the trials of the
    sweep's earlier attempts (a retried sweep does not spend the budget twice); Train's alone without ``sweep``."""
    usages = attempt_usages(backend, names.train_job)
    if sweep is not None:
        usages.update(attempt_usages(backend, names.sweep, trials=True, until=sweep))
    return run_cost({"before": usages}, rates_for(backend, usages.values())).costs


def sweep_budget(budget: Budget, card: RateCard, before: Iterable[Cost],
                 planned: Iterable[Usage] = ()) -> SweepBudget:
    """What the sweep may spend: the budget less its reserve and what the run's jobs ``before`` it spent (Train,
    earlier sweep attempts' trials); admitted with ``card``'s prices of what its trials run on (``planned``), which
    every watcher of the sweep then prices from (a price read once is not read again, nor lost to an outage)."""
    used = spent(before, budget)
    if budget.before_reserve - used <= 0:
        raise SpecError(f"{FIELD}: the run has spent {budget.amount(used, card)} of "
                        f"{budget.amount(budget.limit, card)} before the sweep, leaving it nothing (the reserve of "
                        f"{budget.reserve:.0%} is export's and the reference's); raise the budget")
    basis = (f"{budget.amount(budget.limit, card)} less the {budget.reserve:.0%} reserve"
             f"{f' and {budget.amount(used, card)} spent before the sweep' if used else ''}")
    rates = {key: rate for usage in planned
             if (key := rate_key(usage)) is not None and (rate := card.rate(usage)) is not None}
    return SweepBudget(limit=budget.before_reserve - used, measure=budget.measure, currency=card.currency,
                       local_rate=card.local_rate, rates=rates, basis=basis)
