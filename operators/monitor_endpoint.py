"""MonitorEndpointOperator: check a production endpoint's captured traffic for drift; retrain when it drifted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.sdk import Context

from mlrunway import check
from mlrunway.airflow.assets import drift_alias, emit_drift
from mlrunway.backend.capture import Capture
from mlrunway.errors import MlrunwayError
from mlrunway.monitoring import monitor
from mlrunway.monitoring.drift import DriftSettings
from mlrunway.operators._base import MlrunwayBaseOperator


class MonitorEndpointOperator(MlrunwayBaseOperator):
    """Compare what the endpoint's deployments collected over the last ``window_s`` seconds with the reference
    (:mod:`mlrunway.monitoring.monitor`), save the report (the UI plugin's "monitor" page) and, when a signal
    drifted, add an event to the endpoint's drift asset (:func:`~mlrunway.airflow.assets.drift_asset`), which its
    training DAG is scheduled on. A window without evidence (too little traffic, nothing collected) fails the
    task after its report is saved: it is never read as healthy. On a backend whose service computes drift itself
    (Azure ML, with the connection's ``model_monitor``), the task creates or updates that monitor instead.

    :param endpoint_name: the production endpoint.
    :param code_dir: the folder of its scoring script, which makes the reference.
    :param scoring_script: the scoring script's file name in ``code_dir``.
    :param data_dir: the training data, whose ``val/`` images the reference is made of (an image classifier);
    :param reference_requests: else a file of request bodies (JSON lines) to make it of;
    :param reference: else a folder of ``model_inputs.jsonl`` and ``model_outputs.jsonl`` rows, used as it is.
    :param window_s: how far back the collected traffic is read, in seconds (default: a day).
    :param drift: the metrics and thresholds, in azure-ai-ml's words (:class:`~mlrunway.monitoring.drift.DriftSettings`).
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "endpoint_name", "code_dir", "data_dir",
                       "reference_requests", "reference", "window_s", "drift")

    def __init__(self, *, endpoint_name: str, code_dir: str | None = None, data_dir: str | None = None,
                 reference_requests: str | None = None, reference: str | None = None, scoring_script: str = "score.py",
                 window_s: float | str = 24 * 3600.0, drift: dict[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [drift_alias()])
        super().__init__(**kwargs)
        self.endpoint_name, self.code_dir, self.data_dir = endpoint_name, code_dir, data_dir
        self.reference_requests, self.reference, self.scoring_script = reference_requests, reference, scoring_script
        self.window_s, self.drift = window_s, drift

    def execute(self, context: Context) -> dict[str, Any]:
        backend = self.backend
        if not isinstance(backend.endpoints, Capture):  # the service watches (Azure ML's model monitor), or nobody
            name = monitor.hand_over(backend, self.endpoint_name, DriftSettings.parse(self.drift))
            if name is not None:
                self.log.info("endpoint %s is watched by the workspace's model monitor %s; its signals run in the "
                              "service", self.endpoint_name, name)
                return {"status": "watched by the service", "monitor": name, "drifted": None}
        reports = Path(backend.reports)
        reference: str | dict[str, str] | None = self.reference or None
        if reference is None:
            if not self.code_dir:
                raise check.fail("code_dir", "is needed to make the reference",
                                         "pass the scoring script's folder, or reference: a folder of rows")
            requests = monitor.reference_requests(self.data_dir, self.reference_requests)
            reference = monitor.ensure_reference(backend, self.endpoint_name, self.code_dir, requests, reports,
                                                 self.scoring_script)
        settings = monitor.MonitorSettings.parse(self.endpoint_name, reference, window_s=self.window_s,
                                                 drift=self.drift)
        report = monitor.check_endpoint(backend, settings)
        page = monitor.save(report, reports)
        self.link(context, "monitor", self.endpoint_name)
        self.log.info("%s (report: %s)", report.summary(), page)
        if report.drifted:
            emit_drift(context, self.endpoint_name, {"status": report.status, "end": report.end,
                                                      "features": [f.feature for s in report.signals
                                                                   for f in s.features if f.drifted]})
        if not report.evidence and not report.drifted:
            raise MlrunwayError(f"NO EVIDENCE: {report.summary()}. The endpoint cannot be called healthy; "
                                "send it traffic (or lower drift.min_rows), and check its data_collector")
        return {"status": report.status, "drifted": report.drifted, "summary": report.summary(), "page": str(page)}
