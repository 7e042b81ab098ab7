"""A sweep's record, ``sweep.json``: what its controller writes after every change and every reader reads back, the
same on every backend whose controller is mlrunway's (the local and the Ray backend). Each backend keeps only how
the file is stored and parsed (the local workspace's format versions and shape checks); the content is here."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from mlrunway.backend.types import JobStatus, SweepResult, TrialInfo
from mlrunway.specs.sweep import SweepSpec
from mlrunway.sweep.controller import SweepOutcome
from mlrunway.sweep.leaderboard import format_leaderboard

__all__ = ["FILE", "content", "ended", "outcome", "result"]

FILE = "sweep.json"  # in the sweep job's outputs


def content(name: str, objective: Mapping[str, Any], outcome: SweepOutcome) -> dict[str, Any]:
    """What the controller of sweep ``name`` writes: its objective and outcome so far."""
    return {"name": name, "objective": dict(objective), **outcome.to_dict()}


def outcome(data: Mapping[str, Any] | None) -> SweepOutcome:
    """The outcome a previous controller of the sweep recorded (None: a new sweep, an empty one), with the stop it
    had decided, which a resumed controller carries out. A record without a sampler version was started by
    version 1 and keeps drawing with it."""
    if data is None:
        return SweepOutcome()
    trials = [TrialInfo.from_dict(t) for t in data.get("trials", [])]
    return SweepOutcome(trials={t.name: t for t in trials}, best=data.get("best_trial"),
                        sampler_version=int(data.get("sampler_version", 1)), seed=data.get("seed"),
                        stopped_because=data.get("stopped_because"))


def result(name: str, status: JobStatus, spec: SweepSpec, data: Mapping[str, Any] | None,
           error: str | None) -> SweepResult:
    """Sweep ``name``'s result from its record so far (None: nothing recorded yet) and its job's status and error."""
    data = data or {}
    return SweepResult(
        name=name, status=status, objective=spec.objective, policy=spec.early_termination,
        trials=tuple(TrialInfo.from_dict(t) for t in data.get("trials", [])), best_trial=data.get("best_trial"),
        stopped_because=data.get("stopped_because"), error=data.get("error") or error)


def ended(outcome: SweepOutcome, spec: SweepSpec) -> int:
    """A controller's last words: the leaderboard on stdout, the error on stderr; its exit code (1: failed)."""
    print(format_leaderboard(outcome.trials.values(), spec.objective), flush=True)
    if outcome.failed:
        print(outcome.error, file=sys.stderr, flush=True)
        return 1
    return 0
