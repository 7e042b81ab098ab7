"""The sweep report of one pipeline run: trial curves, leaderboard, chosen model, ONNX parity, endpoint.

Everything comes from the backend and the run's names (``RunNames``), so the same report is built live while a
sweep runs (the UI plugin's page) and saved as the run's artifact by the cleanup task, before the endpoint goes:

    report = collect(backend, names)
    save(report, folder)            # report.html (the plot inline), curves.png, report.json

The plot is a PNG drawn with matplotlib's Agg backend: one line per trial of the primary metric per epoch,
the chosen trial drawn thick, and an ``x`` where early termination stopped a trial.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mlrunway import check
from mlrunway.backend.attempts import latest_attempt
from mlrunway.backend.naming import RunNames, base_name
from mlrunway.backend.protocol import Artifacts, Backend, RunMetrics
from mlrunway.backend.types import JobStatus, SweepResult, TrialInfo
from mlrunway.early_termination.advice import advise
from mlrunway.errors import MlrunwayError, NotFound, SpecError
from mlrunway.ledger.cost import cost_of_run, cost_rows, estimated, serving_cost
from mlrunway.ledger.reports import ReportsFolder
from mlrunway.onnx_export.parity import per_output
from mlrunway.pages import render
from mlrunway.specs.sweep import Objective
from mlrunway.sweep.attempts import sweep_result
from mlrunway.sweep.leaderboard import format_params, rank, trial_score

HTML_FILE, PLOT_FILE, DATA_FILE = "report.html", "curves.png", "report.json"
log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(kw_only=True)
class SweepReport:
    """What the page and the artifact show; ``model``, ``onnx`` and ``endpoint`` are None until they exist (a
    version whose record is damaged holds ``damaged``: the backend's words, naming the file); ``production`` is a
    stable endpoint's decision on the run's model, with its evidence (else None)."""

    sweep: str
    sweep_status: str
    objective: Objective
    trials: list[TrialInfo]
    best_trial: str | None = None
    stopped_because: str | None = None
    model: dict[str, Any] | None = None
    onnx: dict[str, Any] | None = None
    endpoint: dict[str, Any] | None = None
    production: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    error: str | None = None  # why the sweep failed, as its job says
    cost: dict[str, Any] | None = None  # the run's compute once its sweep has ended (RunCost.to_dict), an estimate
    serving: dict[str, Any] | None = None  # its endpoint's deployments' serving so far, likewise
    advice: dict[str, Any] | None = None  # other early-termination settings replayed on its curves, once it ended
    # What a section could not read, by section (``production``, ``endpoint``, ...): said there, the rest stands.
    problems: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["objective"] = {"primary_metric": self.objective.primary_metric, "goal": self.objective.goal}
        data["trials"] = [t.to_dict() for t in self.trials]
        return data


def collect(backend: Backend, names: RunNames) -> SweepReport:
    """The run's report as it stands now, from the newest attempt of its sweep (with the trials earlier attempts
    completed). Raises NotFound until the run's sweep exists. A section whose record cannot be used (a tag that is
    not a name, a backend that refuses a read) says so in ``problems``: the rest of the report stands."""
    latest = latest_attempt(backend.jobs, names.sweep)
    if latest is None:
        raise NotFound(f"sweep {names.sweep!r} does not exist yet")
    result = sweep_result(backend.jobs, latest.name)
    problems: dict[str, str] = {}
    onnx = _section(problems, "onnx", lambda: _model(backend, f"{names.model}-onnx"))
    production = _production(onnx, problems)
    # The run's cost once the sweep has ended: its trials' figures no longer change, and a live page that
    # refreshes every few seconds would read every trial's record again each time (ARM reads, on Azure).
    ended = result.status.is_terminal()
    endpoint = None if "endpoint" in problems else _section(problems, "endpoint", lambda: _endpoint(
        backend, *([production["endpoint"]] if production else names.endpoints)))
    cost = estimated(f"run {names.run_key}", lambda: cost_of_run(backend, names)) if ended else None
    return SweepReport(sweep=latest.name, sweep_status=result.status.value, objective=result.objective,
                       cost=cost, advice=advice_of(result, cost) if ended else None,
                       serving=estimated(f"endpoint {endpoint['name']}", lambda: serving_cost(backend, endpoint["name"]))
                       if endpoint and ended else None,
                       trials=list(result.trials), best_trial=result.best_trial,
                       stopped_because=result.stopped_because, error=result.error or latest.error,
                       model=_section(problems, "model", lambda: _model(backend, names.model, latest.name)),
                       onnx=onnx, production=production, endpoint=endpoint, problems=problems)


def _section(problems: dict[str, str], section: str, read: Callable[[], _T]) -> _T | None:
    """What ``read`` gives; None, and the backend's words in ``problems[section]``, when it refuses (a damaged
    record, a name that is not one, an outage): one section's failure is no reason to lose the report."""
    try:
        return read()
    except MlrunwayError as exc:
        log.warning("The sweep report's %s section could not be read: %s", section, exc)
        problems[section] = str(exc)
        return None


def advice_of(result: SweepResult, cost: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What other early-termination settings would have done on the sweep's own curves
    (:mod:`mlrunway.early_termination.advice`), each trial's cost from ``cost`` where known; None for a sweep
    with no curve."""
    trials = sorted((t for t in result.trials if t.history), key=_index)
    if not trials:
        return None
    costs = {j["job"]: j["amount"] for j in ((cost or {}).get("jobs") or {}).get("trials", [])
             if j.get("amount") is not None}
    advice = advise(result.policy, {t.name: t.history for t in trials},
                    {t.name: int(t.early_termination["interval"]) for t in trials if t.early_termination},
                    [t.name for t in trials if t.status in (JobStatus.COMPLETED, JobStatus.FAILED)],
                    result.objective.goal, costs)
    return advice.to_dict()


def _index(trial: TrialInfo) -> tuple[int, str]:
    """A trial's place in its sweep's start order (``<sweep>_trial_<i>`` locally, ``<sweep>_<i>`` on Azure ML)."""
    tail = base_name(trial.name).rsplit("_", 1)[-1]
    return (int(tail), trial.name) if tail.isdigit() else (1 << 30, trial.name)


def _production(onnx: dict[str, Any] | None, problems: dict[str, str]) -> dict[str, Any] | None:
    """The decision a stable endpoint's deploy recorded on the model's version (see mlrunway.deploy.stable). Its
    tags are read as data: an endpoint tag that is not an endpoint's name, or evidence that is not the deploy's,
    is named in its section's ``problems`` (``endpoint``, ``production``), never looked up or drawn."""
    tags = (onnx or {}).get("tags", {})
    if "mlrunway.decision" not in tags:
        return None
    version = f"{onnx['name']}:{onnx['version']}" if onnx else "?"
    endpoint = tags.get("mlrunway.endpoint", "")
    try:
        check.endpoint_name(endpoint, f"tag mlrunway.endpoint of {version}")
    except SpecError as exc:
        problems["endpoint"] = str(exc)
    evidence = _evidence(tags.get("mlrunway.evidence", "{}"))
    if evidence is None:
        problems["production"] = (f"tag mlrunway.evidence of {version}: {_clipped(tags['mlrunway.evidence'])} is not "
                                  "the deploy's evidence (an object with a gate and a list of windows)")
    return {"decision": tags["mlrunway.decision"], "endpoint": endpoint,
            "reason": tags.get("mlrunway.reason", ""), "gate": (evidence or {}).get("gate", {}),
            "windows": (evidence or {}).get("windows", [])}


def _evidence(text: str) -> dict[str, Any] | None:
    """The deploy's evidence as recorded (``gate`` an object, ``windows`` a list of objects); None when it is not."""
    try:
        evidence = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(evidence, dict) or not isinstance(evidence.get("gate", {}), dict):
        return None
    windows = evidence.get("windows", [])
    if not isinstance(windows, list) or not all(isinstance(w, dict) for w in windows):
        return None
    return {"gate": evidence.get("gate", {}),
            "windows": [{"phase": w.get("phase", "?"), "ok": w.get("ok") is True, "reason": w.get("reason", "")}
                        for w in windows]}


def _clipped(value: Any, limit: int = 80) -> str:
    """``value`` as code would write it, cut to ``limit`` characters: a problem quotes what it read, not a page of it."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _model(backend: Backend, name: str, sweep: str | None = None) -> dict[str, Any] | None:
    """The newest version of ``name`` (of this sweep, when given), as a plain dict."""
    try:
        versions = backend.models.list(name)
    except NotFound:
        return None
    if sweep is not None:  # a damaged version's sweep is unknown: it may be this one's, and is shown as damaged
        versions = [v for v in versions if v.damaged or (v.properties or {}).get("sweep") == sweep]
    if not versions:
        return None
    latest = max(versions, key=lambda v: int(v.version))
    return {"name": latest.name, "version": int(latest.version), "properties": dict(latest.properties or {}),
            "tags": dict(latest.tags or {}), **({"damaged": latest.error} if latest.damaged else {})}


def _endpoint(backend: Backend, *names: str) -> dict[str, Any] | None:
    """The first of ``names`` that exists (a run's endpoint, or the name it had before names were salted)."""
    endpoint = backend.endpoints.first_existing(*names)
    if endpoint is None:
        return None
    return {"name": endpoint.name, "provisioning_state": endpoint.provisioning_state.value,
            "traffic": dict(endpoint.traffic), "scoring_uri": endpoint.scoring_uri}


LEGEND_MAX = 12  # trials named in the plot's legend: beyond it, the best ones (a legend of 200 is read by no one)


def plot_curves(report: SweepReport) -> bytes:
    """PNG of the primary metric per epoch, one line per trial; early-terminated trials end in an ``x``. Up to
    :data:`LEGEND_MAX` trials with a curve, each is named in the legend; beyond, the best of them are, and the
    others are drawn thin and unnamed."""
    from matplotlib.ticker import MaxNLocator

    fig = new_figure(figsize=(8, 4.5), dpi=100)
    ax = fig.subplots()
    drawn = [t for t in report.trials if t.history]
    named = legend_names(report)
    for index, trial in enumerate(report.trials):
        if not trial.history:
            continue
        epochs = range(1, len(trial.history) + 1)
        chosen = trial.name == report.best_trial
        decided = len(trial.judged)  # a stopped trial: the interval it was stopped at; it may have run on
        note = " (chosen)" if chosen else f" (stopped at {decided}, ran {len(trial.history)})" if trial.stopped_early else ""
        shown = trial.name in named
        (line,) = ax.plot(epochs, trial.history, linewidth=3 if chosen else 1.4 if shown else 0.6,
                          marker="o" if len(trial.history) == 1 else None,  # one epoch so far: a point, not nothing
                          label=_short(trial.name, index) + note if shown else "_unnamed", alpha=1.0 if shown else 0.5)
        if trial.stopped_early and decided:
            ax.plot(decided, trial.history[decided - 1], "x", color=line.get_color(), markersize=10,
                    markeredgewidth=2)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(report.objective.primary_metric)
    unnamed = len(drawn) - len(named)
    ax.set_title(f"{report.sweep}: x = the interval early termination stopped it at"
                 + (f"\nthe best {len(named)} of {len(drawn)} trials named" if unnamed else ""))
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8, loc="lower right" if report.objective.goal == "maximize" else "upper right")
    else:
        ax.text(0.5, 0.5, "no epoch logged yet", ha="center", va="center", transform=ax.transAxes)
    return png_bytes(fig, bbox_inches="tight")


def legend_names(report: SweepReport) -> set[str]:
    """The trials the plot's legend names: every one with a curve, or past :data:`LEGEND_MAX` of them, the best
    :data:`LEGEND_MAX` and the chosen one."""
    drawn = [t for t in report.trials if t.history]
    named = {t.name for t in (drawn if len(drawn) <= LEGEND_MAX else rank(drawn, report.objective)[:LEGEND_MAX])}
    return named | {t.name for t in drawn if t.name == report.best_trial}


def new_figure(**kwargs: Any) -> Any:
    """A matplotlib Figure on the Agg backend: a Figure, not pyplot, so no global state, safe in a server thread."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def png_bytes(fig: Any, **savefig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", **savefig)
    return buffer.getvalue()


def _short(name: str, index: int) -> str:
    """Trial names carry the sweep's name; the plot's legend keeps the trial's own part."""
    return name.rsplit("-", 1)[-1] if "-" in name else f"trial {index}"


def render_html(report: SweepReport, png: bytes) -> str:
    """A self-contained page (``templates/sweep_report.html``): the plot inline, then the leaderboard, the models
    and the endpoint."""
    rows = []
    trial_costs = {c["job"]: c["text"] for c in ((report.cost or {}).get("jobs") or {}).get("trials", [])}
    for place, trial in enumerate(rank(report.trials, report.objective), start=1):
        score = trial_score(trial, report.objective)
        rows.append({"place": place, "name": trial.name, "status": trial.status.value,
                     "score": "-" if score is None else f"{score:.4f}", "epochs": len(trial.history),
                     "params": format_params(trial.params), "why": trial.note, "chosen": trial.name == report.best_trial,
                     "cost": trial_costs.get(trial.name, "")})
    live = report.sweep_status in {s.value for s in JobStatus if not s.is_terminal()}
    endpoint = report.endpoint or {}
    return render(
        "sweep_report.html", title=report.sweep, refresh_s=LIVE_REFRESH_S if live else None, live=live, report=report,
        metric=report.objective.primary_metric, rows=rows, stopped=sum(1 for t in report.trials if t.stopped_early),
        epochs=sum(len(t.history) for t in report.trials), png=base64.b64encode(png).decode(),
        model_params=_model_params((report.model or {}).get("properties", {}).get("params", {})),
        onnx_figures=_parity_figures((report.onnx or {}).get("properties", {}).get("parity", {})),
        card=bool((report.onnx or {}).get("tags", {}).get("mlrunway.model_card")),
        traffic=", ".join(f"{k} {v}%" for k, v in endpoint.get("traffic", {}).items()) or "no traffic",
        built=_utc(report.created), costs=cost_rows(report.cost))


LIVE_REFRESH_S = 5  # a running sweep's report page asks again this often


def _model_params(params: Any) -> str:
    """The chosen model's hyperparameters in a line; a ``params`` property that is not an object says so."""
    if not isinstance(params, dict):
        return f"its params property holds {_clipped(params)}, not an object"
    return format_params(params)


def _parity_figures(parity: Any) -> str:
    """The ONNX check's figures in a sentence, as recorded before and after the relative tolerance; a property
    that is not the export job's (a figure missing, a word where a number goes) says what it lacks instead."""
    if not parity:
        return "no parity figures recorded"
    if (problem := _parity_problem(parity)) is not None:
        return f"its parity property {problem}: no figures to show (the export job records them; export again)"
    if parity.get("max_abs_diff") is None:
        return f"no PyTorch model to compare with: ran on {parity['samples']} {parity['inputs']}"
    share = "" if parity.get("tolerance_used") is None else (  # recorded since the relative part
        f" ({parity['tolerance_used'] * 100:.3g}% of the tolerance {parity['atol']:g} + "
        f"{parity.get('rtol', 0):g}·|torch|)")
    on = f" on {parity['top1_output']}" if isinstance(parity.get("top1_output"), str) and per_output(parity) else ""
    each = "; ".join(f"{name}: {figures}" for name, figures in per_output(parity))
    return (f"max |onnx - torch| {parity['max_abs_diff']:.3g}{share} on {parity['samples']} {parity['inputs']}, "
            + (f"top-1 agreement{on} {parity['top1_agreement']:.2%}" if parity.get("top1_agreement") is not None
               else "not a classifier") + (f"; per output: {each}" if each else ""))


# Each a number, or None where the sentence does without it (``atol`` is needed with ``tolerance_used``).
_PARITY_NUMBERS = ("max_abs_diff", "tolerance_used", "atol", "rtol", "top1_agreement")


def _parity_problem(parity: Any) -> str | None:
    """What keeps ``parity`` from being read as the export job writes it, in words; None when it can be."""
    if not isinstance(parity, dict):
        return f"holds {_clipped(parity)}, not an object"
    needed = ("samples", "inputs", *(("atol",) if parity.get("tolerance_used") is not None else ()))
    if missing := [key for key in needed if key not in parity]:
        return f"lacks {' and '.join(map(repr, missing))}"
    for key in _PARITY_NUMBERS:
        value = parity.get(key)
        if (value is not None or key in needed) and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"holds {_clipped(value)} as {key!r}, not a number"
    return None


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def save(report: SweepReport, folder: str | Path) -> Path:
    """Write report.html, curves.png and report.json into ``folder``; return the HTML's path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_curves(report)
    (out / PLOT_FILE).write_bytes(png)
    (out / DATA_FILE).write_text(json.dumps(report.to_dict(), indent=1, default=str))
    page = out / HTML_FILE
    page.write_text(render_html(report, png))
    return page


def save_run_report(backend: Backend, names: RunNames, root: str | Path, *, dag_id: str = "",
                    run_id: str = "") -> Path | None:
    """Save the run's report in its folder of the reports folder ``root``, with the run's ``run.json`` (``dag_id``
    and ``run_id``: what pruning keeps each DAG's newest runs by), and, where the backend keeps job artifacts
    (:class:`~mlrunway.backend.protocol.Artifacts`), as artifacts of the sweep's run under ``report/``. None when
    the run has no sweep."""
    try:
        report = collect(backend, names)
    except NotFound:
        return None
    folder = ReportsFolder(Path(root))
    page = save(report, folder.mark_run(names.sweep, dag_id, run_id) if dag_id else folder.sweep(names.sweep))
    if isinstance(backend.jobs, Artifacts):
        backend.jobs.log_artifacts(report.sweep, page.parent, "report")
    if report.cost and isinstance(backend.jobs, RunMetrics):
        log_costs(backend.jobs, report.sweep, report.cost)
    return page


def log_costs(jobs: RunMetrics, sweep: str, cost: dict[str, Any]) -> None:
    """Each job's ``cost`` (where its rate is known) and ``compute_hours`` on its run; the trials' totals on the
    sweep's parent run. A run that cannot take them is logged and skipped: the figures are in the report."""
    trials = (cost.get("jobs") or {}).get("trials", [])
    logged = [(job["job"], _figures([job])) for role in cost["jobs"].values() for job in role]
    for name, metrics in [*logged, (sweep, _figures(trials))]:
        try:
            jobs.log_metrics(name, metrics)
        except (MlrunwayError, OSError) as exc:
            log.warning("the cost of %s was not logged on its run: %s", name, exc)


def _figures(jobs: list[dict[str, Any]]) -> dict[str, float]:
    known = [j["amount"] for j in jobs if j.get("amount") is not None]
    return {"compute_hours": sum(j["hours"] for j in jobs),
            **({"cost": sum(known)} if known and len(known) == len(jobs) else {})}


def saved_report(sweep: str, root: str | Path) -> Path | None:
    """The saved report of the run whose sweep is ``sweep`` (any attempt's name), if cleanup saved one."""
    page = ReportsFolder(Path(root)).sweep(sweep) / HTML_FILE
    return page if page.is_file() else None
