"""A deployment's requests, errors and latency, from its endpoint's Azure Monitor metrics (azure-monitor-query).

Azure Monitor aggregates an endpoint's requests per minute and publishes them a few minutes late: the backend's
``Capabilities.metrics_lag_s`` says how late, and a rollout's window is minutes, not seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from mlrunway.backend.types import DeploymentMetrics, deployment_error

__all__ = ["DeploymentMonitor"]


class DeploymentMonitor:
    """:param credential: the workspace's credential, which reads the metrics.
    :param arm: this cloud's ARM host, where Azure Monitor's metrics API is.
    :param transport: azure-core's transport, when given (tests pass the fake service).
    """

    def __init__(self, credential: Any, arm: str, **transport: Any) -> None:
        self.credential, self.arm, self.transport = credential, arm, transport

    @cached_property
    def client(self) -> Any:
        """Azure Monitor's metrics client (azure-monitor-query) on this cloud's ARM host, made at first use."""
        from azure.monitor.query import MetricsQueryClient

        return MetricsQueryClient(self.credential, endpoint=self.arm, **self.transport)

    def deployment_metrics(self, resource: str, deployment: str, start: float, end: float) -> DeploymentMetrics:
        """The deployment's requests, errors and p99 latency over [start, end) from the metrics (per minute) of
        the endpoint whose ARM id is ``resource``: ``RequestsPerMinute`` split by ``statusCode`` and
        ``modelStatusCode`` (an error is a 5xx, a 408, or a 424 whose model status is 500 or more) and
        ``RequestLatency_P99`` (the worst minute). Each is asked for with the aggregation its definition
        documents, Average: at a one-minute grain, a minute's average of requests per minute is that minute's
        count."""
        timespan = (datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(max(end, start + 1), UTC))
        only = f"deployment eq '{deployment}'"
        counts = self.client.query_resource(
            resource, ["RequestsPerMinute"], timespan=timespan, granularity=timedelta(minutes=1),
            aggregations=["Average"], filter=f"{only} and statusCode eq '*' and modelStatusCode eq '*'")
        requests = errors = 0
        for series in counts.metrics[0].timeseries if counts.metrics else []:
            dims = {k.lower(): v for k, v in series.metadata_values.items()}
            total = round(sum(point.average or 0 for point in series.data))
            requests += total
            status, model = dims.get("statuscode") or "0", dims.get("modelstatuscode")
            errors += total if deployment_error(int(status) if status.isdigit() else 0, model) else 0
        latency = self.client.query_resource(
            resource, ["RequestLatency_P99"], timespan=timespan, granularity=timedelta(minutes=1),
            aggregations=["Average"], filter=only)
        p99s = [point.average for series in (latency.metrics[0].timeseries if latency.metrics else [])
                for point in series.data if point.average is not None]
        return DeploymentMetrics(deployment=deployment, start=start, end=end, requests=requests, errors=errors,
                                 p99_ms=max(p99s) if p99s else None)
