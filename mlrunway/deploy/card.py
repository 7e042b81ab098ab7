"""A model card for every version that reaches an endpoint: the evidence behind it, in one page.

What it holds: the intended use (the team's words, when given), the data (the job's inputs and the run's data
interval), the training (command, environment, distribution, the chosen trial's hyperparameters, the sweep with its
sampling and early termination), the evaluation (a stable endpoint's gate: set, metric, sample size, challenger
against champion, and the rollout's windows), the ONNX parity figures, the lineage ids (jobs, runs, versions,
endpoint) and the decision history (deployed, created, promoted, held, rolled back, replaced, with times).

Everything comes from the backend (the ONNX version, its source version, the sweep's record) and from what the
deploy task was told (``description``: the job and the sweep in azure-ai-ml's words), so the card is the same on
both backends. It is kept with the run's reports, ``<reports>/model-cards/<name>/<version>/`` (``card.md``,
``card.html``, ``card.json``), and, where jobs keep files (:class:`~mlrunway.backend.protocol.Artifacts`), as
artifacts of the source trial's run under ``model-card/``. A version is immutable, so each decision rebuilds its
card (the history read back from ``card.json``) and the tag ``mlrunway.model_card`` points to it.

    record(backend, "digits-onnx:3", reports, description={...}, event={"decision": "promoted", ...})
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlrunway.backend.protocol import Artifacts, Backend
from mlrunway.errors import MlrunwayError, NotFound
from mlrunway.ledger.cost import cost_rows
from mlrunway.ledger.reports import ReportsFolder
from mlrunway.onnx_export.parity import per_output
from mlrunway.sweep.leaderboard import format_params

CARD_TAG = "mlrunway.model_card"  # a version's tag: where its card's HTML is
MARKDOWN, HTML_FILE, DATA_FILE = "card.md", "card.html", "card.json"


@dataclass(kw_only=True)
class ModelCard:
    """The card's sections as data; each is a list of (field, value) rows, empty when nothing is known."""

    model: str
    intended_use: str | None = None
    data: list[tuple[str, str]] = field(default_factory=list)
    training: list[tuple[str, str]] = field(default_factory=list)
    evaluation: list[tuple[str, str]] = field(default_factory=list)
    parity: list[tuple[str, str]] = field(default_factory=list)
    cost: list[tuple[str, str]] = field(default_factory=list)
    lineage: list[tuple[str, str]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    updated: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelCard:
        rows = ("data", "training", "evaluation", "parity", "cost", "lineage")
        return cls(**{**data, **{k: [tuple(r) for r in data.get(k, [])] for k in rows}})


def collect(backend: Backend, model: str, *, description: dict[str, Any] | None = None,
            intended_use: str | None = None, data_interval: tuple[str, str] | None = None,
            history: list[dict[str, Any]] | None = None, cost: dict[str, Any] | None = None) -> ModelCard:
    """The card of ``model`` (``name:version``, the ONNX version an endpoint serves) from the registry, the sweep's
    record, ``description`` (``{"job": ..., "sweep": ...}`` as the DAG gave them) and ``cost``, what the run that
    made it spent on compute (:meth:`mlrunway.ledger.cost.RunCost.to_dict`)."""
    name, _, version = model.partition(":")
    served = backend.models.get(name, int(version))
    props = served.properties
    source = _source(backend, str(props.get("source_model") or ""))
    job = dict((description or {}).get("job") or {})
    sweep = dict((description or {}).get("sweep") or {})
    source_props = source.properties if source else {}
    card = ModelCard(model=model, intended_use=intended_use or None, history=list(history or []))
    for key, value in (job.get("inputs") or {}).items():
        card.data.append((f"input {key}", _input(value)))
    if data_interval:
        card.data.append(("data interval", f"{data_interval[0]} to {data_interval[1]}"))
    card.training += [(k, _text(job[k])) for k in ("command", "environment", "distribution", "compute") if job.get(k)]
    if source_props.get("params"):
        card.training.append(("hyperparameters", format_params(source_props["params"])))
    card.training += _sweep_rows(backend, str(source_props.get("sweep") or ""), sweep)
    card.evaluation = _evaluation(served.tags)
    parity = props.get("parity") or {}
    if parity:
        card.parity = [(k, _text(parity[k])) for k in ("max_abs_diff", "tolerance_used", "atol", "rtol",
                                                      "top1_agreement", "samples", "inputs", "passed") if k in parity]
        card.parity.insert(0, ("opset", _text(props.get("opset", "?"))))
        card.parity += [(f"output {name}", figures) for name, figures in per_output(parity)]
    card.cost = cost_rows(cost)
    card.lineage = [(k, v) for k, v in (
        ("served version", model), ("source version", str(props.get("source_model") or "")),
        ("trial job", str(source_props.get("source_job") or "")), ("sweep", str(source_props.get("sweep") or "")),
        ("trial's MLflow run", _run_id(backend, str(source_props.get("source_job") or ""))),
        ("endpoint", str(served.tags.get("mlrunway.endpoint") or _last(card.history, "endpoint")))) if v]
    return card


def record(backend: Backend, model: str, reports: str | Path, *, event: dict[str, Any],
           description: dict[str, Any] | None = None, intended_use: str | None = None,
           data_interval: tuple[str, str] | None = None, cost: dict[str, Any] | None = None) -> Path:
    """Add ``event`` (``decision``, ``endpoint``, ``reason``; ``at`` is now) to the version's history, rebuild and
    save its card, keep it with the source trial's run where the backend keeps artifacts, and point the version's
    tag at it. Return the HTML's path. The description and intended use of an earlier card stand when none is
    given (a later run's decision on an older version)."""
    name, _, version = model.partition(":")
    folder = ReportsFolder(Path(reports)).card(name, version)
    before = load(folder)
    stamped = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **event}
    card = collect(backend, model, description=description, intended_use=intended_use, data_interval=data_interval,
                   history=[*(before.history if before else []), stamped], cost=cost)
    if before is not None:  # what only the deploy task that created the card knew
        card.intended_use = card.intended_use or before.intended_use
        card.data = card.data or before.data
        card.cost = card.cost or before.cost
        card.training = _merged(card.training, before.training)
    page = save(card, folder)
    source_job = dict(card.lineage).get("trial job")
    if source_job and isinstance(backend.jobs, Artifacts):
        backend.jobs.log_artifacts(source_job, folder, "model-card")
    backend.models.update_tags(name, int(version), {CARD_TAG: str(page)})
    return page


def save(card: ModelCard, folder: str | Path) -> Path:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / DATA_FILE).write_text(json.dumps(card.to_dict(), indent=1, default=str))
    (out / MARKDOWN).write_text(render_markdown(card))
    page = out / HTML_FILE
    page.write_text(render_html(card))
    return page


def load(folder: str | Path) -> ModelCard | None:
    """The card saved in ``folder``, or None (none yet, or one that cannot be read: it is rebuilt)."""
    try:
        return ModelCard.from_dict(json.loads((Path(folder) / DATA_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def card_page(reports: str | Path, name: str, version: int | str) -> Path | None:
    page = ReportsFolder(Path(reports)).card(name, version) / HTML_FILE
    return page if page.is_file() else None


def _sections(card: ModelCard) -> list[tuple[str, list[tuple[str, str]], str]]:
    history = [(e["at"], f"{e.get('decision', '?')} on {e.get('endpoint', '?')}: {e.get('reason', '')}".rstrip(": "))
               for e in card.history]
    return [
        ("Intended use", [], card.intended_use or "Not given by the team (the deploy task's intended_use)."),
        ("Data", card.data, "No inputs recorded."),
        ("Training", card.training, "No training description recorded."),
        ("Evaluation", card.evaluation, "No gate: a per-run endpoint is smoke-tested, not compared with a champion."),
        ("ONNX parity", card.parity, "No parity figures recorded."),
        ("Cost to produce (an estimate)", card.cost, "Not recorded: the backend does not say what its jobs ran on."),
        ("Lineage", card.lineage, ""),
        ("Decision history", history, "No decision yet."),
    ]


def render_markdown(card: ModelCard) -> str:
    lines = [f"# Model card: {card.model}", ""]
    for title, rows, empty in _sections(card):
        lines += [f"## {title}", ""]
        if title == "Intended use":
            lines += [empty if not card.intended_use else card.intended_use, ""]
            continue
        if not rows:
            lines += [empty, ""] if empty else []
            continue
        lines += ["| | |", "| --- | --- |", *(f"| {k} | {_cell(v)} |" for k, v in rows), ""]
    lines.append(f"Updated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(card.updated))}.")
    return "\n".join(lines) + "\n"


def render_html(card: ModelCard) -> str:
    """The card's page (``templates/model_card.html``): the same sections as its Markdown."""
    from mlrunway.pages import render

    return render("model_card.html", title=f"Model card {card.model}", card=card, sections=list(_sections(card)),
                  updated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(card.updated)))


def _source(backend: Backend, model: str) -> Any:
    name, _, version = model.partition(":")
    if not version.isdigit():
        return None
    try:
        return backend.models.get(name, int(version))
    except NotFound:
        return None


def _sweep_rows(backend: Backend, sweep_name: str, sweep: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [(f"sweep {k}", _text(sweep[k])) for k in ("search_space", "sampling_algorithm", "seed", "limits",
                                                      "early_termination") if sweep.get(k) not in (None, "", {})]
    if not sweep_name:
        return rows
    try:
        result = backend.jobs.sweep_result(sweep_name)
    except (NotFound, MlrunwayError):
        return rows
    stopped = sum(1 for t in result.trials if t.stopped_early)
    rows.insert(0, ("sweep", f"{sweep_name}: {result.status.value}, {len(result.trials)} trials, {stopped} stopped "
                             f"early; {result.objective.primary_metric} {result.objective.goal}d"))
    return rows


def _evaluation(tags: dict[str, str]) -> list[tuple[str, str]]:
    """A stable endpoint's gate and windows, from the evidence tag its decision left (``stable.evidence``)."""
    try:
        evidence = json.loads(tags.get("mlrunway.evidence") or "{}")
    except ValueError:
        return [("evidence", "unreadable: " + tags.get("mlrunway.evidence", "")[:200])]
    rows = [(f"gate {k}", _text(v)) for k, v in (evidence.get("gate") or {}).items()]
    rows += [(f"window {w.get('phase')}", f"{'within bounds' if w.get('ok') else 'OUT OF BOUNDS'}: {w.get('reason')}")
             for w in evidence.get("windows") or []]
    return rows


def _run_id(backend: Backend, job: str) -> str:
    if not job:
        return ""
    try:
        return backend.jobs.get(job).mlflow_run_id or ""
    except (NotFound, MlrunwayError):
        return ""


def _last(history: list[dict[str, Any]], key: str) -> str:
    return next((str(e[key]) for e in reversed(history) if e.get(key)), "")


def _merged(now: list[tuple[str, str]], before: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The rows known now, then those only the earlier card had (a later run knows no command)."""
    known = {k for k, _ in now}
    return [*now, *((k, v) for k, v in before if k not in known)]


def _input(value: Any) -> str:
    if isinstance(value, dict) and "path" in value:
        return f"{value.get('type', 'uri_folder')} {value['path']}"
    return _text(value)


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def record_deployment(backend: Backend, reports: str | Path, model: str, result: dict[str, Any], **known: Any) -> \
        list[Path]:
    """The cards a deploy task's result changes: the deployed version's (its decision, or ``deployed`` on a run's
    own endpoint) and, after a promotion, the replaced champion's (``previous`` names it). ``known`` is
    :func:`record`'s description, intended use and data interval. Return the pages written."""
    endpoint = str(result.get("endpoint") or "")
    decision = str(result.get("decision") or "deployed")
    reason = str(result.get("reason") or "blue at 100% after the smoke test, on the run's own endpoint (deleted at "
                                          "the run's cleanup)")
    model = str(result.get("model") or model)
    pages = [record(backend, model, reports, event={"decision": decision, "endpoint": endpoint, "reason": reason},
                    **known)]
    if decision == "promoted":
        name = model.partition(":")[0]
        previous = backend.models.alias(name, "previous")
        if previous is not None and f"{previous.name}:{previous.version}" != model:
            pages.append(record(backend, f"{previous.name}:{previous.version}", reports,
                                event={"decision": "replaced", "endpoint": endpoint, "reason": f"{model} promoted"}))
    return pages
