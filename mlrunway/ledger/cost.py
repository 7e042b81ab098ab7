"""What a run's compute costs: each job's duration × instances × a rate for its compute, labelled an estimate.

A backend says what each job used (:class:`~mlrunway.backend.types.Usage` on its ``JobInfo``): Azure ML the VM size
of the job's compute (a cluster's, or a serverless job's ``instance_type``), its tier (dedicated, low priority,
spot), its node count and its start and end as the service records them; the local backend the job's wall time,
its processes and the CPU time they took. The rate comes from the connection's rate card
(:class:`~mlrunway.backend.rates.RateCard`, declared once, :mod:`mlrunway.settings`)::

    {"currency": "USD", "per_hour": {"Standard_NC6s_v3": 3.06, "Standard_NC6s_v3:spot": 0.61},
     "local_rate": 0.04}

- on Azure ML a job costs node-hours (seconds × nodes / 3600) × ``per_hour[<VM size>]`` (``<size>:spot`` or
  ``<size>:low_priority`` for those tiers);
- locally a job costs core-hours (seconds × processes / 3600) × ``local_rate`` per core-hour; without one it shows
  its hours, not money.

A job whose rate is unknown shows its duration and says its rate is unknown: never a made-up price. A cluster's idle
time and scale-down are not attributed to jobs: the figures are estimates of what the jobs ran, not a bill.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from mlrunway.backend.naming import RunNames, attempts
from mlrunway.backend.protocol import Backend, Metered, MeteredEndpoints, Priced
from mlrunway.backend.rates import RateCard, rate_key
from mlrunway.backend.types import Usage
from mlrunway.errors import NotFound

__all__ = ["CORE_HOUR", "NODE_HOUR", "Cost", "RunCost", "attempt_usages", "cost_of_run", "cost_rows", "estimated",
           "job_cost", "missing_rate", "rates_for", "run_cost", "serving_cost"]

log = logging.getLogger(__name__)
NODE_HOUR, CORE_HOUR = "node-hour", "core-hour"


def missing_rate(key: str | None) -> str:
    """Where the rate of the card's ``key`` (:func:`~mlrunway.backend.rates.rate_key`; None: this machine's core-hour) would go."""
    if key is None:
        return "set the connection's local_rate, the price of a core-hour"
    return f"add {key!r} to the connection's rates.per_hour, or set rates.retail_prices"



def rates_for(backend: object, usages: Iterable[Usage | None]) -> RateCard:
    """The rate card that prices ``usages`` on ``backend``; an empty one (every rate unknown) where it has none."""
    sizes = sorted({u.size for u in usages if u is not None and u.size is not None})
    return backend.rates_for(sizes) if isinstance(backend, Priced) else RateCard()


@dataclass(frozen=True, kw_only=True)
class Cost:
    """One job's compute and what it cost: ``hours`` of ``unit`` (node-hours on a VM, core-hours locally) at
    ``rate`` per unit; ``amount`` None when the rate is unknown. An estimate: idle and scale-down time are not the
    job's."""

    job: str
    compute: str
    rate_key: str | None  # where its rate is on the card (rate_key); None: local_rate
    seconds: float
    instances: int
    processes: int
    unit: str
    hours: float
    cpu_hours: float | None
    rate: float | None
    currency: str
    amount: float | None
    running: bool = False

    def text(self) -> str:
        """``0.0123 USD (0.41 core-hours on this machine at 0.03 USD a core-hour)``, or its hours and "rate
        unknown"."""
        times = _count(self.processes, "process", "processes") if self.unit == CORE_HOUR else \
            _count(self.instances, "node", "nodes")
        hours = (f"{_hours(self.hours, self.unit)} ({_duration(self.seconds)} × {times})"
                 f"{' so far' if self.running else ''} on {self.compute}")
        if self.amount is None:
            return f"{hours} (rate unknown: {self.missing})"
        return f"{self.amount:.4g} {self.currency} ({hours} at {self.rate:g} {self.currency} a {self.unit})"

    @property
    def missing(self) -> str:
        """Where the rate that prices this would go."""
        return missing_rate(self.rate_key)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text()}


def _duration(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds < 120 else f"{seconds / 60:.3g} min" if seconds < 7200 else \
        f"{seconds / 3600:.3g} h"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _hours(hours: float, unit: str) -> str:
    return f"{hours:.3g} {unit}{'s' * (f'{hours:.3g}' != '1')}"


def job_cost(name: str, usage: Usage | None, card: RateCard, *, now: float | None = None) -> Cost | None:
    """What job ``name`` cost by its ``usage``, or None where it never started."""
    if usage is None or usage.started is None:
        return None
    running = usage.ended is None
    end = usage.ended if usage.ended is not None else (time.time() if now is None else now)
    seconds = max(0.0, end - usage.started)
    local = usage.size is None
    hours = seconds * (usage.processes if local else usage.instances) / 3600
    rate = card.rate(usage)
    compute = "this machine" if usage.size is None else (
        usage.size if not usage.tier or usage.tier == "dedicated" else f"{usage.size} ({usage.tier.replace('_', ' ')})")
    return Cost(job=name, compute=compute, rate_key=rate_key(usage), seconds=round(seconds, 3),
                instances=usage.instances, processes=usage.processes, unit=CORE_HOUR if local else NODE_HOUR,
                hours=hours, cpu_hours=None if usage.cpu_seconds is None else usage.cpu_seconds / 3600, rate=rate,
                currency=card.currency, amount=None if rate is None else hours * rate, running=running)


@dataclass(frozen=True, kw_only=True)
class RunCost:
    """A run's jobs' costs, by role (``train``, ``trials``, ``export``, ``reference``), and their total over those
    whose rate is known; ``unknown`` counts the others."""

    jobs: dict[str, list[Cost]]
    currency: str
    noun: str = "job"  # what each cost is of: a job, or an endpoint's deployment

    @property
    def costs(self) -> list[Cost]:
        return [cost for costs in self.jobs.values() for cost in costs]

    @property
    def amount(self) -> float | None:
        known = [c.amount for c in self.costs if c.amount is not None]
        return sum(known) if known else None

    @property
    def unknown(self) -> int:
        return sum(c.amount is None for c in self.costs)

    def hours(self, unit: str) -> float:
        return sum(c.hours for c in self.costs if c.unit == unit)

    def text(self) -> str:
        """``5.36 USD for 1.75 node-hours in 3 jobs (an estimate)``; the jobs at a rate unknown are named, not
        priced."""
        count = len(self.costs)
        if not count:
            return "no job has run yet"
        hours = " and ".join(_hours(self.hours(unit), unit) for unit in (NODE_HOUR, CORE_HOUR) if self.hours(unit))
        jobs = f"{hours or '0 hours'} in {_count(count, self.noun, f'{self.noun}s')}"
        if self.amount is None:
            return f"{jobs}, rate unknown ({next(c for c in self.costs if c.amount is None).missing})"
        unknown = f"; {self.unknown} of them at a rate unknown, not counted" if self.unknown else ""
        return f"{self.amount:.4g} {self.currency} for {jobs}{unknown} (an estimate)"

    def to_dict(self) -> dict[str, Any]:
        return {"noun": self.noun, "currency": self.currency, "amount": self.amount, "unknown": self.unknown,
                "text": self.text(), "node_hours": self.hours(NODE_HOUR), "core_hours": self.hours(CORE_HOUR),
                "jobs": {role: [c.to_dict() for c in costs] for role, costs in self.jobs.items()}}


def run_cost(usages: Mapping[str, Mapping[str, Usage | None]], card: RateCard, *,
             now: float | None = None, noun: str = "job") -> RunCost:
    """The cost of a run's jobs, given by role, each role's jobs by name with their usage."""
    priced = {role: [cost for name, usage in jobs.items() if (cost := job_cost(name, usage, card, now=now))]
              for role, jobs in usages.items()}
    return RunCost(jobs={role: costs for role, costs in priced.items() if costs}, currency=card.currency, noun=noun)


def attempt_usages(backend: Backend, base: str, *, trials: bool = False,
                   until: str | None = None) -> dict[str, Usage | None]:
    """What each attempt of job ``base`` ran on (``base``, ``base-a2``, ...: a failed attempt ran too), oldest first,
    or, for a sweep (``trials``), each of its attempts' trials; ``until``: the attempt to stop before. Empty where the
    backend's jobs do not say (not :class:`~mlrunway.backend.protocol.Metered`)."""
    jobs = backend.jobs
    if not isinstance(jobs, Metered):
        return {}
    metered: Metered = jobs
    found: dict[str, Usage | None] = {}
    for name in attempts(base):
        if name == until:
            break
        try:
            jobs.get(name)
        except NotFound:
            break
        found.update(metered.trial_usage(name) if trials else {name: metered.usage(name)})
    return found


def cost_of_run(backend: Backend, names: RunNames, *, now: float | None = None) -> RunCost | None:
    """What run ``names``'s jobs cost so far, every attempt of each (a failed attempt ran too): ``train``, each
    sweep attempt's ``trials``, ``export`` and the smoke test's ``reference``. None where the backend's jobs do not
    say what they ran on (not :class:`~mlrunway.backend.protocol.Metered`)."""
    if not isinstance(backend.jobs, Metered):
        return None
    usages = {role: attempt_usages(backend, base, trials=role == "trials")
              for role, base in (("train", names.train_job), ("trials", names.sweep), ("export", names.export_job),
                                 ("reference", names.reference_job))}
    card = rates_for(backend, [u for found in usages.values() for u in found.values()])
    return run_cost(usages, card, now=now)


def cost_rows(cost: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What producing the version cost: the total, then each role's jobs (train, the sweep's trials, export, the
    smoke test's reference), each an estimate (:mod:`mlrunway.ledger.cost`)."""
    if not cost or not cost.get("jobs"):
        return []
    rows = [("total", str(cost["text"]))]
    for role, jobs in cost["jobs"].items():
        known = [j["amount"] for j in jobs if j.get("amount") is not None]
        hours = sum(j["hours"] for j in jobs)
        spent = f"{sum(known):.4g} {cost['currency']}, " if known else ""
        unknown = f", {len(jobs) - len(known)} at a rate unknown" if len(known) < len(jobs) else ""
        rows.append((role, f"{spent}{_hours(hours, jobs[0]['unit'])} in {_count(len(jobs), 'job', 'jobs')}"
                           f"{unknown}"))
    if cost.get("budget"):  # the run's budget, where it had one (mlrunway.ledger.budget.against_budget)
        rows.append(("budget", str(cost["budget"]["text"])))
    return rows


def serving_cost(backend: Backend, endpoint: str, *, now: float | None = None) -> RunCost | None:
    """What each deployment of ``endpoint`` has cost since it was created (``<endpoint>/<deployment>``: its hours
    × instances, or locally × scoring processes, at the card's rate). None where the endpoint does not exist or its
    backend does not say (not :class:`~mlrunway.backend.protocol.MeteredEndpoints`)."""
    endpoints = backend.endpoints
    if not isinstance(endpoints, MeteredEndpoints):
        return None
    try:
        usages: dict[str, Usage | None] = {f"{endpoint}/{name}": usage
                                           for name, usage in endpoints.serving_usage(endpoint).items()}
    except NotFound:
        return None
    if not usages:  # no endpoint of that name (Azure lists none), or none of its deployments says when it was made
        return None
    return run_cost({"serving": usages}, rates_for(backend, usages.values()), now=now, noun="deployment")


def estimated(what: str, read: Callable[[], RunCost | None]) -> dict[str, Any] | None:
    """``read()``'s figures as a dict, or None where it found none or failed: a cost is an estimate, and a service
    that cannot be read for it (a deleted cluster, an outage) never fails the deployment, the cleanup or the report
    it is shown on. A failure is logged with ``what`` it was the cost of."""
    try:
        cost = read()
    except Exception as exc:  # noqa: BLE001 - any reader's failure (ARM, Run History, a store) leaves it unknown
        log.warning("the cost of %s could not be read: %s: %s", what, type(exc).__name__, exc)
        return None
    return cost.to_dict() if cost is not None and cost.costs else None
