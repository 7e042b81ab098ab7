"""ExportOnnxOperator: export the picked model to ONNX as a job on the backend, gate it on parity, register it."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context

from mlrunway import lineage
from mlrunway.backend.types import JobInfo
from mlrunway.onnx_export import DEFAULT_OPSET, ExportSettings, ParityReport, export_job, read_verdict, register_export
from mlrunway.onnx_export.registered import export_key, resolved_tolerance, shipped_code, stale_export
from mlrunway.operators._job import MlrunwayJobOperator
from mlrunway.pipeline import require_completed

ENVIRONMENT_FIELD = "export.environment (ExportOnnxOperator(environment=), or the connection's export_environment)"
OWN_PYTHON_FIX = ('install torch (first, from PyTorch\'s index) and "mlrunway[local]" where the {kind} backend runs: '
                  "its jobs run in its own Python")


class ExportOnnxOperator(MlrunwayJobOperator):
    """Export and gate as a job on the backend's compute (the worker needs no torch, and never holds the model):
    submitted under the run's name, waited on in the triggerer (or here), re-attached on retry. The job writes the
    ONNX model as its ``onnx`` output and the gate's verdict as ``parity.json``; a gate that fails is a verdict, and
    the task raises ParityError from it, registering nothing; one that passes registers ``<model_name>-onnx``.

    :param model_name: registered model to export.
    :param model_version: its version.
    :param data_dir: ImageFolder data; the gate uses its validation images (an input of the job: uploaded on Azure).
    :param opset: ONNX opset.
    :param atol: the parity gate's absolute tolerance: each ONNX output must be within ``atol + rtol * |torch|``
        of PyTorch's (numpy's ``isclose``); ``atol`` covers outputs near zero. Default (None): ``ATOL``; a model
        with a float16 input is refused unless ``atol`` or ``rtol`` is set here (the default is tuned for float32).
    :param rtol: the relative tolerance, the part that grows with the outputs (float32 rounding does), so a
        regressor whose outputs are in the thousands passes as one whose outputs are near 1. Default: ``RTOL``.
    :param inputs_file: the gate's inputs in the model folder, fed as stored (never cast): a ``.npy`` for a model
        of one input (``sample_inputs.npy``), or an ``.npz`` of one array per input name; needed for an int or bool
        input, or an axis of any size. Default: the validation images ``data_dir`` holds for an image model,
        else random float inputs of the signature's shape.
    :param environment: the export job's environment on Azure ML (:class:`~mlrunway.onnx_export.ExportSettings`):
        it needs the trials' torch, onnx, onnxscript and onnxruntime. Default: the connection's
        ``export_environment``, else the training image with those added. Locally ignored.
    """

    template_fields = (*MlrunwayJobOperator.template_fields, "model_name", "model_version", "data_dir", "inputs_file",
                       "atol", "rtol", "environment")

    def __init__(self, *, model_name: str, model_version: int | str, data_dir: str | None = None,
                 opset: int = DEFAULT_OPSET, atol: float | None = None, rtol: float | None = None,
                 inputs_file: str | None = None, environment: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_name, self.model_version, self.data_dir = model_name, model_version, data_dir
        self.opset, self.atol, self.rtol, self.inputs_file = opset, atol, rtol, inputs_file
        self.environment = environment

    def job_name(self, context: Context) -> str:
        return self.names(context).export_job

    def asked(self) -> dict[str, Any]:
        """The export job's settings, as rendered and checked (a bad one fails here, before any job)."""
        environment = ExportSettings.parse(self.environment, "export.environment").environment
        atol, rtol = resolved_tolerance(self.atol, self.rtol)
        return {"data_dir": self.data_dir or None, "opset": self.opset, "atol": atol, "rtol": rtol,
                "inputs_file": self.inputs_file or None, "environment": environment,
                "trainer_torch": self.backend.capabilities.trainer_torch}

    def submit(self, name: str, context: Context) -> JobInfo:
        source = self.backend.models.get(self.model_name, int(self.model_version))
        with shipped_code() as code:
            info = self.backend.jobs.submit(name, export_job(source, code, **self.asked()))
        self.log.info("Export job %s submitted: %s:%s to ONNX (opset %s)", name, source.name, source.version,
                      self.opset)
        return info

    def stale(self, info: JobInfo, context: Context) -> str | None:
        """A completed export job that refused (a person may have mended its environment or tolerance since) or was
        asked otherwise is followed by the next attempt; one that passed with these settings is re-attached to."""
        source = self.backend.models.get(self.model_name, int(self.model_version))
        return stale_export(self.backend, info.name, export_key(source, **self.asked()))

    def finish(self, context: Context, info: JobInfo) -> dict[str, Any]:
        require_completed(info, "export job")
        if self.backend.capabilities.job_environments:
            verdict = read_verdict(self.backend, info.name, environment_field=ENVIRONMENT_FIELD)
        else:  # its jobs run in the backend's own Python: no environment to name
            kind = self.backend.kind
            verdict = read_verdict(self.backend, info.name, environment_field=f"the {kind} backend's Python",
                                   environment_fix=OWN_PYTHON_FIX.format(kind=kind))
        parity = verdict["report"]
        source = self.backend.models.get(self.model_name, int(self.model_version))
        model = register_export(self.backend, info.name, source, verdict, opset=self.opset)
        self.link(context, "model", model.name, model.version)
        self.log.info("Exported %s:%s to %s:%s in job %s; parity: %s", self.model_name, self.model_version,
                      model.name, model.version, info.name, ParityReport.from_dict(parity).summary())
        return {"model_name": model.name, "model_version": model.version, "opset": self.opset, "parity": parity,
                "job_name": info.name}

    # -- OpenLineage -------------------------------------------------------------------------------------
    def lineage_inputs(self) -> list[lineage.LineageDataset]:
        """The model version it exports and the data its parity gate reads."""
        namespace = self.lineage_namespace
        gate = [lineage.data(self.data_dir, namespace)] if self.data_dir else []
        return [lineage.model_version(namespace, self.model_name, self.model_version), *gate]

    def lineage_outputs(self, result: dict[str, Any]) -> list[lineage.LineageDataset]:
        """The ONNX model version it registered."""
        if not result.get("model_name"):
            return []
        return [lineage.model_version(self.lineage_namespace, result["model_name"], result["model_version"])]
