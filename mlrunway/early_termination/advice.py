"""What other early-termination settings would have done on one sweep's own curves: a replay, in trial order, by
the rule the local controller decides with (:func:`~mlrunway.early_termination.evaluate_in_order`), so a team
tunes its policy from its own sweeps instead of choosing the numbers blind.

A sweep that ran with a policy has no values after each of its stops: a setting can be scored only where every
decision it makes falls within the recorded values, that is, where it stops each trial the sweep stopped no later
than that trial's last recorded value. The others are "unknown after interval k". A calibration sweep (no policy:
every trial runs to its end) scores every setting. A replay of one sweep, not a promise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from mlrunway.early_termination import Goal, Termination, best_so_far, evaluate_in_order
from mlrunway.early_termination.bandit import BanditPolicy
from mlrunway.early_termination.median import MedianStoppingPolicy
from mlrunway.early_termination.registry import EarlyTerminationPolicy
from mlrunway.early_termination.truncation import TruncationSelectionPolicy

__all__ = ["Advice", "Replayed", "advise", "candidates", "replay"]


@dataclass(frozen=True)
class Replayed:
    """One setting replayed on the sweep's curves: ``policy`` (as a DAG writes it), whether it could be scored
    (``unknown_after``: the interval past which the recorded values end, else None), the trials it stops and where,
    the epochs it would have run, those saved against the sweep as it ran, its best metric, and what the saved
    epochs cost (where the trials' costs are known)."""

    policy: dict[str, Any] | None
    ran: bool  # the setting the sweep ran with
    stops: dict[str, int]
    epochs: int | None
    saved_epochs: int | None
    best: float | None
    saved_cost: float | None = None
    unknown_after: int | None = None

    @property
    def change(self) -> str:
        """The one-line DAG change that applies it."""
        return f"early_termination={json.dumps(self.policy)}" if self.policy else "early_termination=None"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change": self.change}


@dataclass(frozen=True)
class Advice:
    """The replays of one sweep: the setting it ran first, then the others; ``reproduced``: whether the replay of
    the setting it ran makes exactly its live decisions (the replay's faithfulness; None where it ran none)."""

    rows: list[Replayed]
    reproduced: bool | None
    epochs_ran: int
    best_ran: float | None
    calibration: bool  # no policy ran: every setting is scored

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "reproduced": self.reproduced, "epochs_ran": self.epochs_ran,
                "best_ran": self.best_ran, "calibration": self.calibration}


def candidates(ran: EarlyTerminationPolicy | None) -> list[EarlyTerminationPolicy]:
    """The settings shown beside the one the sweep ran: its own with other slack and delay, median stopping and
    truncation selection, each with a few delays; the one it ran first (not repeated)."""
    interval = ran.evaluation_interval if ran is not None else 1
    delays = sorted({0, 1, 3, 5, 10} | ({ran.delay_evaluation} if ran is not None else set()))
    bandits: list[EarlyTerminationPolicy] = []
    base = ran if isinstance(ran, BanditPolicy) else BanditPolicy(slack_factor=0.15, evaluation_interval=interval)
    for delay in delays:
        if base.slack_factor is not None:
            bandits += [replace(base, slack_factor=f, delay_evaluation=delay) for f in (0.05, 0.1, 0.15, 0.2, 0.3)]
        else:
            amount = float(base.slack_amount or 0)
            bandits += [replace(base, slack_amount=a, delay_evaluation=delay) for a in (amount / 2, amount, amount * 2)]
    others: list[EarlyTerminationPolicy] = [
        *(MedianStoppingPolicy(evaluation_interval=interval, delay_evaluation=d) for d in delays),
        *(TruncationSelectionPolicy(truncation_percentage=p, evaluation_interval=interval, delay_evaluation=d)
          for p in (10, 20, 30) for d in delays)]
    listed = [ran] if ran is not None else []
    for policy in [*bandits, *others]:
        if policy not in listed:
            listed.append(policy)
    return listed


def replay(policy: EarlyTerminationPolicy, histories: Mapping[str, Sequence[float]], goal: Goal,
           truncated: Mapping[str, int]) -> tuple[dict[str, Termination], int | None]:
    """``policy``'s decisions on ``histories`` (in start order), and None; or, where a decision would need values
    past what was recorded (a trial the sweep stopped at ``truncated[trial]`` values that this setting would not
    stop by then), the decisions so far and the interval after which they are unknown."""
    stops = evaluate_in_order(policy, histories, goal)
    unknown = [length for trial, length in truncated.items()
               if trial not in stops or stops[trial].interval > length]
    return stops, (min(unknown) if unknown else None)


def advise(ran: EarlyTerminationPolicy | None, histories: Mapping[str, Sequence[float]],
           live_stops: Mapping[str, int], completed: Sequence[str], goal: Goal,
           costs: Mapping[str, float] | None = None, limit: int = 12) -> Advice:
    """The replays of a sweep: ``histories`` in start order (all each trial logged), ``live_stops`` the interval
    the sweep's policy decided for each trial it judged (applied or not), ``completed`` the trials that ran to their
    end (the others' curves end early: stopped, canceled, failed), ``costs`` each trial's cost where known. At most
    ``limit`` rows: the setting it ran, then the scored ones that save the most epochs while keeping the best metric,
    then the others."""
    truncated = {t: len(h) for t, h in histories.items() if t not in completed}
    epochs_ran = sum(len(h) for h in histories.values())
    best_ran = _best(histories, {}, goal)
    reproduced = None
    rows = []
    for policy in candidates(ran):
        stops, unknown = replay(policy, histories, goal, truncated)
        if policy == ran:
            reproduced = {t: s.interval for t, s in stops.items()} == dict(live_stops)
            unknown = None  # its own decisions are the record
        epochs = None if unknown else sum(min(len(h), stops[t].interval) if t in stops else len(h)
                                          for t, h in histories.items())
        saved_cost = None
        if epochs is not None and costs:
            saved_cost = sum(costs[t] * (len(h) - stops[t].interval) / len(h) for t, h in histories.items()
                             if t in stops and t in costs and len(h) > stops[t].interval)
        rows.append(Replayed(policy=_written(policy), ran=policy == ran, stops={t: s.interval for t, s in stops.items()},
                             epochs=epochs, saved_epochs=None if epochs is None else epochs_ran - epochs,
                             best=None if unknown else _best(histories, stops, goal), saved_cost=saved_cost,
                             unknown_after=unknown))
    own = [r for r in rows if r.ran]
    sign = 1 if goal == "maximize" else -1
    scored = sorted((r for r in rows if not r.ran and r.epochs is not None),
                    key=lambda r: (-(sign * (r.best or 0)), -(r.saved_epochs or 0)))
    unknown_rows = [r for r in rows if not r.ran and r.epochs is None]
    kept = (own + scored + unknown_rows)[:limit]
    return Advice(rows=kept, reproduced=reproduced, epochs_ran=epochs_ran, best_ran=best_ran,
                  calibration=ran is None and not truncated)


def _best(histories: Mapping[str, Sequence[float]], stops: Mapping[str, Termination], goal: Goal) -> float | None:
    """The best value of the primary metric the trials keep: a stopped one's up to its stop."""
    values = [v for t, h in histories.items() for v in (h[: stops[t].interval] if t in stops else h)]
    return best_so_far(values, goal) if values else None


def _written(policy: EarlyTerminationPolicy) -> dict[str, Any]:
    """The policy as a DAG writes it: its type and the settings it has."""
    return {k: v for k, v in asdict(policy).items() if v is not None}  # type: ignore[call-overload]
