"""PruneWorkspaceOperator: remove what a local workspace's retention policy lets go of."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway import check
from mlrunway.backend.retention import Retention, RetentionPolicy
from mlrunway.errors import NotSupportedOnBackend
from mlrunway.operators._base import MlrunwayBaseOperator


class PruneWorkspaceOperator(MlrunwayBaseOperator):
    """Prune the connection's workspace by its ``retention`` extra (or ``retention`` given here), logging each thing
    removed or kept against the numbers, and return the plan's summary (:mod:`mlrunway.local.prune`). Azure ML
    keeps its workspace by its own retention: there the task fails, naming that.

    :param retention: ``{"keep_runs": 10, "keep_versions": 5, "capture_days": 30}``; None: the connection's.
    :param preview: a dry run: list what would go, remove nothing.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "retention", "preview")

    def __init__(self, *, retention: dict[str, Any] | None = None, preview: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.retention, self.preview = retention, preview

    def execute(self, context: Context) -> dict[str, Any]:
        backend = self.backend
        if not isinstance(backend, Retention):
            raise NotSupportedOnBackend(f"pruning: the {backend.kind} backend keeps its workspace by its own "
                                        "retention; prune the local backend's workspaces only")
        policy = RetentionPolicy.parse(self.retention) if self.retention else None
        plan = backend.prune(policy, dry_run=check.flag("preview", self.preview))
        for line in plan.lines():
            self.log.info("%s", line)
        return {"summary": plan.summary(), "bytes": plan.bytes, "removed": len(plan.removed), "dry_run": plan.dry_run}
