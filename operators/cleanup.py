"""CleanupOperator: delete what the run created; runs whatever happened upstream."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context, TriggerRule

from mlrunway.errors import JobFailed
from mlrunway.pipeline import cleanup
from operators._base import MlrunwayBaseOperator


class CleanupOperator(MlrunwayBaseOperator):
    """:param keep_endpoint: leave the endpoint serving (the run's result) instead of deleting it.
    :param archive_models: ``[(name, version), ...]`` intermediate model versions to archive.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "keep_endpoint")

    def __init__(self, *, keep_endpoint: bool | str = False, archive_models: list[tuple[str, int]] | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", TriggerRule.ALL_DONE)
        super().__init__(**kwargs)
        self.keep_endpoint = keep_endpoint
        self.archive_models = archive_models or []

    def execute(self, context: Context) -> dict[str, Any]:
        keep = self.keep_endpoint in (True, "True", "true", "1")
        done = cleanup(self.backend, self.names(context), delete_endpoint=not keep, archive=self.archive_models)
        run_id = context["run_id"]
        states = context["ti"].get_task_states(dag_id=context["dag"].dag_id, run_ids=[run_id]).get(run_id, {})
        failed = sorted(task for task, state in states.items() if state in ("failed", "upstream_failed"))
        if failed:  # the run must not look successful because its last task, this one, always runs
            raise JobFailed(f"cleanup finished ({done}), but upstream tasks failed: {', '.join(failed)}")
        return done
