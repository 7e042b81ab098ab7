"""The champion/challenger gate: both deployments answer the same evaluation set through the endpoint (by the
deployment header), and the gate compares their answers item by item, never training logs.

The set is one no sweep saw: an image classifier's ``test/`` split (accuracy, maximized), or the team's own file of
labelled requests in its code folder with a metric function beside it (``metrics.py:rmse``, with its goal).

The decision is a paired comparison on the same items, so that chance does not promote: for accuracy, McNemar's
exact test on the items only one model got right (a Clopper-Pearson bound on the share the challenger wins among
them); for any other metric, a paired bootstrap of the metric's difference over the set's requests (resampled
together, seeded: the same answers give the same decision). The challenger is promoted only when the one-sided lower
confidence bound of its improvement exceeds ``min_improvement`` and the set holds at least ``min_samples`` items;
fewer is no evidence, and no evidence never promotes.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Strict, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.backend.protocol import Backend
from mlrunway.errors import EndpointError, SpecError
from mlrunway.settings import EMPTY_IS_NONE, NOT_A_FLAG, SettingsError, parse, setting

Metric = Callable[[list[Any], list[Any]], float]
BATCH = 32  # images per evaluation request
SET_FIELDS = ("file", "metric", "goal")  # a team's set; without them, an image classifier's test/ split


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(
    extra="forbid", json_schema_extra={"dependentRequired": {"file": ["metric"], "metric": ["file"]}}))
class Evaluation:
    """The ``evaluation`` field, declared once (:mod:`mlrunway.settings`): a team's set (``file``, ``metric``,
    ``goal``; without them, an image classifier's ``test/`` split) and how sure the gate must be. Its validation,
    the DAG's ``evaluation`` Param and preflight all come from this declaration."""

    file: Annotated[str, Strict()] | None = setting(
        None, min_length=1, description="A JSONL file of labelled requests in the code folder, one {\"request\": ..., "
                                        "\"expected\": ...} per line.",
        problem="{value!r} is not a file name", fix="name a JSONL file of the code folder, e.g. eval.jsonl")
    metric: Annotated[str, Strict()] | None = setting(
        None, pattern=r"^[^:]+\.py:\w+$", description="The metric: <file>.py:<function> in the code folder, called "
                                                     "with (answers, expected).",
        problem="{value!r} is not <file>.py:<function>", fix="write e.g. metrics.py:rmse")
    goal: Literal["maximize", "minimize"] = setting(
        "maximize", description="Whether a larger or a smaller metric is better.",
        problem="{value!r} is not maximize or minimize", fix="write maximize or minimize")
    confidence: Annotated[float, Strict()] = setting(
        0.95, ge=0.5, lt=1, description="The confidence of the one-sided lower bound on the improvement.",
        problem="{value!r} is not a confidence in [0.5, 1)",
        fix="write e.g. 0.95 (promote when the improvement's 95% lower bound clears min_improvement)")
    min_samples: Annotated[int, Strict()] = setting(
        100, ge=1, description="The items (images, or a team's requests) the set must hold to judge at all.",
        problem="{value!r} is not a whole number >= 1", fix="write e.g. 100")
    resamples: Annotated[int, Strict()] = setting(
        2000, ge=200, description="The paired bootstrap's resamples, for a metric other than accuracy.",
        problem="{value!r} is not a whole number >= 200", fix="write e.g. 2000")

    @model_validator(mode="after")
    def _file_and_metric_together(self) -> Evaluation:
        for given, missing in (("file", "metric"), ("metric", "file")):
            if getattr(self, given) is not None and getattr(self, missing) is None:
                raise SettingsError(missing, f"is missing beside {given}: a team's set needs both file and metric",
                                    'give both, e.g. {"file": "eval.jsonl", "metric": "metrics.py:rmse"}')
        return self

    @classmethod
    def parse(cls, value: dict[str, Any] | None) -> Evaluation:
        return parse(cls, value, "evaluation", noun="evaluation")


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class Promotion:
    """A production endpoint's promotion, declared once (:mod:`mlrunway.settings`): the stable endpoint, whether a
    person approves, and by how much a challenger must beat the champion. The trigger form shows each as a field
    of its own; a template may render ``require_approval`` and ``min_improvement`` as text ("true", "0.01")."""

    endpoint_name: Annotated[Annotated[str, Strict()] | None, EMPTY_IS_NONE] = setting(
        None, pattern=check.ENDPOINT_NAME.pattern, title="Production endpoint",
        description="A stable endpoint that outlives runs (3 to 32 letters, digits and hyphens, a letter first, no "
                    "hyphen last): this run's model is a challenger, promoted only if it beats the serving one, "
                    "through a staged rollout. Empty: the run's own endpoint, deleted at cleanup; the fields below "
                    "then do nothing.",
        problem="{value!r} is not a valid endpoint name",
        fix="use 3 to 32 letters, digits and hyphens, starting with a letter and not ending with a hyphen")
    require_approval: bool = setting(
        False, title="Require a person's approval",
        description="Wait for a person's approval (python -m mlrunway.airflow.approval) after the gate, before "
                    "traffic moves.", problem="{value!r} is not true or false", fix="write true or false")
    min_improvement: Annotated[float, NOT_A_FLAG] = setting(
        0.0, ge=0, allow_inf_nan=False, title="Minimum improvement",
        description="How much better the challenger must score at the gate's confidence (the lower bound of its "
                    "improvement must clear this).", problem="{value!r} is not a number >= 0",
        fix="write e.g. 0 or 0.005")

    @classmethod
    def parse(cls, **given: Any) -> Promotion:
        """From the deploy task's arguments of the same names (None: the default); a bad one names its field."""
        return parse(cls, {k: v for k, v in given.items() if v is not None}, "", noun="production endpoint")

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> Promotion:
        """The promotion's own settings among a deployment's (``settings``: the deploy task's, a description's)."""
        return cls.parse(**{f.name: settings.get(f.name) for f in fields(cls)})


@dataclass(frozen=True, kw_only=True)
class GateSettings:
    """How sure the gate must be (the ``evaluation`` field's, :class:`Evaluation`) and by how much the challenger
    must improve. ``confidence``: of the one-sided lower bound on the improvement; ``min_samples``: the items the
    set must hold to judge at all; ``resamples``: the paired bootstrap's, for a metric other than accuracy."""

    min_improvement: float = 0.0
    confidence: float = 0.95
    min_samples: int = 100
    resamples: int = 2000

    @classmethod
    def parse(cls, spec: dict[str, Any] | None, min_improvement: float = 0.0) -> GateSettings:
        """From the ``evaluation`` field and the ``min_improvement`` param; a bad one names the field and the fix."""
        evaluation = Evaluation.parse(spec)
        return cls(min_improvement=Promotion.parse(min_improvement=min_improvement).min_improvement,
                   confidence=evaluation.confidence,
                   min_samples=evaluation.min_samples, resamples=evaluation.resamples)


@dataclass(frozen=True)
class EvaluationSet:
    """Requests, the expected answer of each, and how answers are scored: ``metric(answers, expected)``.
    ``items``, when the metric is an accuracy: each item's hit or miss, ``items(answers, expected)``, the paired
    comparison's unit (a request may hold several items: a batch of images)."""

    requests: list[Any]
    expected: list[Any]
    metric: Metric
    metric_name: str
    goal: str
    size: int
    items: Callable[[list[Any], list[Any]], list[bool]] | None = None


@dataclass(frozen=True)
class Comparison:
    """Champion and challenger on the same items. ``improvement`` is positive when the challenger is better (either
    goal); ``lower_bound`` is its one-sided lower confidence bound at ``confidence``. For McNemar, ``discordant`` is
    (items only the challenger got right, items only the champion got right) and ``p_value`` the exact one-sided
    test's that the challenger is no better."""

    method: str
    metric: str
    goal: str
    champion: float
    challenger: float
    improvement: float
    lower_bound: float
    confidence: float
    samples: int
    discordant: tuple[int, int] | None = None
    p_value: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}
        data["discordant"] = list(self.discordant) if self.discordant else None
        return data


def correct(answers: list[Any], expected: list[Any]) -> list[bool]:
    """Each item's top-1 hit, for classifier answers (``{"predictions": [{"label": ...}]}``) against lists of
    labels, one list per request."""
    hits: list[bool] = []
    for answer, labels in zip(answers, expected, strict=True):
        predictions = answer.get("predictions", []) if isinstance(answer, dict) else []
        if len(predictions) != len(labels):
            raise EndpointError(f"gate: an answer holds {len(predictions)} predictions for {len(labels)} inputs")
        hits += [str(p.get("label")) == str(label) for p, label in zip(predictions, labels, strict=True)]
    return hits


def accuracy(answers: list[Any], expected: list[Any]) -> float:
    """Top-1 accuracy of classifier answers against lists of labels."""
    hits = correct(answers, expected)
    return sum(hits) / len(hits) if hits else 0.0


def classifier_set(data_dir: str | Path, signature: dict[str, Any]) -> EvaluationSet:
    """The ``test/`` split of an ImageFolder dataset, preprocessed as the model's signature says."""
    from mlrunway.onnx_export.images import load_labeled

    folder = Path(data_dir) / "test"
    if not folder.is_dir():
        raise check.fail("evaluation", f"{folder} does not exist: there is no held-out set to compare models on",
                         "add a test/ split no sweep sees (python -m mlrunway.data writes one), or name a file of "
                         "labelled requests in evaluation.file")
    classes = signature["classes"]
    inputs, labels = load_labeled(folder, classes, signature["preprocessing"])
    requests = [{"data": inputs[i:i + BATCH].tolist()} for i in range(0, len(inputs), BATCH)]
    expected = [[classes[int(y)] for y in labels[i:i + BATCH]] for i in range(0, len(labels), BATCH)]
    return EvaluationSet(requests, expected, accuracy, "accuracy", "maximize", len(labels), items=correct)


def names_set(spec: dict[str, Any] | None) -> bool:
    """Whether the ``evaluation`` field names a team's set (``file``, ``metric``, ``goal``) rather than only the
    gate's settings for an image classifier's ``test/`` split; an unknown field or a bad setting names the fix."""
    Evaluation.parse(spec)
    return any(field in (spec or {}) for field in SET_FIELDS)


def team_set(code_dir: str | Path, spec: dict[str, Any]) -> EvaluationSet:
    """A team's set: ``{"file": "eval.jsonl", "metric": "metrics.py:rmse", "goal": "minimize"}``, paths in the
    code folder. Each line of the file is ``{"request": <body score.py takes>, "expected": <anything>}``; the
    metric function takes (answers, expected), the parsed answers and the expected values, and returns a number."""
    code = Path(code_dir)
    declared = Evaluation.parse(spec)
    path = code / str(declared.file or "")
    if not declared.file or not path.is_file():
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
    metric, name = _metric(code, str(declared.metric or ""))
    return EvaluationSet(requests, expected, metric, name, declared.goal, len(requests))


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


def answers(backend: Backend, endpoint: str, deployment: str, evaluation: EvaluationSet) -> list[Any]:
    """Send every request of the set to ``deployment`` by header; its parsed answers, in order."""
    parsed = []
    for request in evaluation.requests:
        body = backend.endpoints.invoke(endpoint, payload=request, deployment=deployment)
        try:
            parsed.append(json.loads(body))
        except ValueError as exc:
            raise EndpointError(f"gate: deployment {deployment} answered {body[:200]!r}, not JSON") from exc
    return parsed


def score(evaluation: EvaluationSet, answered: list[Any], deployment: str) -> float:
    """The set's metric over ``answered``; NaN is an error naming the deployment."""
    value = float(evaluation.metric(answered, evaluation.expected))
    if value != value:  # NaN
        raise SpecError(f"evaluation.metric: {evaluation.metric_name} returned NaN for deployment {deployment}")
    return value


def compare(evaluation: EvaluationSet, champion: list[Any], challenger: list[Any],
            settings: GateSettings) -> Comparison:
    """The paired comparison of two deployments' answers to the set: McNemar's when the set scores items (accuracy),
    else a paired bootstrap of its metric."""
    if evaluation.items is not None:
        return mcnemar(evaluation.items(champion, evaluation.expected), evaluation.items(challenger, evaluation.expected),
                       settings.confidence)
    return paired_bootstrap(evaluation, champion, challenger, settings.confidence, settings.resamples)


def mcnemar(champion: list[bool], challenger: list[bool], confidence: float) -> Comparison:
    """Accuracy's paired comparison. Of the ``m`` items the two disagree on, the challenger alone is right on ``b``;
    the accuracy difference is ``(2b - m) / n``, and given ``m`` its lower bound is ``m/n (2 p_low - 1)`` with
    ``p_low`` the one-sided Clopper-Pearson lower bound of ``b/m``. Above 0 exactly when McNemar's exact test
    (binomial, one-sided) rejects "no better" at ``1 - confidence``."""
    from scipy import stats

    n = len(champion)
    if n != len(challenger):
        raise ValueError(f"{n} champion items against {len(challenger)} challenger items")
    b = sum(1 for h, c in zip(champion, challenger, strict=True) if c and not h)
    c_only = sum(1 for h, c in zip(champion, challenger, strict=True) if h and not c)
    m = b + c_only
    alpha = 1.0 - confidence
    p_low = float(stats.beta.ppf(alpha, b, m - b + 1)) if b > 0 else 0.0
    base, new = sum(champion) / n if n else 0.0, sum(challenger) / n if n else 0.0
    return Comparison("mcnemar", "accuracy", "maximize", base, new, new - base,
                      m / n * (2 * p_low - 1) if m else 0.0, confidence, n, (b, c_only),
                      float(stats.binom.sf(b - 1, m, 0.5)) if m else 1.0)


def paired_bootstrap(evaluation: EvaluationSet, champion: list[Any], challenger: list[Any], confidence: float,
                     resamples: int, seed: int = 0) -> Comparison:
    """Any metric's paired comparison: the set's requests resampled with replacement (the same rows for both
    models, ``resamples`` times, seeded), the metric's improvement in each, and its ``1 - confidence`` quantile as
    the lower bound."""
    import numpy as np

    n = len(evaluation.expected)
    sign = 1.0 if evaluation.goal == "maximize" else -1.0
    base, new = score(evaluation, champion, "champion"), score(evaluation, challenger, "challenger")
    rng = np.random.default_rng(seed)
    differences = np.empty(resamples)
    for i in range(resamples):
        rows = rng.integers(0, n, n)
        expected = [evaluation.expected[j] for j in rows]
        differences[i] = sign * (float(evaluation.metric([challenger[j] for j in rows], expected))
                                 - float(evaluation.metric([champion[j] for j in rows], expected)))
    if np.isnan(differences).any():
        raise SpecError(f"evaluation.metric: {evaluation.metric_name} returned NaN on a resample of the set")
    return Comparison("paired bootstrap", evaluation.metric_name, evaluation.goal, base, new, sign * (new - base),
                      float(np.quantile(differences, 1.0 - confidence)), confidence, n)


def decide(comparison: Comparison, settings: GateSettings) -> tuple[bool, str, str]:
    """Promote only when the set holds ``min_samples`` items and the improvement's lower bound clears
    ``min_improvement`` (strictly). Returns the decision, the verdict in a few words (``better``, ``not better``,
    ``not better beyond chance``, ``too little evidence``) and the figures behind it."""
    c = comparison
    figures = (f"{c.metric} {c.challenger:.4g} against the champion's {c.champion:.4g} on {c.samples} samples: "
               f"{_signed(c.improvement)}, {c.confidence:.0%} lower bound {_signed(c.lower_bound)} ({c.method}"
               + (f", {c.discordant[0]} items only the challenger got right, {c.discordant[1]} only the champion"
                  if c.discordant else "") + f"; min_improvement {settings.min_improvement:g})")
    if c.samples < settings.min_samples:
        return False, "too little evidence", (f"{figures}; {c.samples} samples are fewer than evaluation.min_samples"
                                              f"={settings.min_samples}, and no evidence never promotes")
    if c.lower_bound > settings.min_improvement:
        return True, "better", figures
    if c.improvement > settings.min_improvement:
        return False, "not better beyond chance", figures
    return False, "not better", figures


def _signed(value: float) -> str:
    return f"{value:+.4g}" if math.isfinite(value) else str(value)
