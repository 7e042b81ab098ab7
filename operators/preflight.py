"""Check a run's jobs together before its first one starts (Params check each field alone)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.naming import RunNames
from mlrunway.backend.protocol import Rollout
from mlrunway.pipeline import check_prefix
from mlrunway.production import gate
from mlrunway.production.rollout import RolloutPolicy
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


def check_production(context: Any, *, endpoint_name: str | None, rollout: Mapping[str, Any] | None,
                     evaluation: Mapping[str, Any] | None, code_dir: str, data_dir: str | None,
                     min_improvement: float = 0.0) -> None:
    """A stable endpoint's settings, before any job: its name, the rollout policy, the evaluation set (the team's
    file and metric function, or a classifier's test/ split) and that the backend can roll out."""
    if not endpoint_name:
        return
    check.endpoint_name(endpoint_name, "endpoint_name")
    RolloutPolicy.parse(dict(rollout or {}))
    if isinstance(min_improvement, bool) or not isinstance(min_improvement, int | float) or min_improvement < 0:
        raise check.fail("min_improvement", f"{min_improvement!r} is not a number >= 0", "write e.g. 0 or 0.005")
    if evaluation:
        gate.team_set(code_dir, dict(evaluation))
    elif data_dir is None or not (Path(data_dir) / "test").is_dir():
        raise check.fail("evaluation", f"there is no {Path(data_dir or '.') / 'test'} to compare the challenger with "
                         "the champion on", "add a test/ split no sweep sees, or name a file of labelled requests "
                         "and a metric in evaluation")
    task = context.get("task")
    if isinstance(task, MlrunwayBaseOperator) and not isinstance(task.backend.endpoints, Rollout):
        raise check.fail("endpoint_name", f"the {task.backend.kind} backend has no staged rollout yet",
                         "leave endpoint_name empty: each run deploys to its own endpoint")
