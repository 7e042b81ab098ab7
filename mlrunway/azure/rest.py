"""The workspace's own REST services (MLflow tracking, Run History), for what the SDK has no public call for:
metric histories, a run's params and metrics, a sweep's every child run, a job's log, a failed run's error.

Two azure-core pipelines: ``rest`` signs each request with the credential's ARM token (the workspace's
services accept it); ``plain`` carries none, for URLs that hold their own credential (a scoring key, a log
file's SAS URL), which must never see the AAD token.
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import Any

from azure.ai.ml import MLClient
from azure.core import PipelineClient
from azure.core.pipeline.policies import BearerTokenCredentialPolicy, RetryPolicy
from azure.core.rest import HttpRequest

from mlrunway.azure.clouds import CloudHosts

__all__ = ["WorkspaceRest"]


class WorkspaceRest:
    """:param client: the workspace's ``MLClient``: its workspace record names the services' hosts.
    :param credential: signs ``rest``'s requests, for ``hosts.arm``'s audience.
    :param transport: azure-core's transport, when given (tests pass the fake service).
    """

    def __init__(self, client: MLClient, credential: Any, hosts: CloudHosts, **transport: Any) -> None:
        self.client = client
        self.rest = PipelineClient(
            base_url=hosts.arm,
            policies=[RetryPolicy(retry_total=3), BearerTokenCredentialPolicy(credential, f"{hosts.arm}/.default")],
            **transport,
        )
        self.plain = PipelineClient(base_url=hosts.studio, policies=[RetryPolicy(retry_total=3)], **transport)

    @cached_property
    def services(self) -> dict[str, str]:
        """The workspace's own service hosts, as the workspace says (any cloud, any region, private links):
        ``mlflow`` from its MLflow tracking URI, ``history`` from its discovery document; and the workspace path
        they share (``/subscriptions/.../workspaces/<name>``)."""
        workspace = self.client.workspaces.get(self.client.workspace_name)
        mlflow = workspace.mlflow_tracking_uri.replace("azureml://", "https://", 1)
        host, path = mlflow.split("/mlflow/v1.0", 1)
        discovery = self.call("GET", workspace.discovery_url) or {}
        return {"mlflow": host, "history": str(discovery.get("history") or host).rstrip("/"), "workspace": path}

    def call(self, method: str, url: str, **kwargs: Any) -> Any:
        """One REST call through the authenticated pipeline; JSON back, or None for a 404."""
        response = self.rest.send_request(HttpRequest(method, url, **kwargs))
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json() if response.content else None

    def mlflow(self, tail: str, **params: Any) -> Any:
        hosts = self.services
        return self.call("GET", f"{hosts['mlflow']}/mlflow/v1.0{hosts['workspace']}/api/2.0/mlflow/{tail}",
                         params=params)

    def log_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        """MLflow's ``runs/log-batch`` (POST) on the workspace's tracking server: each metric at step 0, now."""
        hosts, now = self.services, int(time.time() * 1000)
        self.call("POST", f"{hosts['mlflow']}/mlflow/v1.0{hosts['workspace']}/api/2.0/mlflow/runs/log-batch",
                  json={"run_id": run_id, "metrics": [{"key": k, "value": float(v), "timestamp": now, "step": 0}
                                                      for k, v in metrics.items()]})

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """MLflow's ``runs/log-batch`` (POST) with ``tags`` on the run (a job's run is its job: its tags are the
        job's)."""
        hosts = self.services
        self.call("POST", f"{hosts['mlflow']}/mlflow/v1.0{hosts['workspace']}/api/2.0/mlflow/runs/log-batch",
                  json={"run_id": run_id, "tags": [{"key": k, "value": v} for k, v in tags.items()]})

    def run_history(self, run_id: str, tail: str = "/details", **params: Any) -> Any:
        hosts = self.services
        return self.call("GET", f"{hosts['history']}/history/v1.0{hosts['workspace']}/runs/{run_id}{tail}",
                         params=params)

    # -- MLflow: a run's params and metrics ----------------------------------------------------------
    def run_data(self, run_id: str) -> tuple[dict[str, Any], dict[str, float]]:
        """The MLflow run's params (as numbers where they are) and latest metrics, from one ``runs/get``."""
        data = ((self.mlflow("runs/get", run_id=run_id) or {}).get("run") or {}).get("data") or {}
        return ({p["key"]: _number(p["value"]) for p in data.get("params", [])},
                {m["key"]: m["value"] for m in data.get("metrics", [])})

    def metric_history(self, run_id: str, metric: str) -> tuple[float, ...]:
        """Every value the run logged of ``metric``, in step order."""
        points: list[dict[str, Any]] = []
        token: str | None = None
        while True:  # MLflow pages a long history: follow next_page_token to the end
            params = {"run_id": run_id, "metric_key": metric, **({"page_token": token} if token else {})}
            page = self.mlflow("metrics/get-history", **params) or {}
            points += page.get("metrics", [])
            if not (token := page.get("next_page_token")):
                break
        return tuple(p["value"] for p in sorted(points, key=lambda p: (p.get("step", 0), p.get("timestamp", 0))))

    # -- Run History: a run's error, log and children -------------------------------------------------
    def error(self, run_id: str) -> str:
        """Why a failed run failed, as Run History says."""
        details = self.run_history(run_id) or {}
        return ((details.get("error") or {}).get("error") or {}).get("message") or "failed on Azure ML"

    def std_log(self, run_id: str) -> list[str]:
        """The run's ``user_logs/std_log.txt`` so far, through its SAS URL (what the script printed)."""
        files = (self.run_history(run_id) or {}).get("logFiles") or {}
        url = files.get("user_logs/std_log.txt")
        if not url:
            return []
        response = self.plain.send_request(HttpRequest("GET", url))
        return response.text().splitlines() if response.status_code == 200 else []

    def children(self, run_id: str) -> list[dict[str, Any]]:
        """Every child run of a sweep, following Run History's continuation tokens (the SDK's
        ``jobs.list(parent_job_name=...)`` reads the first page only: a large sweep would lose trials)."""
        runs: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self.run_history(run_id, "/children", **({"$continuationtoken": token} if token else {}))
            runs += (page or {}).get("value") or []
            if not (token := (page or {}).get("continuationToken")):
                return runs


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
