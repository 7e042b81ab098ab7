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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlrunway.backend.attempts import latest_attempt
from mlrunway.backend.cost import cost_of_run, cost_rows, estimated, serving_cost
from mlrunway.backend.naming import RunNames, base_name
from mlrunway.backend.protocol import Artifacts, Backend, RunMetrics
from mlrunway.backend.reports import ReportsFolder
from mlrunway.backend.types import JobStatus, SweepResult, TrialInfo
from mlrunway.early_termination.advice import advise
from mlrunway.errors import MlrunwayError, NotFound
from mlrunway.pages import render
from mlrunway.specs.sweep import Objective
from mlrunway.sweep.attempts import sweep_result
from mlrunway.sweep.leaderboard import format_params, rank, trial_score

HTML_FILE, PLOT_FILE, DATA_FILE = "report.html", "curves.png", "report.json"
log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class SweepReport:
    """What the page and the artifact show; ``model``, ``onnx`` and ``endpoint`` are None until they exist;
    ``production`` is a stable endpoint's decision on the run's model, with its evidence (else None)."""

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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["objective"] = {"primary_metric": self.objective.primary_metric, "goal": self.objective.goal}
        data["trials"] = [t.to_dict() for t in self.trials]
        return data


def collect(backend: Backend, names: RunNames) -> SweepReport:
    """The run's report as it stands now, from the newest attempt of its sweep (with the trials earlier attempts
    completed). Raises NotFound until the run's sweep exists."""
    latest = latest_attempt(backend.jobs, names.sweep)
    if latest is None:
        raise NotFound(f"sweep {names.sweep!r} does not exist yet")
    result = sweep_result(backend.jobs, latest.name)
    onnx = _model(backend, f"{names.model}-onnx")
    production = _production(onnx)
    # The run's cost once the sweep has ended: its trials' figures no longer change, and a live page that
    # refreshes every few seconds would read every trial's record again each time (ARM reads, on Azure).
    ended = result.status.is_terminal()
    endpoint = _endpoint(backend, *([production["endpoint"]] if production else names.endpoints))
    cost = estimated(f"run {names.run_key}", lambda: cost_of_run(backend, names)) if ended else None
    return SweepReport(sweep=latest.name, sweep_status=result.status.value, objective=result.objective,
                       cost=cost, advice=advice_of(result, cost) if ended else None,
                       serving=estimated(f"endpoint {endpoint['name']}", lambda: serving_cost(backend, endpoint["name"]))
                       if endpoint and ended else None,
                       trials=list(result.trials), best_trial=result.best_trial,
                       stopped_because=result.stopped_because, error=result.error or latest.error,
                       model=_model(backend, names.model, latest.name), onnx=onnx, production=production,
                       endpoint=endpoint)


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


def _production(onnx: dict[str, Any] | None) -> dict[str, Any] | None:
    """The decision a stable endpoint's deploy recorded on the model's version (see mlrunway.deploy.stable)."""
    tags = (onnx or {}).get("tags", {})
    if "mlrunway.decision" not in tags:
        return None
    try:
        evidence = json.loads(tags.get("mlrunway.evidence", "{}"))
    except ValueError:
        evidence = {}
    return {"decision": tags["mlrunway.decision"], "endpoint": tags.get("mlrunway.endpoint", ""),
            "reason": tags.get("mlrunway.reason", ""), "gate": evidence.get("gate", {}),
            "windows": evidence.get("windows", [])}


def _model(backend: Backend, name: str, sweep: str | None = None) -> dict[str, Any] | None:
    """The newest version of ``name`` (of this sweep, when given), as a plain dict."""
    try:
        versions = backend.models.list(name)
    except NotFound:
        return None
    if sweep is not None:
        versions = [v for v in versions if (v.properties or {}).get("sweep") == sweep]
    if not versions:
        return None
    latest = max(versions, key=lambda v: int(v.version))
    return {"name": latest.name, "version": int(latest.version), "properties": dict(latest.properties or {}),
            "tags": dict(latest.tags or {})}


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
        model_params=format_params((report.model or {}).get("properties", {}).get("params", {})),
        onnx_figures=_parity_figures((report.onnx or {}).get("properties", {}).get("parity", {})),
        card=bool((report.onnx or {}).get("tags", {}).get("mlrunway.model_card")),
        traffic=", ".join(f"{k} {v}%" for k, v in endpoint.get("traffic", {}).items()) or "no traffic",
        built=_utc(report.created), costs=cost_rows(report.cost))


LIVE_REFRESH_S = 5  # a running sweep's report page asks again this often


def _parity_figures(parity: dict[str, Any]) -> str:
    """The ONNX check's figures in a sentence, as recorded before and after the relative tolerance."""
    if not parity:
        return "no parity figures recorded"
    if parity.get("max_abs_diff") is None:
        return f"no PyTorch model to compare with: ran on {parity['samples']} {parity['inputs']}"
    share = "" if parity.get("tolerance_used") is None else (  # recorded since the relative part
        f" ({parity['tolerance_used'] * 100:.3g}% of the tolerance {parity['atol']:g} + "
        f"{parity.get('rtol', 0):g}·|torch|)")
    return (f"max |onnx - torch| {parity['max_abs_diff']:.3g}{share} on {parity['samples']} {parity['inputs']}, "
            + (f"top-1 agreement {parity['top1_agreement']:.2%}" if parity.get("top1_agreement") is not None
               else "not a classifier"))


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
