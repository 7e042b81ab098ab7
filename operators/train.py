"""TrainModelOperator: run training/train.py (or your script) as one command job and wait for it."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway.backend.types import JobInfo
from mlrunway.pipeline import require_completed
from mlrunway.sweep.presets import train_job
from operators._base import MlrunwayBaseOperator
from operators._job import MlrunwayJobOperator


class TrainModelOperator(MlrunwayJobOperator):
    """Submit the command job under a name derived from the run (a retry re-attaches to it) and stream its log.

    :param code_dir: folder with the training script (snapshotted at submit).
    :param data_dir: ImageFolder data (train/ and val/).
    :param num_epochs: epochs to train.
    :param learning_rate: SGD learning rate.
    :param momentum: SGD momentum.
    :param experiment_name: MLflow / Azure ML experiment.
    :param max_wait_s: cancel the job and fail past this many seconds.
    :param poll_interval_s: seconds between status checks (default: the backend's).
    :param deferrable: wait in the triggerer (default) or, with False, in the worker.
    """

    template_fields = (*MlrunwayJobOperator.template_fields, "code_dir", "data_dir", "num_epochs",
                       "learning_rate", "momentum", "experiment_name")

    def __init__(self, *, code_dir: str, data_dir: str, num_epochs: int | str = 20, learning_rate: float | str = 0.01,
                 momentum: float | str = 0.9, experiment_name: str = "mlrunway", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.code_dir, self.data_dir = code_dir, data_dir
        self.num_epochs, self.learning_rate, self.momentum = num_epochs, learning_rate, momentum
        self.experiment_name = experiment_name

    def job_name(self, context: Context) -> str:
        return self.names(context).train_job

    def submit(self, name: str, context: Context) -> JobInfo:
        spec = train_job(self.code_dir, self.data_dir, num_epochs=int(self.num_epochs),
                         learning_rate=float(self.learning_rate), momentum=float(self.momentum),
                         experiment_name=self.experiment_name, data_interval=self.data_interval(context))
        info = self.backend.jobs.submit(name, spec)
        self.log.info("Training job %s submitted", name)
        return info

    def progress(self, name: str) -> LogFollower:
        return LogFollower(self, name)

    def finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        require_completed(info, "training job")
        return {"job_name": info.name, "status": info.status.value, "metrics": self.backend.jobs.metrics(info.name)}


class LogFollower:
    """Copy the job's new stdout lines (one per epoch) into the task log on every poll."""

    def __init__(self, operator: MlrunwayBaseOperator, name: str) -> None:
        self.operator, self.name, self.seen = operator, name, 0

    def __call__(self, _info: Any) -> None:
        lines = list(self.operator.backend.jobs.logs(self.name))
        for line in lines[self.seen:]:
            self.operator.log.info("[%s] %s", self.name, line)
        self.seen = len(lines)
