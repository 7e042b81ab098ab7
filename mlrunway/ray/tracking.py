"""Runs on the connection's MLflow server: each job's run is created before the job is submitted (a trial's nested
under its sweep's) and its id passed in the job's environment; the job's entry ends it, or the next read of a job
that ended without it (:meth:`mlrunway.ray.jobs.RayJobs.get`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from mlrunway.errors import Unavailable
from mlrunway.tracking_names import RUN_STATUS, run_tags

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = ["Tracking", "answered", "client"]


@functools.cache
def client(tracking_uri: str) -> MlflowClient:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri, registry_uri=tracking_uri)


def answered(uri: str, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call``; a server that does not answer (refused, 5xx, retries spent) is Unavailable naming it. MLflow gives a
    connection it could not make (after its retries) as INTERNAL_ERROR, a 500: the status is the test, never the
    message's words (a model named ``connector`` is no outage)."""
    import requests
    from mlflow.exceptions import MlflowException

    try:
        return call(*args, **kwargs)
    except MlflowException as exc:
        if exc.get_http_status_code() >= 500:
            raise Unavailable(f"the MLflow server at {uri} did not answer ({what}): {exc}") from exc
        raise
    except requests.ConnectionError as exc:  # an artifact transfer that MLflow does not wrap
        raise Unavailable(f"the MLflow server at {uri} did not answer ({what}): {exc}") from exc


class Tracking:
    """One MLflow server's runs. A server that does not answer is Unavailable (a wait rides it out)."""

    def __init__(self, tracking_uri: str) -> None:
        self.uri = tracking_uri

    @property
    def client(self) -> MlflowClient:
        return client(self.uri)

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        return answered(self.uri, what, call, *args, **kwargs)

    def start_run(self, job_name: str, experiment: str, parent_run_id: str | None) -> tuple[str, str]:
        """Create the job's run, and its experiment if there is none; (experiment id, run id)."""
        from mlflow.exceptions import MlflowException

        found = self._call("read an experiment", self.client.get_experiment_by_name, experiment)
        if found is not None:
            experiment_id = found.experiment_id
        else:
            try:
                experiment_id = self.client.create_experiment(experiment)
            except MlflowException:  # another submitter created it first
                created = self.client.get_experiment_by_name(experiment)
                if created is None:
                    raise
                experiment_id = created.experiment_id
        run = self._call("create a run", self.client.create_run, experiment_id,
                         tags=run_tags(job_name, parent_run_id), run_name=job_name)
        return experiment_id, run.info.run_id

    def end_run(self, run_id: str, status: str) -> None:
        """End the run as the job ended (Completed, Failed, Canceled), where it still runs."""
        run = self._call("read a run", self.client.get_run, run_id)
        if run.info.status == "RUNNING":
            self._call("end a run", self.client.set_terminated, run_id, RUN_STATUS.get(status, "FAILED"))

    def latest_metrics(self, run_id: str) -> dict[str, float]:
        return dict(self._call("read metrics", self.client.get_run, run_id).data.metrics)

    def metric_history(self, run_id: str, key: str) -> list[float]:
        history = self._call("read a metric's history", self.client.get_metric_history, run_id, key)
        return [m.value for m in sorted(history, key=lambda m: (m.step, m.timestamp))]

    def metric_histories(self, run_ids: Collection[str], key: str) -> dict[str, list[float]]:
        return {run_id: self.metric_history(run_id, key) for run_id in run_ids}

    def params(self, run_id: str) -> dict[str, Any]:
        return dict(self._call("read params", self.client.get_run, run_id).data.params)

    def log_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self._call("log a metric", self.client.log_metric, run_id, key, value)

    def log_artifacts(self, run_id: str, folder: str, artifact_path: str) -> None:
        self._call("keep artifacts", self.client.log_artifacts, run_id, folder, artifact_path)
