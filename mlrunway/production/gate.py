"""The champion/challenger gate: both deployments answer the same evaluation set through the endpoint (by the
deployment header), and the gate's metric is computed from their answers, never from training logs.

The set is one no sweep saw: an image classifier's ``test/`` split (accuracy, maximized), or the team's own file of
labelled requests in its code folder with a metric function beside it (``metrics.py:rmse``, with its goal).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.protocol import Backend
from mlrunway.errors import EndpointError, SpecError

Metric = Callable[[list[Any], list[Any]], float]
BATCH = 32  # images per evaluation request


@dataclass(frozen=True)
class EvaluationSet:
    """Requests, the expected answer of each, and how answers are scored: ``metric(answers, expected)``."""

    requests: list[Any]
    expected: list[Any]
    metric: Metric
    metric_name: str
    goal: str
    size: int


def accuracy(answers: list[Any], expected: list[Any]) -> float:
    """Top-1 accuracy of classifier answers (``{"predictions": [{"label": ...}]}``) against lists of labels."""
    hits = total = 0
    for answer, labels in zip(answers, expected, strict=True):
        predictions = answer.get("predictions", []) if isinstance(answer, dict) else []
        if len(predictions) != len(labels):
            raise EndpointError(f"gate: an answer holds {len(predictions)} predictions for {len(labels)} inputs")
        hits += sum(str(p.get("label")) == str(label) for p, label in zip(predictions, labels, strict=True))
        total += len(labels)
    return hits / total if total else 0.0


def classifier_set(data_dir: str | Path, signature: dict[str, Any]) -> EvaluationSet:
    """The ``test/`` split of an ImageFolder dataset, preprocessed as the model's signature says."""
    from mlrunway.data.images import load_labeled

    folder = Path(data_dir) / "test"
    if not folder.is_dir():
        raise check.fail("evaluation", f"{folder} does not exist: there is no held-out set to compare models on",
                         "add a test/ split no sweep sees (python -m mlrunway.data writes one), or name a file of "
                         "labelled requests in evaluation.file")
    classes = signature["classes"]
    inputs, labels = load_labeled(folder, classes, signature["preprocessing"])
    requests = [{"data": inputs[i:i + BATCH].tolist()} for i in range(0, len(inputs), BATCH)]
    expected = [[classes[int(y)] for y in labels[i:i + BATCH]] for i in range(0, len(labels), BATCH)]
    return EvaluationSet(requests, expected, accuracy, "accuracy", "maximize", len(labels))


def team_set(code_dir: str | Path, spec: dict[str, Any]) -> EvaluationSet:
    """A team's set: ``{"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": "minimize"}``, paths in the
    code folder. Each line of the file is ``{"request": <body score.py takes>, "expected": <anything>}``; the
    metric function takes (answers, expected), the parsed answers and the expected values, and returns a number."""
    code = Path(code_dir)
    unknown = sorted(set(spec) - {"file", "metric", "goal"})
    if unknown:
        raise check.fail(f"evaluation.{unknown[0]}", "is not an evaluation field", "use file, metric and goal")
    path = code / str(spec.get("file") or "")
    if not spec.get("file") or not path.is_file():
        raise check.fail("evaluation.file", f"{path} does not exist", "name a JSONL file of labelled requests in the "
                         "code folder: one {\"request\": ..., \"expected\": ...} per line")
    requests, expected = [], []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            requests.append(row["request"])
            expected.append(row["expected"])
        except (ValueError, KeyError, TypeError) as exc:
            raise check.fail(f"evaluation.file line {number}", f"is not {{\"request\": ..., \"expected\": ...}} ({exc})",
                             "write one JSON object per line") from None
    if not requests:
        raise check.fail("evaluation.file", f"{path} holds no requests", "add labelled requests")
    goal = check.one_of("evaluation.goal", spec.get("goal", "maximize"), ("maximize", "minimize"))
    metric, name = _metric(code, str(spec.get("metric") or ""))
    return EvaluationSet(requests, expected, metric, name, goal, len(requests))


def _metric(code: Path, ref: str) -> tuple[Metric, str]:
    script, _, function = ref.partition(":")
    path = code / script
    if not function or not path.is_file():
        raise check.fail("evaluation.metric", f"{ref!r} names no function of a file in {code}",
                         "write <file>.py:<function> (e.g. metrics.py:rmse), a function of (answers, expected)")
    spec = importlib.util.spec_from_file_location(f"mlrunway_gate_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise check.fail("evaluation.metric", f"{path} cannot be imported", "name a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = getattr(module, function, None)
    if not callable(found):
        raise check.fail("evaluation.metric", f"{path.name} has no function {function!r}", "define it")
    return found, function


def evaluate(backend: Backend, endpoint: str, deployment: str, evaluation: EvaluationSet) -> float:
    """Send every request of the set to ``deployment`` by header; score its answers with the set's metric."""
    answers = []
    for request in evaluation.requests:
        body = backend.endpoints.invoke(endpoint, payload=request, deployment=deployment)
        try:
            answers.append(json.loads(body))
        except ValueError as exc:
            raise EndpointError(f"gate: deployment {deployment} answered {body[:200]!r}, not JSON") from exc
    value = float(evaluation.metric(answers, evaluation.expected))
    if value != value:  # NaN
        raise SpecError(f"evaluation.metric: {evaluation.metric_name} returned NaN for deployment {deployment}")
    return value


def decide(champion: float, challenger: float, goal: str, min_improvement: float) -> tuple[bool, float]:
    """Whether the challenger beats the champion by at least ``min_improvement`` (and strictly), and by how much
    (positive is better, whichever the goal)."""
    improvement = challenger - champion if goal == "maximize" else champion - challenger
    return improvement > 0 and improvement >= min_improvement, improvement
