"""The backend interface: job statuses, job records and the Protocol both backends implement."""

from __future__ import annotations

from mlrunway.backend.types import JobInfo, JobStatus, TrialInfo

__all__ = ["JobInfo", "JobStatus", "TrialInfo"]
