"""Check a run's jobs together before its first one starts (Params check each field alone)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.naming import RunNames
from mlrunway.backend.protocol import Rollout
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
                     min_improvement: float = 0.0) -> None:
    """A stable endpoint's settings, before any job: its name, the rollout policy, the evaluation set (the team's
    file and metric function, or a classifier's test/ split) and that the backend can roll out."""
    if not endpoint_name:
        return
    check.endpoint_name(endpoint_name, "endpoint_name")
    RolloutPolicy.parse(dict(rollout or {}))
    gate.GateSettings.parse(dict(evaluation or {}), min_improvement)
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
    """What the smoke test will send and compare, before any job: ``sample_request`` and ``expected_response``
    (in the code folder, or absolute) exist and hold JSON, ``ignore_keys`` is a list of key names, and without a
    request there is ``data_dir`` (an image classifier's validation images) to smoke-test with."""
    files = {"sample_request": sample_request, "expected_response": expected_response}
    for field, name in files.items():
        if not name:
            continue
        path = Path(code_dir) / name
        if not path.is_file():
            raise check.fail(f"deployment.{field}", f"{path} does not exist", "name a JSON file in code_dir")
        try:
            json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise check.fail(f"deployment.{field}", f"{path} is not JSON ({exc})", "write it with json.dump") from exc
    if expected_response and not sample_request:
        raise check.fail("deployment.expected_response", "is given without sample_request",
                         "name the request file whose answer it is in sample_request")
    if not sample_request and not data_dir:
        raise check.fail("deployment.sample_request", "is missing, and without data_dir there are no images to "
                         "smoke-test with", "name a JSON request file in code_dir that score.py answers")
    if ignore_keys is not None and (isinstance(ignore_keys, str) or not isinstance(ignore_keys, Sequence)
                                    or not all(isinstance(k, str) and k for k in ignore_keys)):
        raise check.fail("deployment.ignore_keys", f"{ignore_keys!r} is not a list of key names",
                         'write e.g. ["request_id", "timestamp"]')


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
