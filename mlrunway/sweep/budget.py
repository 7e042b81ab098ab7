"""A sweep held to what it may spend (:class:`~mlrunway.specs.sweep.SweepBudget`, from the run's budget:
:mod:`mlrunway.ledger.budget`), where its trials start.

- :class:`BudgetWatch`, in the controller that starts the trials (the local backend's): before each start, whether
  the next trial would pass the budget (a trial's expected cost: the mean of the ended ones'); at the budget, the
  decision that stops the sweep (the controller cancels the running trials: each keeps its best model so far).
- :func:`enforce`, in the sweep's watcher where the service starts the trials (Azure ML, whose canceling of one
  trial does not stop it starting another): at the budget, record the decision on the sweep, then cancel it.

Either way every trial is priced from the card the sweep was admitted with (:func:`admitted`: ``SweepBudget.rates``
and ``local_rate``), and the overshoot is stated: what the running trials spend until their cancels land (a poll)
and they exit, and how late the stop came where the watch could not look (a read outage, prices unread).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlrunway.backend.protocol import Backend, Metered, StopRecords
from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import TrialInfo, Usage
from mlrunway.ledger.budget import spend
from mlrunway.ledger.cost import Cost, job_cost, rates_for
from mlrunway.specs.sweep import SweepBudget

__all__ = ["BudgetWatch", "Look", "Verdict", "admitted", "enforce", "priced", "stop_reason"]

log = logging.getLogger(__name__)
STOPPED = "stopped by budget"


def stop_reason(budget: SweepBudget, spent: float, extra: str = "") -> str:
    """``stopped by budget: spent 4.93 of 5.00 USD`` (the sweep's share, and how it was derived)."""
    return (f"{STOPPED}: spent {budget.amount(spent)} of {budget.amount(budget.limit)}"
            f"{f' ({budget.basis})' if budget.basis else ''}{f'; {extra}' if extra else ''}")


def _spend(costs: Iterable[Cost], budget: SweepBudget) -> float:
    """What ``costs`` count against ``budget``; NaN where one cannot be priced (never taken as free)."""
    total = 0.0
    for cost in costs:
        value = spend(cost, budget.measure)
        total += math.nan if value is None else value
    return total


@dataclass(frozen=True)
class Look:
    """What the budget says now: ``stop`` (the decision, or None), how many more trials may start (None: any, no
    trial has ended to say what one costs), and what has been spent."""

    stop: str | None
    room: int | None
    spent: float


@dataclass
class BudgetWatch:
    """The budget watched by the controller that starts the trials. ``usage(name)``: a started trial's usage so
    far (None before it starts); ``card`` prices it; ``poll_s``: how long a running trial may run past the budget
    before its cancel lands (the controller's poll); ``now``: the clock a running trial's usage is timed by."""

    budget: SweepBudget
    usage: Callable[[str], Usage | None]
    card: RateCard
    poll_s: float = 1.0
    exit_s: float = 10.0  # how long a canceled trial may take to exit (the supervisor's grace before SIGKILL)
    now: Callable[[], float] = time.time
    _ended: dict[str, Cost] = field(default_factory=dict)  # an ended trial's cost never changes: read once

    def look(self, trials: Mapping[str, TrialInfo], running: Iterable[str]) -> Look:
        running = list(running)
        costs: dict[str, Cost] = {}
        for name, trial in trials.items():
            if name in self._ended:
                costs[name] = self._ended[name]
                continue
            cost = job_cost(name, self.usage(name), self.card, now=self.now())
            if cost is None:
                continue
            costs[name] = cost
            if trial.status.is_terminal() and not cost.running:
                self._ended[name] = cost
        spent = _spend(costs.values(), self.budget)
        if math.isnan(spent):
            return Look(f"{STOPPED}: a trial's cost cannot be priced, so the budget cannot be kept (set the "
                        "connection's local_rate)", 0, spent)
        if spent >= self.budget.limit:
            return Look(stop_reason(self.budget, spent, self._overshoot(costs, running)), 0, spent)
        ended = [c for n, c in costs.items() if n in self._ended]
        if not ended:
            return Look(None, None, spent)
        each = _spend(ended, self.budget) / len(ended)
        coming = sum(max(0.0, each - _spend([costs[n]], self.budget)) for n in running if n in costs)
        left = self.budget.limit - spent - coming
        return Look(None, max(0, math.floor(left / each)) if each > 0 else None, spent)

    def _overshoot(self, costs: Mapping[str, Cost], running: list[str]) -> str:
        """What the running trials may spend past the budget until they have ended: until their cancels land (a
        poll) and while each exits (up to the grace before it is killed), at the rate each spent so far."""
        rate = sum(_spend([costs[n]], self.budget) / costs[n].seconds for n in running
                   if n in costs and costs[n].seconds > 0)
        if not running:
            return "no trial was running"
        return (f"{len(running)} running trial{'s' * (len(running) != 1)} canceled; until the cancels land (a poll, "
                f"{self.poll_s:g} s) and each trial exits (up to {self.exit_s:g} s) they spend up to about "
                f"{self.budget.amount(rate * (self.poll_s + self.exit_s))} more: the sweep's record says what it "
                "spent once they ended")

    @staticmethod
    def not_started(look: Look, budget: SweepBudget, count: int) -> str:
        """The decision when the next trial would pass the budget and none runs."""
        return stop_reason(budget, look.spent, f"{count} trial{'s' * (count != 1)} not started: the next would pass "
                                               "it (a trial costs about what the ended ones did)")


def admitted(budget: SweepBudget) -> RateCard:
    """The card the sweep was admitted with (``budget.rates`` and ``local_rate``): what its watcher and its
    controller price every trial from, on every backend."""
    return RateCard(currency=budget.currency, per_hour=dict(budget.rates), local_rate=budget.local_rate)


def priced(backend: Backend, budget: SweepBudget, usages: Iterable[Usage]) -> RateCard:
    """The admitted card, and the backend's price (its connection's card, Azure's Retail Prices) of a VM size the
    card lacks: only that is read at a look. A budget of hours needs no price."""
    card = admitted(budget)
    lacking = [u for u in usages if u.size is not None and card.rate(u) is None]
    if budget.measure != "cost" or not lacking:
        return card
    return card.filled(rates_for(backend, lacking).per_hour)


@dataclass(frozen=True)
class Verdict:
    """A watcher's look at a sweep's budget: ``decision`` the stop it recorded on the sweep and canceled it for
    (None: below the budget, or the sweep had ended by itself); ``unpriced`` why the look was skipped (a trial's
    price could not be read: no verdict, never "over budget")."""

    decision: str | None = None
    unpriced: str | None = None


def enforce(backend: Backend, name: str, budget: SweepBudget, *, outage_s: float = 0.0) -> Verdict:
    """The watcher's look at sweep ``name`` where the service starts its trials: at the budget, record the decision
    on the sweep (:class:`~mlrunway.backend.protocol.StopRecords`), then cancel the sweep. A trial whose price cannot
    be read skips the look (:attr:`Verdict.unpriced`). The backend's reads and its cancel raise Unavailable while
    the service is briefly away: the watch tries again at its next poll. ``outage_s``: how long the watch could not
    look since it last did (a read outage ridden out, prices unread), stated in the decision as the stop's lateness."""
    jobs = backend.jobs
    if not isinstance(jobs, Metered):
        return Verdict()
    usages = jobs.trial_usage(name)
    card = priced(backend, budget, usages.values())
    costs = [cost for trial, usage in usages.items() if (cost := job_cost(trial, usage, card)) is not None]
    spent = _spend(costs, budget)
    if math.isnan(spent):
        missing = next(c for c in costs if spend(c, budget.measure) is None)
        return Verdict(unpriced=f"trial {missing.job} runs on {missing.compute}, whose price could not be read "
                                f"({missing.missing}); the budget is looked at again at the next poll")
    if spent < budget.limit:
        return Verdict()
    if jobs.get(name).status.is_terminal():  # it ended by itself since the poll: nothing to stop or record
        return Verdict()
    running = [c for c in costs if c.running]
    late = f"; the stop came late by {outage_s:.0f} s in which the watch could not look" if outage_s >= 1 else ""
    decision = stop_reason(budget, spent, f"{len(running)} running trials canceled with the sweep; the overshoot "
                                          f"is at most a poll of the watch{late}")
    if isinstance(jobs, StopRecords):
        jobs.record_stop(name, decision)
    log.warning("Sweep %s: %s", name, decision)
    jobs.cancel(name, reason=decision)
    return Verdict(decision=decision)


def budget_record(budget: SweepBudget, spent: float, stop: str | None) -> dict[str, Any]:
    """The budget as a sweep's record keeps it."""
    return {**budget.to_dict(), "spent": spent, "stopped": stop}
