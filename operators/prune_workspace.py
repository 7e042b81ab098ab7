"""PruneWorkspaceOperator: remove what a local workspace's retention policy lets go of."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.sdk import Context

from mlrunway import check
from mlrunway.backend.retention import Retention, RetentionPolicy
from mlrunway.ledger.reports import ReportsFolder
from mlrunway.operators._base import MlrunwayBaseOperator


class PruneWorkspaceOperator(MlrunwayBaseOperator):
    """Prune the connection's workspace by its ``retention`` extra (or ``retention`` given here), logging each thing
    removed or kept against the numbers, and return the plan's summary (:mod:`mlrunway.local.prune`). Azure ML
    keeps its workspace by its own retention: there the task prunes the reports folder only
    (:meth:`~mlrunway.ledger.reports.ReportsFolder.prune`), by ``retention`` or the defaults.

    :param retention: ``{"keep_runs": 10, "keep_versions": 5, "capture_days": 30}``; None: the connection's.
    :param preview: a dry run: list what would go, remove nothing.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "retention", "preview")

    def __init__(self, *, retention: dict[str, Any] | None = None, preview: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.retention, self.preview = retention, preview

    def execute(self, context: Context) -> dict[str, Any]:
        backend = self.backend
        policy = RetentionPolicy.parse(self.retention) if self.retention else None
        dry_run = check.flag("preview", self.preview)
        if isinstance(backend, Retention):
            plan = backend.prune(policy, dry_run=dry_run)
        else:
            self.log.info("The %s backend keeps its workspace by its own retention: pruning its reports folder, %s, "
                          "only", backend.kind, backend.reports)
            plan = ReportsFolder(Path(backend.reports)).prune(policy or RetentionPolicy(), dry_run=dry_run)
        for line in plan.lines():
            self.log.info("%s", line)
        return {"summary": plan.summary(), "bytes": plan.bytes, "removed": len(plan.removed), "dry_run": plan.dry_run}
