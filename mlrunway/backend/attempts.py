"""Retry semantics on any backend: re-attach to a job that can still succeed, else submit a new attempt.

A retried task looks its job up by name. Queued, Running or Completed, or a sweep its budget stopped (Canceled, the
decision recorded: it ended, and a new attempt would spend again): re-attach, submit nothing. Failed or
Canceled (a preempted node, a transient error): first ``jobs.recover`` (a local sweep whose controller died
resumes, and is re-attached to); else a retry that re-read that status would fail forever, so it submits
attempt 2 as ``<name>-a2`` (then ``-a3``...), leaving every attempt visible; readers follow the newest.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from mlrunway.backend.naming import attempt_name, attempt_number, attempts
from mlrunway.backend.protocol import Jobs
from mlrunway.backend.types import JobInfo, JobStatus
from mlrunway.errors import NotFound

__all__ = ["Action", "Attempt", "earlier_attempts", "latest_attempt", "submit_or_reattach"]

RETRYABLE = frozenset({JobStatus.FAILED, JobStatus.CANCELED})


class Action(enum.StrEnum):
    SUBMITTED = "submitted"
    REATTACHED = "reattached"
    RETRIED = "retried"


@dataclass(frozen=True)
class Attempt:
    """What ``submit_or_reattach`` did: the job now, and the attempt it replaced (for ``RETRIED``)."""

    action: Action
    job: JobInfo
    previous: JobInfo | None = None

    def describe(self) -> str:
        """One line for the task log."""
        if self.action is Action.REATTACHED:
            return f"Re-attaching to {self.job.name}, already {self.job.status.value}: nothing new is submitted"
        if self.action is Action.RETRIED and self.previous is not None:
            return (f"{self.previous.name} ended {self.previous.status.value} "
                    f"({(self.previous.error or 'no reason recorded').splitlines()[0]}); submitted attempt "
                    f"{attempt_number(self.job.name)} as {self.job.name}")
        return f"Submitted {self.job.name}"


def latest_attempt(jobs: Jobs, base: str) -> JobInfo | None:
    """The newest attempt of job ``base`` (``base``, ``base-a2``, ...); None when there is none."""
    found = None
    for name in attempts(base):
        try:
            found = jobs.get(name)
        except NotFound:
            return found
    raise AssertionError("unreachable")  # attempts() never ends


def earlier_attempts(jobs: Jobs, name: str, base: str) -> list[JobInfo]:
    """The attempts of ``base`` before ``name``, oldest first."""
    return [jobs.get(attempt_name(base, n)) for n in range(1, attempt_number(name))]


def submit_or_reattach(jobs: Jobs, base: str, submit: Callable[[str], JobInfo],
                       stale: Callable[[JobInfo], str | None] | None = None) -> Attempt:
    """Re-attach to the newest attempt of ``base`` unless it ended Failed or Canceled; then ``submit`` the next.

    ``submit(name)`` submits the job under ``name`` and returns it. ``stale(job)``, asked of a Completed attempt, says
    why its result no longer answers what is asked (a refusal a person may have mended since, other settings), or
    None: a stale attempt is followed by the next one too.
    """
    latest = latest_attempt(jobs, base)
    if latest is None:
        return Attempt(Action.SUBMITTED, submit(base))
    if latest.status in RETRYABLE and latest.budget_stop is None:  # what the backend can restart goes on
        latest = jobs.recover(latest.name)
    if latest.status not in RETRYABLE or latest.budget_stop is not None:  # a budget's stop ended it: never -a2
        why = stale(latest) if stale is not None and latest.status is JobStatus.COMPLETED else None
        if why is None:
            return Attempt(Action.REATTACHED, latest)
        latest = replace(latest, error=why)
    name = attempt_name(base, attempt_number(latest.name) + 1)
    return Attempt(Action.RETRIED, submit(name), previous=latest)
