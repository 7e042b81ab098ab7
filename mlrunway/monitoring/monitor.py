"""A production endpoint's monitor: what its deployments collected over a window, against the reference, per signal.

Two signals, Azure ML's: **data drift** (the ``model_inputs`` collection against the reference's inputs) and
**prediction drift** (``model_outputs`` against the reference's outputs), each measured by :mod:`drift`. The
production rows are those of every deployment with traffic (or the one named), over the last ``window_s`` seconds,
read back through the backend's :class:`~mlrunway.backend.capture.Capture`. The reference is a JSON-lines file per
collection, of rows with the same columns (or of the collector's own records, whose ``data`` holds rows): what the
deployment's score.py collects when it is given held-out data of the training set's distribution (the ``val/``
images; :mod:`mlrunway.monitoring.reference` writes them).

The report says ``drifted`` (a signal drifted: retraining is due), ``stable`` (every signal had its evidence and
none drifted) or ``no evidence`` (a signal had too few rows, a collection is missing, or its reference is): a
window with no traffic never reads as healthy.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.backend.capture import Capture, ModelMonitor, Replay, rows_of
from mlrunway.backend.protocol import Backend
from mlrunway.ledger.reports import ReportsFolder
from mlrunway.monitoring.drift import TESTS, DriftSettings, Signal, signal
from mlrunway.settings import NOT_A_FLAG, parse, setting

__all__ = ["SIGNALS", "MonitorReport", "MonitorSettings", "check_endpoint", "ensure_reference", "read_rows",
           "hand_over", "reference_requests", "save", "saved_page", "serving_model"]

SIGNALS = {"data_drift": "model_inputs", "prediction_drift": "model_outputs"}


def _reference(value: Any) -> Any:
    """A folder holding ``model_inputs.jsonl`` and ``model_outputs.jsonl``, as the two files."""
    return {c: str(Path(value) / f"{c}.jsonl") for c in SIGNALS.values()} if isinstance(value, str) else value


def _drift(value: Any) -> DriftSettings:
    return value if isinstance(value, DriftSettings) else DriftSettings.parse(value)


def _endpoint(value: Any) -> str:
    check.endpoint_name(value, "endpoint_name")
    return str(value)


Collection = Annotated[Literal["model_inputs", "model_outputs"], Field(json_schema_extra={
    "problem": "is not a monitored collection", "fix": "use model_inputs, model_outputs"})]


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid", arbitrary_types_allowed=True))
class MonitorSettings:
    """An endpoint monitor's settings, declared once (:mod:`mlrunway.settings`): the endpoint, the reference (per
    collection, a JSON-lines file of rows), the window, the deployment to watch (empty: every deployment with
    traffic) and the drift metrics (:class:`~mlrunway.monitoring.drift.Drift`)."""

    endpoint: Annotated[str, BeforeValidator(_endpoint), Field(description="The endpoint whose traffic is watched.")]
    reference: Annotated[dict[Collection, str], BeforeValidator(_reference)] = setting(
        ..., min_length=1, description="The folder of model_inputs.jsonl and model_outputs.jsonl, or a file per "
                                       "collection.", problem="{value!r} names no reference rows",
        fix='pass the folder of model_inputs.jsonl and model_outputs.jsonl, or {"model_inputs": <file>, '
            '"model_outputs": <file>}')
    window_s: Annotated[float, NOT_A_FLAG] = setting(
        24 * 3600.0, gt=0, allow_inf_nan=False, description="How far back the collected traffic is read, in seconds.",
        problem="{value!r} is not a positive number of seconds", fix="pass e.g. 86400")
    deployment: str | None = Field(default=None,
                                   description="The deployment to watch; empty: every deployment with traffic.")
    drift: Annotated[DriftSettings, BeforeValidator(_drift), WithJsonSchema({"type": "object"})] = Field(
        default_factory=DriftSettings, description="The drift metrics and their thresholds (the Drift group).")

    @classmethod
    def parse(cls, endpoint: str, reference: Mapping[str, Any] | str | None, *, window_s: Any = 24 * 3600.0,
              deployment: str | None = None, drift: Mapping[str, Any] | None = None) -> MonitorSettings:
        return parse(cls, {"endpoint": endpoint, "reference": reference, "window_s": window_s,
                           "deployment": deployment or None, "drift": drift}, "", noun="monitor")


@dataclass(frozen=True)
class MonitorReport:
    endpoint: str
    deployments: tuple[str, ...]
    start: float
    end: float
    signals: tuple[Signal, ...]
    settings: dict[str, Any]

    @property
    def evidence(self) -> bool:
        return bool(self.signals) and all(s.evidence for s in self.signals)

    @property
    def drifted(self) -> bool:
        return any(s.drifted for s in self.signals)

    @property
    def status(self) -> str:
        return "drifted" if self.drifted else "stable" if self.evidence else "no evidence"

    def summary(self) -> str:
        """One line for a log: the endpoint, its status and each signal's finding."""
        return f"endpoint {self.endpoint} ({', '.join(self.deployments) or 'no deployment with traffic'}): " \
               f"{self.status.upper()}; " + "; ".join(self.findings())

    def findings(self) -> list[str]:
        """Each signal's finding: no evidence and why, the features that drifted, or how many rows were stable."""
        parts = []
        for found in self.signals:
            if not found.evidence:
                parts.append(f"{found.name}: no evidence ({found.reason})")
                continue
            moved = [f"{f.feature} ({f.metric} {f.value:g} > {f.threshold:g}, p={f.p_value:.3g})"
                     if f.metric not in TESTS else
                     f"{f.feature} ({f.metric} p={f.value:.3g} < {f.threshold:g})" for f in found.features if f.drifted]
            parts.append(f"{found.name}: " + (f"drifted on {', '.join(moved)}" if moved else
                                                f"stable over {found.production_rows} rows"))
        return parts

    def to_dict(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "deployments": list(self.deployments), "start": self.start,
                "end": self.end, "status": self.status, "drifted": self.drifted, "evidence": self.evidence,
                "summary": self.summary(), "signals": [s.to_dict() for s in self.signals], "settings": self.settings}


def read_rows(path: str | Path, field_name: str = "reference") -> list[dict[str, Any]]:
    """Rows of a JSON-lines file: each line a row, or a collector's record whose ``data`` is a list of rows."""
    source = Path(path)
    if not source.is_file():
        raise check.fail(field_name, f"{source} does not exist",
                         "write the reference first (python -m mlrunway.monitoring.reference)")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(source.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise check.fail(f"{field_name} line {number}", f"is not JSON ({exc})", "write one JSON object per line") from None
        data = item.get("data") if isinstance(item, dict) and "specversion" in item else item
        rows += [r for r in (data if isinstance(data, list) else [data]) if isinstance(r, dict)]
    return rows


def _captured(capture: Capture, endpoint: str, deployments: tuple[str, ...], collection: str, start: float,
              end: float) -> list[dict[str, Any]]:
    return [row for deployment in deployments
            for row in rows_of(capture.captured(endpoint, deployment, collection, start, end))]


def check_endpoint(backend: Backend, settings: MonitorSettings, now: float | None = None) -> MonitorReport:
    """Each signal of the window ending ``now``. A backend that cannot read its captures back is refused, naming
    what to use instead."""
    capture = backend.endpoints
    if not isinstance(capture, Capture):
        raise check.fail("backend", f"the {backend.kind} backend reads no captured data back here",
                         "on Azure ML, watch the endpoint with the workspace's model monitor "
                         "(monitor_schedule in the connection); its signals run in Azure")
    end = time.time() if now is None else now
    start = end - settings.window_s
    deployments = ((settings.deployment,) if settings.deployment else  # a named one's captures outlive its endpoint
                   tuple(sorted(n for n, w in backend.endpoints.get(settings.endpoint).traffic.items() if w > 0)))
    signals = []
    for name, collection in SIGNALS.items():
        if collection not in settings.reference:
            continue
        reference = read_rows(settings.reference[collection], f"reference.{collection}")
        production = _captured(capture, settings.endpoint, deployments, collection, start, end)
        signals.append(signal(name, collection, reference, production, settings.drift))
    return MonitorReport(settings.endpoint, deployments, start, end, tuple(signals),
                         {"reference": settings.reference, "window_s": settings.window_s,
                          "drift": settings.drift.to_dict()})


def hand_over(backend: Backend, endpoint: str, drift: DriftSettings) -> str | None:
    """On a backend whose service computes drift itself (:class:`~mlrunway.backend.capture.ModelMonitor`), create or
    update its monitor of the serving deployment with these metrics and thresholds; its name, or None."""
    if not isinstance(backend, ModelMonitor):
        return None
    deployment, _ = serving_model(backend, endpoint)
    return backend.ensure_monitor(endpoint, deployment, drift.to_dict()["metric_thresholds"])


# -- the reference ----------------------------------------------------------------------------------------------------
def reference_requests(data_dir: str | Path | None = None, requests_file: str | Path | None = None,
                       batch: int = 32, split: str = "val") -> list[Any]:
    """What a reference is made of: a file of request bodies (JSON lines, each a body or ``{"request": ...}``), or
    the images of ``data_dir``'s ``val/`` split as ``{"images": [<base64>]}`` requests, which an image scoring
    script preprocesses as it does any client's. Held-out images, not the training split: the model answers the
    images it was trained on more confidently than any new one, so their outputs are no reference for production's
    (Azure ML's prediction drift, likewise, takes validation or test data as its reference)."""
    import base64

    if requests_file:
        path = Path(requests_file)
        if not path.is_file():
            raise check.fail("reference_requests", f"{path} does not exist", "name a JSON-lines file of request bodies")
        bodies = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [b["request"] if isinstance(b, dict) and "request" in b else b for b in bodies]
    folder = Path(data_dir or "") / split
    images = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg")) if data_dir else []
    if not images:
        raise check.fail("data_dir", f"{folder} holds no images to make the reference of",
                         f"pass the training data (with its {split}/ split), or reference_requests: a file of request "
                         "bodies")
    encoded = [base64.b64encode(p.read_bytes()).decode() for p in images]
    return [{"images": encoded[i:i + batch]} for i in range(0, len(encoded), batch)]


def serving_model(backend: Backend, endpoint: str) -> tuple[str, str]:
    """The deployment with the most traffic and its model (``name:version``)."""
    info = backend.endpoints.get(endpoint)
    live = sorted(((w, d) for d, w in info.traffic.items() if w > 0), reverse=True)
    if not live:
        raise check.fail("endpoint_name", f"endpoint {endpoint} has no deployment with traffic",
                         "deploy a model to it first (train_sweep_deploy with endpoint_name)")
    deployment = live[0][1]
    return deployment, backend.endpoints.get_deployment(endpoint, deployment).model


def ensure_reference(backend: Backend, endpoint: str, code_dir: str, requests: list[Any], reports: str | Path,
                     scoring_script: str = "score.py") -> dict[str, str]:
    """The reference of the model serving ``endpoint``: made once per model version, by its own scoring script
    (:class:`~mlrunway.backend.capture.Replay`), in the reports folder ``reports``
    (:meth:`~mlrunway.ledger.reports.ReportsFolder.reference`)."""
    _, model = serving_model(backend, endpoint)
    target = ReportsFolder(Path(reports)).reference(endpoint, model)
    files = {c: str(target / f"{c}.jsonl") for c in SIGNALS.values()}
    if all(Path(f).is_file() for f in files.values()):
        return files
    if not isinstance(backend.endpoints, Replay):
        raise check.fail("reference", f"the {backend.kind} backend cannot make a reference on this machine",
                         "pass reference: a folder of model_inputs.jsonl and model_outputs.jsonl rows")
    backend.endpoints.replay(model, code_dir, scoring_script, requests, str(target))
    return files


# -- the report page --------------------------------------------------------------------------------------------------
def save(report: MonitorReport, reports: str | Path) -> Path:
    """Write ``<time>.json`` and ``.html`` (self-contained, with plots) and ``latest.*`` where the reports folder
    ``reports`` keeps the endpoint's monitoring (:meth:`~mlrunway.ledger.reports.ReportsFolder.monitoring`);
    return the page."""
    out = ReportsFolder(Path(reports)).monitoring(report.endpoint)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(report.end))
    page = _page(report)
    for name in (stamp, "latest"):
        (out / f"{name}.json").write_text(json.dumps(report.to_dict(), indent=1))
        (out / f"{name}.html").write_text(page, encoding="utf-8")
    return out / f"{stamp}.html"


def saved_page(reports: str | Path, endpoint: str) -> Path | None:
    page = ReportsFolder(Path(reports)).monitoring(endpoint) / "latest.html"
    return page if page.is_file() else None


def _page(report: MonitorReport) -> str:
    """The report's page (``templates/monitor.html``): its status and findings, then each signal's features and plot."""
    from mlrunway.pages import render

    signals = [{"signal": found, "png": base64.b64encode(_plot(found)).decode() if found.features else "",
                "features": [{"feature": f.feature, "kind": f.kind, "metric": f.metric, "value": f"{f.value:g}",
                              "threshold": f"{f.threshold:g}", "p_value": f"{f.p_value:.3g}", "drifted": f.drifted,
                              "reference": _brief(f.reference), "production": _brief(f.production)}
                             for f in found.features]} for found in report.signals]
    return render("monitor.html", title=f"Monitor {report.endpoint}", report=report, signals=signals,
                  start=_utc(report.start), end=_utc(report.end),
                  thresholds=json.dumps(report.settings["drift"]["metric_thresholds"]))


def _brief(summary: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in list(summary.items())[:4])


def _plot(found: Signal) -> bytes:
    """Each feature's reference and production side by side: quartiles (numerical) or category shares (a PNG)."""
    from mlrunway.report import new_figure, png_bytes

    features = list(found.features)
    columns = min(len(features), 4)
    fig = new_figure(figsize=(3.0 * columns, 2.4 * ((len(features) + columns - 1) // columns)), dpi=90)
    for index, feature in enumerate(features):
        ax = fig.add_subplot((len(features) + columns - 1) // columns, columns, index + 1)
        if feature.kind == "numerical":
            keys = ["q1", "median", "q3"]
            ax.plot(keys, [feature.reference[k] for k in keys], "o-", label="reference")
            ax.plot(keys, [feature.production[k] for k in keys], "s-", label="production")
        else:
            keys = sorted(set(feature.reference) | set(feature.production))[:12]
            positions = range(len(keys))
            ax.bar([p - 0.2 for p in positions], [feature.reference.get(k, 0) for k in keys], 0.4, label="reference")
            ax.bar([p + 0.2 for p in positions], [feature.production.get(k, 0) for k in keys], 0.4,
                   label="production")
            ax.set_xticks(list(positions), keys, fontsize=7)
        ax.set_title(f"{feature.feature}{' (drifted)' if feature.drifted else ''}", fontsize=9)
        ax.grid(alpha=0.3)
        if index == 0:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return png_bytes(fig)


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
