"""Check a run's jobs together before its first one starts (Params check each field alone)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlrunway.backend.naming import RunNames
from mlrunway.pipeline import check_prefix
from mlrunway.specs import SweepSpec, vocabulary
from operators._base import MlrunwayBaseOperator
from operators.sweep import sweep_spec


def check_run(context: Any, *, job: Mapping[str, Any], sweep: Mapping[str, Any], name_prefix: str) -> SweepSpec:
    """Build the training job and the sweep from what the DAG hands its tasks, and check them: the run's names,
    every argument (named errors: ``search_space.batch_size.values: empty``), each search-space name reaching
    the trial's command, each ``${{inputs.x}}`` defined; then the backend's own checks of both jobs (local:
    the distribution runs here, paths exist, the code snapshot's size; Azure: the compute exists). Raises
    SpecError before any job starts; returns the sweep."""
    RunNames.of(context["dag"].dag_id, context["run_id"], check_prefix(name_prefix))
    train = vocabulary.command_job(job)
    spec = sweep_spec(**sweep)
    task = context.get("task")
    if isinstance(task, MlrunwayBaseOperator):
        task.backend.jobs.validate(train)
        task.backend.jobs.validate(spec.trial)
    return spec
