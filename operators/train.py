"""TrainModelOperator: the team's own command job, in azure-ai-ml's words, run once and waited on."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.sdk import Context

from mlrunway import check, lineage
from mlrunway.airflow.triggers import JobTrigger, LogCopy
from mlrunway.backend.types import JobInfo
from mlrunway.errors import JobFailed, SpecError
from mlrunway.ledger.budget import refusals, spent_before, train_verdict
from mlrunway.ledger.cost import rates_for
from mlrunway.operators._base import MlrunwayBaseOperator
from mlrunway.operators._job import MlrunwayJobOperator
from mlrunway.pipeline import check_metrics, check_model_output, require_completed
from mlrunway.specs import CommandJobSpec
from mlrunway.specs.vocabulary import JOB_ARGUMENTS, merged_job


class TrainModelOperator(MlrunwayJobOperator):
    """Submit the command job under a name derived from the run (a retry re-attaches to it), stream its log,
    and check the model it leaves against the model contract before anything downstream spends on it.

    :param job: the job as ``azure.ai.ml.command`` takes it, one dict (``{"command": "python fit.py --lr
        ${{inputs.lr}}", "code": "./src", "inputs": {"lr": 0.01}, ...}``), a template that renders to one, or a
        ``CommandJobSpec`` as it is.
        The keyword arguments below, when given, override its fields one by one; all are templated.
    :param command: the command line, with ``${{inputs.x}}`` and ``${{outputs.y}}``.
    :param code: the folder snapshotted as the job's working directory.
    :param inputs: literals, local paths or ``azureml://`` URIs (``{"type": "uri_folder", "path": ...}``).
    :param outputs: named outputs (``{"model": {"type": "uri_folder"}}``).
    :param environment: Azure: a curated ``name@version`` or a registered environment; locally ignored.
    :param compute: Azure: a compute cluster, or empty for serverless; locally ignored.
    :param distribution: ``{"type": "pytorch", "process_count_per_instance": 4}``, ``mpi`` or ``tensorflow``.
    :param instance_count: nodes (the local backend has one).
    :param environment_variables: for every process of the job.
    :param experiment_name: MLflow / Azure ML experiment.
    :param display_name: the job's display name.
    :param tags: the job's tags.
    :param timeout: seconds after which the backend cancels the job (``limits.timeout`` in azure-ai-ml).
    :param queue_settings: Azure ML, serverless jobs: ``{"job_tier": "spot"}`` (low-cost, preemptible; its cost is
        priced at the spot rate); locally ignored.
    :param model_path: where the job leaves its model: a folder under its outputs (``outputs/model``, the
        default) or a named output (``${{outputs.model}}``); checked as soon as the job ends.
    :param export: the export task's settings the model is checked against then (``inputs_file``, read from its
        header; ``data_dir``; ``atol``/``rtol``), so what export would refuse fails before a sweep spends anything.
    :param required_metrics: metrics the job must have logged (the sweep's primary metric when its trials run
        this job); a missing one fails the task naming those it did log.
    :param max_wait_s: cancel the job and fail past this many seconds.
    :param poll_interval_s: seconds between status checks (default: the backend's).
    :param deferrable: wait in the triggerer (default) or, with False, in the worker.
    :param preflight: checks run first thing in ``execute``, before the job is submitted (lifecycle()'s checks
        of the whole run); a failure is the log's first line of the task's own, not inside a collapsed group.
    :param budget: the run's budget (:class:`~mlrunway.ledger.budget.Budget`; None: the connection's): refused
        before the job when the job's rate cannot keep it; a job that leaves the sweep nothing of it fails the task,
        before any trial.
    """

    template_fields = (*MlrunwayJobOperator.template_fields, "job", *JOB_ARGUMENTS, "model_path", "export",
                       "required_metrics", "budget")

    def __init__(self, *, job: Mapping[str, Any] | CommandJobSpec | str | None = None, command: str | None = None,
                 code: str | None = None, inputs: dict[str, Any] | None = None, outputs: dict[str, Any] | None = None,
                 environment: str | None = None, compute: str | None = None, distribution: Any = None,
                 instance_count: int | str | None = None, environment_variables: dict[str, str] | None = None,
                 experiment_name: str | None = None, display_name: str | None = None,
                 tags: dict[str, str] | None = None, timeout: float | str | None = None,
                 queue_settings: dict[str, str] | None = None,
                 model_path: str = "outputs/model", export: Mapping[str, Any] | None = None,
                 required_metrics: Sequence[str] | None = None, preflight: Callable[[Context], None] | None = None,
                 budget: Mapping[str, Any] | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.preflight = preflight
        self.job, self.command, self.code, self.inputs, self.outputs = job, command, code, inputs, outputs
        self.environment, self.compute, self.distribution = environment, compute, distribution
        self.instance_count, self.environment_variables = instance_count, environment_variables
        self.experiment_name, self.display_name, self.tags, self.timeout = experiment_name, display_name, tags, timeout
        self.model_path, self.export, self.required_metrics = model_path, export, required_metrics
        self.queue_settings, self.budget = queue_settings, budget

    def execute(self, context: Context) -> Any:
        if self.preflight is not None:
            try:
                self.preflight(context)
            except SpecError as exc:  # one readable line at the top of the task's own log, then the traceback
                self.log.error("PREFLIGHT FAILED, nothing was started: %s", exc)
                raise
        return super().execute(context)

    def spec(self, data_interval: tuple[str, str] | None = None) -> CommandJobSpec:
        """The job these (rendered) arguments describe; a pure function of them, so preflight can build it."""
        return merged_job(self.job, {name: getattr(self, name) for name in JOB_ARGUMENTS}).with_data_interval(
            data_interval)

    def job_name(self, context: Context) -> str:
        return self.names(context).train_job

    def submit(self, name: str, context: Context) -> JobInfo:
        spec = self.spec(self.data_interval(context))
        if self.preflight is None:  # lifecycle's preflight refused it already, with the sweep's trial
            refusals(self.backend, self.run_budget, {"the job": spec})
        info = self.backend.jobs.submit(name, spec)
        self.log.info("Training job %s submitted", name)
        return info

    def progress(self, name: str) -> LogFollower:
        return LogFollower(self, name)

    def trigger(self, name: str, deadline: float) -> JobTrigger:
        """The deferred wait, copying the job's log lines as the synchronous one does."""
        return JobTrigger(self.backend_conn_id, name, self.poll_s, deadline, follow_logs=True)

    def finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        require_completed(info, "training job")
        required = self.required_metrics or []
        if isinstance(required, str) or not all(isinstance(name, str) and name for name in required):
            raise check.fail("required_metrics", f"{required!r} is not a list of metric names", 'pass e.g. ["val_f1"]')
        metrics = check_metrics(self.backend, info.name, required)
        files = check_model_output(self.backend, info.name, self.model_path, self.export)
        self.log.info("%s left a model at %s: %s", info.name, self.model_path, ", ".join(files))
        self.check_budget(context)
        return {"job_name": info.name, "status": info.status.value, "metrics": metrics}

    def check_budget(self, context: Context) -> None:
        """Fail the task, before any trial, where the training job (every attempt of it) left the sweep nothing."""
        if (budget := self.run_budget) is None:
            return
        card = rates_for(self.backend, [])
        used, refused = train_verdict(budget, card, spent_before(self.backend, self.names(context)))
        if refused:
            raise JobFailed(refused)
        self.log.info("Budget: Train spent %s of %s", budget.amount(used, card), budget.amount(budget.limit, card))

    # -- OpenLineage -------------------------------------------------------------------------------------
    def lineage_inputs(self) -> list[lineage.LineageDataset]:
        """The job's data inputs and its code snapshot (versioned by its hash)."""
        return lineage.command_job_inputs(self.spec(), self.lineage_namespace)

    def lineage_outputs(self, result: dict[str, Any]) -> list[lineage.LineageDataset]:
        """The job's run (the attempt that ran)."""
        return [lineage.job(self.lineage_namespace, result["job_name"])] if result.get("job_name") else []


class LogFollower:
    """The synchronous wait's copy of the job's new stdout lines (one per epoch) into the task log, on every poll
    (:class:`~mlrunway.airflow.triggers.LogCopy`, as the deferred wait's trigger copies them)."""

    def __init__(self, operator: MlrunwayBaseOperator, name: str) -> None:
        self.operator, self.copy = operator, LogCopy(operator.log, name)

    def __call__(self, _info: Any) -> None:
        self.copy.copy(self.operator.backend)
