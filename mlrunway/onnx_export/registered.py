"""Export a registered model as a job on the backend, and register the ONNX model it writes.

Export and its parity gate need torch, onnx and onnxruntime, and the model in memory: they run as a job on the
backend's compute (:mod:`.job`), never in the Airflow worker, which only builds the job, reads its ``parity.json``
and registers its ``onnx`` output. On Azure ML the job's code folder is the exporter itself (:func:`code_folder`),
so its environment needs no mlrunway; locally it runs in the backend's Python. The backend is reached through the
structural :class:`ExportBackend` (this layer sits under :mod:`mlrunway.backend`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway.errors import JobFailed, ParityError, SpecError
from mlrunway.settings import EMPTY_IS_NONE, parse, setting
from mlrunway.specs.job import ROLE_TAG, CommandJobSpec, Input, Output

from .export import DEFAULT_OPSET
from .job import FORMAT, REPORT_FILE
from .parity import ATOL, RTOL, ParityReport, check_tolerance

RUNNER_PACKAGE = "mlrunway_export"  # the exporter's package in the job's code folder (never "mlrunway")
SHIPPED = ("errors.py", "_standalone.py", "signature.py", "parity.py", "images.py", "export.py", "job.py")
ONNX_OUTPUT, REPORT_OUTPUT = "onnx", "report"
ROLE = "export"
SIGNATURE_PROPERTY = "signature"  # the ONNX version's signature.json, kept as a property of the version


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class ExportSettings:
    """Where the export job runs, declared once (:mod:`mlrunway.settings`): the builder's ``export.environment``,
    ``ExportOnnxOperator(environment=)`` and the Azure connection's ``export_environment``."""

    environment: Annotated[str | None, EMPTY_IS_NONE] = setting(
        None, min_length=1, max_length=260,
        description="The export job's Azure ML environment (a curated name@version or a registered environment): it "
                    "needs the trials' torch, onnx, onnxscript and onnxruntime. Empty: the training image with the "
                    "project's torch plus the scoring environment's onnxruntime, onnx and onnxscript. Locally "
                    "ignored: the job runs in the backend's Python.",
        problem="{value!r} is not an environment name",
        fix="name an environment (e.g. my-export-env@latest), or leave it empty for mlrunway's own")

    @classmethod
    def parse(cls, environment: Any, field: str) -> ExportSettings:
        """From the value given (None or empty: the default); ``field`` is the name it was given under
        (``export.environment``, ``azure_ml connection.export_environment``), which an error starts with."""
        try:
            return parse(cls, {"environment": environment}, "", noun="export setting")
        except SpecError as exc:
            raise SpecError(f"{field}{str(exc).removeprefix('environment')}") from None


class ExportBackend(Protocol):
    """What the export step needs of a backend (:class:`mlrunway.backend.protocol.Backend` has it all)."""

    @property
    def jobs(self) -> Any: ...
    @property
    def models(self) -> Any: ...
    def named_output(self, job_name: str, output: str) -> str: ...
    def output_folder(self, base: str, path: str) -> AbstractContextManager[Path]: ...


def code_folder(dest: str | Path) -> Path:
    """Write the export job's code folder at ``dest``: the exporter's modules as the package ``mlrunway_export``
    (their imports are relative; :mod:`.errors` gives them stand-in errors there), which runs without mlrunway."""
    package = Path(dest) / RUNNER_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).parent
    for name in SHIPPED:
        shutil.copyfile(here / name, package / name)
    (package / "__init__.py").write_text('"""mlrunway\'s ONNX exporter, shipped as an export job\'s code folder '
                                         '(mlrunway.onnx_export.job)."""\n')
    return Path(dest)


@contextmanager
def shipped_code() -> Iterator[Path]:
    """The code folder in a scratch folder for the time of a submission (a backend snapshots or uploads it)."""
    with tempfile.TemporaryDirectory(prefix="mlrunway-export-code-") as scratch:
        yield code_folder(scratch)


def resolved_tolerance(atol: Any, rtol: Any) -> tuple[float | None, float | None]:
    """``atol``/``rtol`` as the DAG gave them (None: the default rule), checked as the gate will use them, so a bad
    tolerance fails before any job."""
    check_tolerance(ATOL if atol is None else atol, RTOL if rtol is None else rtol)
    return atol, rtol


def export_job(model: Any, code: str | Path, *, data_dir: str | None = None, opset: int = DEFAULT_OPSET,
               atol: float | None = None, rtol: float | None = None, inputs_file: str | None = None,
               trainer_torch: str | None = None, environment: str | None = None,
               experiment_name: str = "Default") -> CommandJobSpec:
    """The export job of the registered ``model`` (a ModelVersion: its folder is the job's ``model`` input): the
    exporter (``code``, :func:`code_folder`) writing ``outputs.onnx`` and ``outputs.report/parity.json``."""
    if isinstance(opset, bool) or not isinstance(opset, int) or not 7 <= opset <= 30:
        raise SpecError(f"export.opset: {opset!r} is not an ONNX opset from 7 to 30; pass e.g. {DEFAULT_OPSET}")
    atol, rtol = resolved_tolerance(atol, rtol)
    if inputs_file is not None and (not isinstance(inputs_file, str) or Path(inputs_file).is_absolute()
                                    or ".." in Path(inputs_file).parts or not inputs_file.endswith((".npy", ".npz"))
                                    or any(c.isspace() for c in inputs_file)):
        raise SpecError(f"export.inputs_file: {inputs_file!r} is not a .npy or .npz file inside the model folder; "
                        "pass its name there, without spaces, e.g. sample_inputs.npy")
    inputs: dict[str, Any] = {"model": Input(path=model.path)}
    key = export_key(model, data_dir=data_dir, opset=opset, atol=atol, rtol=rtol, inputs_file=inputs_file,
                     trainer_torch=trainer_torch, environment=environment)
    command = [f"python -m {RUNNER_PACKAGE}.job --model ${{{{inputs.model}}}} --onnx ${{{{outputs.{ONNX_OUTPUT}}}}}",
               f"--report ${{{{outputs.{REPORT_OUTPUT}}}}} --opset {opset} --key {key}"]
    command += [f"--atol {atol!r}"] if atol is not None else []
    command += [f"--rtol {rtol!r}"] if rtol is not None else []
    command += [f"--inputs-file {inputs_file}"] if inputs_file else []
    command += [f"--trainer-torch {trainer_torch}"] if trainer_torch else []
    if data_dir:
        inputs["data"] = Input(path=str(data_dir))
        command.append("--data-dir ${{inputs.data}}")
    return CommandJobSpec(
        code=str(code), command=" ".join(command), inputs=inputs,
        outputs={ONNX_OUTPUT: Output(), REPORT_OUTPUT: Output()}, environment=environment,
        experiment_name=experiment_name, display_name=f"export {model.name}:{model.version} to ONNX",
        tags={ROLE_TAG: ROLE, "source_model": f"{model.name}:{model.version}", "opset": str(opset)})


def export_key(model: Any, **settings: Any) -> str:
    """A digest of what an export job is asked (the model version and every setting that changes its answer): the
    job echoes it into its verdict, so a re-run finds whether a completed job answered the same question."""
    asked = {"model": f"{model.name}:{model.version}", "path": model.path, **settings}
    return hashlib.sha256(json.dumps(asked, sort_keys=True, default=str).encode()).hexdigest()[:16]


def stale_export(backend: ExportBackend, job_name: str, key: str) -> str | None:
    """Why the completed export job ``job_name`` does not answer ``key`` (it refused, or was asked otherwise: a
    re-run after a person mended the environment or the tolerance submits the next attempt), or None."""
    verdict = _verdict(backend, job_name)
    if verdict is None:
        return f"it left no readable {REPORT_FILE}"
    if not verdict.get("passed"):
        return f"it refused: {str(verdict.get('message'))[:200]}"
    if verdict.get("key") != key:
        return "it was asked with other settings"
    return None


def output_json(backend: ExportBackend, job_name: str, output: str, file: str) -> dict[str, Any] | None:
    """The JSON object a job left as ``file`` in its named ``output`` (the export job's verdict, the reference job's
    answer), read through the backend; None when it is not there or not an object."""
    with backend.output_folder(backend.named_output(job_name, output), "") as folder:
        try:
            found = json.loads((Path(folder) / file).read_text())
        except (OSError, ValueError):
            return None
    return found if isinstance(found, dict) else None


def _verdict(backend: ExportBackend, job_name: str) -> dict[str, Any] | None:
    return output_json(backend, job_name, REPORT_OUTPUT, REPORT_FILE)


AZURE_ENVIRONMENT_FIX = ("name an environment with the trials' torch, onnx, onnxscript and onnxruntime, or leave it "
                         "empty for mlrunway's own")


def read_verdict(backend: ExportBackend, job_name: str, *, environment_field: str,
                 environment_fix: str = AZURE_ENVIRONMENT_FIX) -> dict[str, Any]:
    """The export job's ``parity.json``; a gate it failed raises ParityError, a model or setting it refused
    SpecError, an environment without what export needs SpecError naming ``environment_field``; a job that left
    no verdict JobFailed. Returns the verdict of a passed gate: its ``report`` (the parity figures) and the ONNX
    model's ``signature``."""
    verdict = _verdict(backend, job_name)
    if verdict is None:
        raise JobFailed(f"export job {job_name} left no readable {REPORT_FILE}; its log says why")
    if verdict.get("format") != FORMAT:
        raise JobFailed(f"export job {job_name}: {REPORT_FILE} is not a verdict of format {FORMAT}: {verdict!r}")
    if verdict.get("passed"):
        return verdict
    error, message = verdict.get("error"), f"export job {job_name}: {verdict.get('message')}"
    if error == "environment":
        raise SpecError(f"{environment_field}: {message}; {environment_fix}")
    if error == "SpecError":
        raise SpecError(message)
    raise ParityError(message)


def register_export(backend: ExportBackend, job_name: str, source: Any, verdict: dict[str, Any], *, opset: int,
                    onnx_name: str | None = None) -> Any:
    """Register the job's ``onnx`` output as the next version of ``onnx_name`` (default ``<name>-onnx``), with
    its parity figures and signature (a property: the deploy task reads it there, never downloading the model); a
    retried task finds the version it registered (by ``source_job``) and registers nothing."""
    name = onnx_name or f"{source.name}-onnx"
    existing = [m for m in backend.models.list(name) if m.properties.get("source_job") == job_name]
    if existing:
        return existing[-1]
    figures = verdict["report"]
    report = ParityReport.from_dict(figures)
    return backend.models.register(
        name, "", base=backend.named_output(job_name, ONNX_OUTPUT), format="onnx",
        tags={"source_model": f"{source.name}:{source.version}", "opset": str(opset)},
        properties={"source_model": f"{source.name}:{source.version}", "opset": opset, "parity": figures,
                    "source_job": job_name, SIGNATURE_PROPERTY: verdict.get("signature") or {}},
        description=f"ONNX export of {source.name}:{source.version}; {report.summary()}")


def export_registered(backend: ExportBackend, name: str, version: int | str, *, job_name: str,
                      data_dir: str | None = None, opset: int = DEFAULT_OPSET, atol: float | None = None,
                      rtol: float | None = None, inputs_file: str | None = None, environment: str | None = None,
                      trainer_torch: str | None = None, timeout: float | None = None,
                      wait: Callable[[str], Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Export ``name:version`` as job ``job_name`` on ``backend``, wait for it and register the ONNX model: (the
    new model version, the parity report as a dict). The export task does the same in steps (deferrable, re-attached
    on retry); this is the whole of it at once, for scripts and benchmarks. A failed gate registers nothing."""
    source = backend.models.get(name, int(version))
    with shipped_code() as code:
        backend.jobs.submit(job_name, export_job(source, code, data_dir=data_dir, opset=opset, atol=atol, rtol=rtol,
                                                 inputs_file=inputs_file, trainer_torch=trainer_torch,
                                                 environment=environment))
    info = (wait or (lambda job: backend.jobs.wait(job, timeout=timeout)))(job_name)
    if info.status.value != "Completed":  # pipeline.require_completed's rule (that layer sits above this one)
        raise JobFailed(f"export job {job_name} ended {info.status.value}: {info.error or 'see its log'}")
    verdict = read_verdict(backend, job_name, environment_field="export.environment")
    return register_export(backend, job_name, source, verdict, opset=opset), verdict["report"]
