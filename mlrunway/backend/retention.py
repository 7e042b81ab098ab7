"""How long a backend keeps what the lifecycle produces, and the capability of pruning the rest.

The policy, as a connection's extra ``retention`` holds it::

    {"keep_runs": 10, "keep_versions": 5, "capture_days": 30}

- ``keep_runs``: each DAG's last N runs keep their jobs, MLflow runs and report (a run is what one DAG run
  submitted: its training job, its sweep and the sweep's trials, every attempt);
- ``keep_versions``: each model's newest K versions stay registered;
- ``capture_days``: requests captured by a deployment's data collector stay D days (monitoring reports too,
  the newest of each endpoint always).

Whatever the numbers, nothing is pruned that something still needs: a run that has not ended, a version that
holds or ever held the ``production`` or ``previous`` alias (and the run that produced it), a version a
deployment serves, and a kept run's model. Azure ML keeps its workspace by its own retention; pruning is the
local backend's (:class:`Retention`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol, runtime_checkable

from pydantic import ConfigDict, Strict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway.settings import parse, setting

__all__ = ["Pruned", "PrunePlan", "Retention", "RetentionPolicy"]

PROTECTED_ALIASES = ("production", "previous")


_KEEP = "{value!r} is not a whole number of at least 1"


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class RetentionPolicy:
    """How long a backend keeps what the lifecycle produces, declared once (:mod:`mlrunway.settings`): the
    connection extra ``retention`` is read by :meth:`parse`, and its form field is described from it."""

    keep_runs: Annotated[int, Strict()] = setting(
        10, ge=1, description="Each DAG's last N runs keep their jobs, MLflow runs and report.", problem=_KEEP,
        fix="keep at least one (the newest is what the next run builds on)")
    keep_versions: Annotated[int, Strict()] = setting(
        5, ge=1, description="Each model's newest K versions stay registered.", problem=_KEEP,
        fix="keep at least one (the newest is what the next run builds on)")
    capture_days: Annotated[float, Strict()] = setting(
        30.0, gt=0, description="Captured requests (and monitoring reports, the newest always) stay D days.",
        problem="{value!r} is not a positive number of days",
        fix="give the days captures stay, e.g. 30 (0.5 for half a day)")

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None, field_name: str = "retention") -> RetentionPolicy:
        """The policy from a connection's extra; each mistake names its field."""
        return parse(cls, value, field_name, noun="retention")


@dataclass(frozen=True)
class Pruned:
    """One thing pruning removes: what (``job``, ``mlflow_run``, ``model_version``, ``report``, ``capture``), which,
    why, and the bytes it frees."""

    kind: str
    name: str
    reason: str
    bytes: int = 0


@dataclass
class PrunePlan:
    """What a prune removes (or, as a dry run, would remove), and what it keeps that the numbers alone would not."""

    policy: RetentionPolicy
    removed: list[Pruned] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # name: why it stays though the policy's numbers pass it by
    dry_run: bool = True

    @property
    def bytes(self) -> int:
        return sum(item.bytes for item in self.removed)

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for item in self.removed:
            counts[item.kind] = counts.get(item.kind, 0) + 1
        what = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in sorted(counts.items())) or "nothing"
        verb = "would free" if self.dry_run else "freed"
        return f"{'dry run: ' if self.dry_run else ''}{what}; {verb} {self.bytes / 2**20:.1f} MiB"

    def lines(self) -> list[str]:
        """One line per removed thing and per protected one, then the summary."""
        out = [f"{'would remove' if self.dry_run else 'removed'} {i.kind} {i.name} ({i.bytes / 2**20:.1f} MiB): "
               f"{i.reason}" for i in self.removed]
        out += [f"kept {name}: {why}" for name, why in sorted(self.kept.items())]
        return [*out, self.summary()]


@runtime_checkable
class Retention(Protocol):
    """A backend that prunes its own store by a :class:`RetentionPolicy` (None: the one its connection gives)."""

    def prune(self, policy: RetentionPolicy | None = None, *, dry_run: bool = False) -> PrunePlan: ...
