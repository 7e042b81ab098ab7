"""Check a run's jobs together before its first one starts (Params check each field alone)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.naming import RunNames
from mlrunway.errors import SpecError
from mlrunway.ledger.budget import Budget, refusals
from mlrunway.operators._base import MlrunwayBaseOperator
from mlrunway.operators.sweep import sweep_spec
from mlrunway.pipeline import check_prefix
from mlrunway.specs import SweepSpec, vocabulary


def check_run(context: Any, *, job: Mapping[str, Any], sweep: Mapping[str, Any], name_prefix: str,
              budget: Any = None) -> SweepSpec:
    """Build the training job and the sweep from what the DAG hands its tasks, and check them: the run's names,
    every argument (named errors: ``search_space.batch_size.values: empty``), each search-space name reaching
    the trial's command, each ``${{inputs.x}}`` defined; then the backend's own checks of both jobs (local:
    the distribution runs here, paths exist, the code snapshot's size; Azure: the compute exists), and the run's
    ``budget`` against both jobs' rates (:func:`mlrunway.ledger.budget.refusals`; under an mlrunway task, the task's
    ``run_budget``: the same value, resolved once per task). Raises SpecError before any job
    starts; returns the sweep."""
    RunNames.of(context["dag"].dag_id, context["run_id"], check_prefix(name_prefix))
    train = vocabulary.command_job(job)
    spec = sweep_spec(**sweep)
    task = context.get("task")
    if isinstance(task, MlrunwayBaseOperator):
        for field, built in (("job", train), ("trial", spec.trial)):
            try:
                task.backend.jobs.validate(built)
            except SpecError as exc:  # a backend names the job's fields command_job.*; the DAG calls it `field`
                raise SpecError(str(exc).replace("command_job.", f"{field}.", 1)) from None
        # the task's budget (Train's, resolved once for its task), which the DAG hands both as ``budget``
        refusals(task.backend, task.run_budget, {"the job": train, "the sweep's trial": spec.trial})
    else:
        Budget.parse(budget)
    return spec


def check_scoring_script(*, code_dir: str, scoring_script: str | None) -> None:
    """The team's score.py is in the code folder and compiles with this Python, before any job: compiled in memory
    (``compile(source, path, "exec")``), so nothing is written into a code folder that may be read-only. A
    SyntaxError names file:line."""
    name = scoring_script or "score.py"
    path = Path(code_dir) / name
    if not path.is_file():
        raise check.fail("deployment.scoring_script", f"{path} does not exist",
                         "pass the code folder that holds the scoring script (init() and run(raw_data))")
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:
        raise check.fail("deployment.scoring_script", f"{exc.filename}:{exc.lineno}: {exc.msg} "
                         f"({(exc.text or '').strip()[:120]!r})", "fix the script: it would fail to load in the "
                         "deployment, after the whole sweep was paid for") from None
    except ValueError as exc:  # a NUL byte, which compile refuses
        raise check.fail("deployment.scoring_script", f"{path} is not Python source ({exc})",
                         "pass the scoring script's source file") from None
