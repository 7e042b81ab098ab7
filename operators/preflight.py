"""Check a run's jobs together before its first one starts (Params check each field alone)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.naming import RunNames
from mlrunway.backend.protocol import Rollout
from mlrunway.deploy.smoke import SmokeTest
from mlrunway.errors import SpecError
from mlrunway.operators._base import MlrunwayBaseOperator
from mlrunway.operators.sweep import sweep_spec
from mlrunway.pipeline import check_prefix
from mlrunway.production import gate
from mlrunway.production.rollout import RolloutPolicy
from mlrunway.specs import SweepSpec, vocabulary


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
        for field, built in (("job", train), ("trial", spec.trial)):
            try:
                task.backend.jobs.validate(built)
            except SpecError as exc:  # a backend names the job's fields command_job.*; the DAG calls it `field`
                raise SpecError(str(exc).replace("command_job.", f"{field}.", 1)) from None
    return spec


def check_production(context: Any, *, endpoint_name: str | None, rollout: Mapping[str, Any] | None,
                     evaluation: Mapping[str, Any] | None, code_dir: str, data_dir: str | None,
                     min_improvement: float = 0.0, require_approval: bool | str = False) -> None:
    """A stable endpoint's settings, before any job: its name and promotion
    (:class:`~mlrunway.production.gate.Promotion`), the rollout policy, the evaluation set (the team's file and
    metric function, or a classifier's test/ split) and that the backend can roll out."""
    if not gate.Promotion.parse(endpoint_name=endpoint_name, min_improvement=min_improvement,
                                require_approval=require_approval).endpoint_name:
        return
    RolloutPolicy.parse(dict(rollout or {}))
    gate.Evaluation.parse(dict(evaluation or {}))
    if gate.names_set(dict(evaluation or {})):
        gate.team_set(code_dir, dict(evaluation or {}))
    elif data_dir is None or not (Path(data_dir) / "test").is_dir():
        raise check.fail("evaluation", f"there is no {Path(data_dir or '.') / 'test'} to compare the challenger with "
                         "the champion on", "add a test/ split no sweep sees, or name a file of labelled requests "
                         "and a metric in evaluation")
    task = context.get("task")
    if isinstance(task, MlrunwayBaseOperator) and not isinstance(task.backend.endpoints, Rollout):
        raise check.fail("endpoint_name", f"the {task.backend.kind} backend has no staged rollout yet",
                         "leave endpoint_name empty: each run deploys to its own endpoint")


def check_smoke(*, code_dir: str, data_dir: str | None, sample_request: str | None,
                expected_response: str | None, ignore_keys: Sequence[str] | None) -> None:
    """What the smoke test will send and compare, before any job: the settings as
    :class:`~mlrunway.deploy.smoke.SmokeTest` declares them (without a request, ``data_dir`` to smoke-test with),
    and each file named, in the code folder (or absolute), exists and holds JSON."""
    given = SmokeTest.parse({"sample_request": sample_request, "expected_response": expected_response,
                             "ignore_keys": ignore_keys}, "deployment", data_dir=data_dir)
    for field in ("sample_request", "expected_response"):
        name = getattr(given, field)
        if not name:
            continue
        path = Path(code_dir) / name
        if not path.is_file():
            raise check.fail(f"deployment.{field}", f"{path} does not exist", "name a JSON file in code_dir")
        try:
            json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise check.fail(f"deployment.{field}", f"{path} is not JSON ({exc})", "write it with json.dump") from exc


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
