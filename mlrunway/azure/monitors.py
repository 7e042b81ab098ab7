"""The workspace's model monitor of a production deployment: azure-ai-ml's ``MonitorSchedule``, created or updated
when the ``azure_ml`` connection asks for it (its ``model_monitor`` field).

On Azure ML, drift is computed by the service: a schedule runs a monitor (serverless Spark) over what the
deployment's data collector wrote, with a data-drift signal and a prediction-drift signal in the same metric
names and thresholds as the local monitor's (:mod:`mlrunway.production.drift`). The production data is the
deployment's own ``model_inputs`` and ``model_outputs`` collections (the SDK finds their data assets from the
deployment's data collector); the reference is the data asset the connection names (``reference_data``), else
the service's default (an earlier window of production data).

The connection's ``model_monitor`` (JSON): ``{"cron": "0 3 * * *", "instance_type": "standard_e4s_v3",
"runtime_version": "3.4", "reference_data": "azureml:digits-reference:1", "reference_type": "mltable",
"emails": ["ml-team@example.com"], "ml_task": "classification"}``; every field optional (``ml_task``: classification
or regression, what the deployment's model does). The SDK refuses Spark runtimes other than 3.4 and 3.5.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from azure.ai.ml import Input, MLClient
from azure.ai.ml.constants import MonitorDatasetContext
from azure.ai.ml.entities import (
    AlertNotification,
    CategoricalDriftMetrics,
    CronTrigger,
    DataDriftMetricThreshold,
    DataDriftSignal,
    MonitorDefinition,
    MonitoringTarget,
    MonitorSchedule,
    NumericalDriftMetrics,
    PredictionDriftMetricThreshold,
    PredictionDriftSignal,
    ReferenceData,
    ServerlessSparkCompute,
)

from mlrunway import check

__all__ = ["MonitorSettings", "ModelMonitors"]

RUNTIMES = ("3.4", "3.5")  # what azure-ai-ml 1.35 accepts for a monitor's serverless Spark


@dataclass(frozen=True)
class MonitorSettings:
    cron: str = "0 3 * * *"
    instance_type: str = "standard_e4s_v3"
    runtime_version: str = "3.4"
    reference_data: str | None = None
    reference_type: str = "mltable"
    emails: tuple[str, ...] = field(default_factory=tuple)
    ml_task: str = "classification"

    @classmethod
    def parse(cls, value: Any) -> MonitorSettings | None:
        """The connection's ``model_monitor``: JSON text or a mapping; empty or ``false``: no model monitor."""
        field_name = "azure_ml connection.model_monitor"
        if value in (None, "", False, "false", "False"):
            return None
        if value in (True, "true", "True"):
            value = {}
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise check.fail(field_name, f"is not JSON ({exc})", 'write e.g. {"cron": "0 3 * * *"}') from None
        if not isinstance(value, dict):
            raise check.fail(field_name, f"{value!r} is not a mapping", 'write e.g. {"cron": "0 3 * * *"}')
        known = set(cls.__dataclass_fields__)
        if unknown := sorted(set(value) - known):
            raise check.fail(f"{field_name}.{unknown[0]}", "is not a model monitor setting", f"use {', '.join(sorted(known))}")
        given: dict[str, Any] = {k: tuple(v) if k == "emails" else v for k, v in value.items()}
        settings = cls(**given)
        check.one_of(f"{field_name}.runtime_version", settings.runtime_version, RUNTIMES)
        check.one_of(f"{field_name}.reference_type", settings.reference_type, ("mltable", "uri_folder", "uri_file"))
        check.one_of(f"{field_name}.ml_task", settings.ml_task, ("classification", "regression"))
        if len(settings.cron.split()) != 5:
            raise check.fail(f"{field_name}.cron", f"{settings.cron!r} is not a cron expression",
                             "give five fields, e.g. 0 3 * * * (03:00 UTC daily)")
        if settings.reference_data and not settings.reference_data.startswith("azureml:"):
            raise check.fail(f"{field_name}.reference_data", f"{settings.reference_data!r} names no data asset",
                             "write azureml:<name>:<version>")
        return settings


class ModelMonitors:
    """:param ml: the workspace's ``MLClient``; ``settings``: the connection's ``model_monitor``."""

    def __init__(self, ml: MLClient, settings: MonitorSettings) -> None:
        self.ml, self.settings = ml, settings

    def ensure(self, endpoint: str, deployment: str, metric_thresholds: dict[str, dict[str, float]]) -> str:
        """Create or update the schedule ``<endpoint>-monitor`` on ``deployment``; return its name."""
        name = f"{endpoint}-monitor"
        self.ml.schedules.begin_create_or_update(self.schedule(name, endpoint, deployment, metric_thresholds)).result()
        return name

    def schedule(self, name: str, endpoint: str, deployment: str,
                 metric_thresholds: dict[str, dict[str, float]]) -> MonitorSchedule:
        numerical: Any = NumericalDriftMetrics  # keyword per metric name: {"normalized_wasserstein_distance": 0.1}
        categorical: Any = CategoricalDriftMetrics
        reference = None
        if self.settings.reference_data:
            reference = ReferenceData(input_data=Input(path=self.settings.reference_data,
                                                       type=self.settings.reference_type),
                                      data_context=MonitorDatasetContext.TRAINING)
        signals: dict[str, Any] = {
            "data_drift": DataDriftSignal(reference_data=reference, metric_thresholds=DataDriftMetricThreshold(
                numerical=numerical(**metric_thresholds.get("numerical", {})),
                categorical=categorical(**metric_thresholds.get("categorical", {})))),
            "prediction_drift": PredictionDriftSignal(metric_thresholds=PredictionDriftMetricThreshold(
                numerical=numerical(**metric_thresholds.get("numerical", {})),
                categorical=categorical(**metric_thresholds.get("categorical", {})))),
        }
        alert = AlertNotification(emails=list(self.settings.emails)) if self.settings.emails else None
        return MonitorSchedule(name=name, trigger=CronTrigger(expression=self.settings.cron),
                               create_monitor=MonitorDefinition(
                                   compute=ServerlessSparkCompute(instance_type=self.settings.instance_type,
                                                                  runtime_version=self.settings.runtime_version),
                                   monitoring_target=MonitoringTarget(
                                       ml_task=self.settings.ml_task,
                                       endpoint_deployment_id=f"azureml:{endpoint}:{deployment}"),
                                   monitoring_signals=signals, alert_notification=alert))
