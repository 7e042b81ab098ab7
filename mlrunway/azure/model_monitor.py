"""The workspace's model monitor of a production deployment: azure-ai-ml's ``MonitorSchedule``, created or updated
when the ``azure_ml`` connection asks for it (its ``model_monitor`` field).

On Azure ML, drift is computed by the service: a schedule runs a monitor (serverless Spark) over what the
deployment's data collector wrote, with a data-drift signal and a prediction-drift signal in the same metric
names and thresholds as the local monitor's (:mod:`mlrunway.monitoring.drift`). The production data is the
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
from typing import Annotated, Any, Literal, get_args

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
from pydantic import ConfigDict, Strict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.settings import parse, setting

__all__ = ["MonitorSettings", "ModelMonitors"]

Runtime = Literal["3.4", "3.5"]  # what azure-ai-ml 1.35 accepts for a monitor's serverless Spark
RUNTIMES: tuple[str, ...] = get_args(Runtime)


FIELD = "azure_ml connection.model_monitor"


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class MonitorSettings:
    """The connection's ``model_monitor``, declared once (:mod:`mlrunway.settings`)."""

    cron: Annotated[str, Strict()] = setting(
        "0 3 * * *", pattern=r"^\S+( \S+){4}$", description="When the monitor runs: a cron expression, in UTC.",
        problem="{value!r} is not a cron expression", fix="give five fields, e.g. 0 3 * * * (03:00 UTC daily)")
    instance_type: Annotated[str, Strict()] = setting(
        "standard_e4s_v3", min_length=1, description="The serverless Spark compute's instance type.",
        problem="{value!r} is not an instance type", fix="write e.g. standard_e4s_v3")
    runtime_version: Runtime = setting(
        "3.4", description="The serverless Spark runtime.", problem="{value!r} is not supported",
        fix=f"use one of {', '.join(RUNTIMES)} (what azure-ai-ml accepts)")
    reference_data: Annotated[str, Strict()] | None = setting(
        None, pattern="^azureml:", description="The reference data asset; empty: an earlier window of production "
                                               "data.",
        problem="{value!r} names no data asset", fix="write azureml:<name>:<version>")
    reference_type: Literal["mltable", "uri_folder", "uri_file"] = setting(
        "mltable", description="The reference data asset's type.", problem="{value!r} is not supported",
        fix="use one of mltable, uri_folder, uri_file")
    emails: tuple[Annotated[str, Strict()], ...] = setting(
        (), description="Who is mailed when a signal drifts.", problem="{value!r} is not a list of e-mail addresses",
        fix='write e.g. ["ml-team@example.com"]')
    ml_task: Literal["classification", "regression"] = setting(
        "classification", description="What the deployment's model does.", problem="{value!r} is not supported",
        fix="use one of classification, regression")

    @classmethod
    def parse(cls, value: Any) -> MonitorSettings | None:
        """The connection's ``model_monitor``: JSON text or a mapping; empty or ``false``: no model monitor;
        ``true``: the defaults."""
        if value in (None, "", False, "false", "False"):
            return None
        if value in (True, "true", "True"):
            value = {}
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise check.fail(FIELD, f"is not JSON ({exc})", 'write e.g. {"cron": "0 3 * * *"}') from None
        return parse(cls, value, FIELD, noun="model monitor")


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
