"""The lifecycle's steps over any ``Backend``: pick the best trial, clean up (deploying is :mod:`mlrunway.deploy`).

Operators call these; they hold no Airflow. Every name a run creates derives from the DAG and the run
(:class:`~mlrunway.backend.naming.RunNames`), so two runs or a backfill never collide and a retried task finds
what its earlier try created.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlrunway import check
from mlrunway.backend.naming import RunNames, attempts
from mlrunway.backend.protocol import Backend, OutputFiles
from mlrunway.backend.types import (
    JobInfo,
    JobStatus,
    SweepResult,
    TrialInfo,
)
from mlrunway.errors import JobFailed, NotFound, SpecError
from mlrunway.onnx_export.export import SIGNATURE, check_model_folder
from mlrunway.sweep.attempts import sweep_result
from mlrunway.sweep.leaderboard import best_trial, trial_score

log = logging.getLogger(__name__)


def require_completed(info: JobInfo, what: str) -> None:
    """Raise JobFailed with the job's own reason unless it completed."""
    if info.status is not JobStatus.COMPLETED:
        raise JobFailed(f"{what} {info.name} ended {info.status.value}: {info.error or 'no reason recorded'}")


_NAMED_OUTPUT = re.compile(r"^\$\{\{\s*outputs\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
MODEL_FILES = ("model.pt2", "model.onnx")


def model_source(backend: Backend, job_name: str, model_path: str) -> tuple[str, str]:
    """Where job ``job_name`` leaves its model, as the registry's (base, path): a folder under the job's
    outputs (``outputs/model``) or a named output (``${{outputs.model}}``)."""
    if named := _NAMED_OUTPUT.match(model_path.strip()):
        return backend.named_output(job_name, named[1]), ""
    folder = model_path.strip().removeprefix("./")
    if folder != "outputs" and not folder.startswith("outputs/"):
        raise check.fail("model_path", f"{model_path!r} is neither under outputs/ nor a named output",
                         "pass a folder under the job's outputs (outputs/model) or ${{outputs.<name>}}")
    return backend.job_outputs(job_name), folder.removeprefix("outputs").strip("/")


def check_model_output(backend: Backend, job_name: str, model_path: str,
                       export: Mapping[str, Any] | None = None) -> list[str]:
    """The model contract, checked where the job left its model: ``signature.json`` and the model file it names
    (``model.pt2`` or ``model.onnx``), then every rule the export step applies that needs no torch, with the
    export's settings (``inputs_file``, read from its header; ``data_dir``; whether ``atol``/``rtol`` are set):
    see :func:`mlrunway.onnx_export.export.check_model_folder`. JobFailed names what is missing, a SpecError
    what export would refuse. A backend whose outputs are remote (:class:`~mlrunway.backend.protocol.OutputFiles`:
    Azure ML) gives only ``signature.json`` and the inputs file, and says whether the model file is there: the
    model itself is never downloaded. The contract's files found are returned."""
    base, path = model_source(backend, job_name, model_path)
    settings = dict(export or {})
    inputs_file = settings.get("inputs_file") or None
    with _model_folder(backend, base, path, inputs_file) as (folder, found):
        _check_model_folder(job_name, model_path, folder, found)
        try:
            check_model_folder(folder, inputs_file=inputs_file, data_dir=settings.get("data_dir") or None,
                               tolerance_given=settings.get("atol") is not None or settings.get("rtol") is not None)
        except SpecError as exc:
            raise SpecError(f"{exc} (the model job {job_name} left at {model_path}, checked before anything else "
                            "spends on it)") from None
    return found


@contextmanager
def _model_folder(backend: Backend, base: str, path: str, inputs_file: str | None) -> Iterator[tuple[Path, list[str]]]:
    """A folder with the model folder's signature.json (and inputs file), and the files of the contract found there:
    a remote backend's few files downloaded and the model file's presence asked, else the folder as it is."""
    if not isinstance(backend, OutputFiles):
        with backend.output_folder(base, path) as folder:
            yield folder, sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        return
    wanted = [SIGNATURE, *([inputs_file] if inputs_file else [])]
    with backend.output_files(base, path, wanted) as folder:
        found = [name for name in wanted if (folder / name).is_file()]
        if (folder / SIGNATURE).is_file():  # the file it names (one it cannot name is the check's to refuse)
            named, _ = _named_model_file(folder / SIGNATURE)
            probe = [named] if isinstance(named, str) else []
        else:  # the contract's model files, to say what is there
            probe = list(MODEL_FILES)
        found += [name for name in probe if backend.output_exists(base, path, name)]
        yield folder, sorted(found)


def _named_model_file(signature: Path) -> tuple[Any, str | None]:
    """(the model file signature.json names, ``model.pt2`` when it names none; None) or (None, why it cannot say)."""
    try:
        named = json.loads(signature.read_text())
    except ValueError as exc:
        return None, f"signature.json is not JSON ({exc})"
    if not isinstance(named, dict):
        return None, f"signature.json is {type(named).__name__}, not an object"
    return named.get("file") or MODEL_FILES[0], None


def check_metrics(backend: Backend, job_name: str, required: Sequence[str]) -> dict[str, float]:
    """The job's last value of each metric; JobFailed naming the metrics it did log when one of ``required`` (the
    sweep's primary metric, when its trials run this job) is missing."""
    metrics = backend.jobs.metrics(job_name)
    if missing := [name for name in required if name not in metrics]:
        raise JobFailed(f"job {job_name}: it logged no {', '.join(map(repr, missing))} (it logged: "
                        f"{', '.join(sorted(metrics)) or 'no metric'}); the sweep ranks its trials by it: log it once "
                        "per epoch (mlflow.log_metric), or name a metric the script logs in objective.primary_metric")
    return metrics


def _check_model_folder(job_name: str, model_path: str, folder: Path, found: list[str]) -> None:
    signature = folder / SIGNATURE
    problem = None
    if not found:
        problem = "nothing is there"
    elif not signature.is_file():
        problem = "signature.json is missing"
    else:
        model_file, problem = _named_model_file(signature)
        if model_file is not None and model_file not in found:
            problem = f"signature.json names {model_file!r}, which is not there"
    if problem:
        raise JobFailed(f"job {job_name}: no model at {model_path}: {problem} (found: {', '.join(found) or 'none'}); "
                        "save model.pt2 (torch.export) or model.onnx with signature.json there, as the "
                        "training-script contract says (docs/reference/training-script.md), or point model_path at "
                        "where the job saves it")


def pick_best(backend: Backend, sweep_name: str, model_name: str, model_path: str = "outputs/model") -> dict[str, Any]:
    """Register the best trial's model (found at ``model_path``, see :func:`model_source`) with its
    hyperparameters and metric; return the reference.

    The trials of the sweep's earlier attempts that completed count too (a retried sweep carries them over).
    """
    sweep = sweep_result(backend.jobs, sweep_name)
    objective = sweep.objective
    best = _best(sweep)
    if best is None:
        raise JobFailed(f"sweep {sweep_name}: no trial logged {objective.primary_metric!r}; nothing to register")
    metric = trial_score(best, objective)
    existing = [m for m in backend.models.list(model_name) if m.properties.get("source_job") == best.name]
    if existing:  # a retried task: the model is already registered
        model = existing[-1]
    else:
        base, path = model_source(backend, best.name, model_path)
        model = backend.models.register(
            model_name, path, base=base, format="torch.export",
            tags={**{k: str(v) for k, v in best.params.items()}, objective.primary_metric: f"{metric:.6f}"},
            properties={"source_job": best.name, "sweep": sweep_name, "params": best.params,
                        objective.primary_metric: metric},
        )
    log.info("Best trial %s: %s %.4f with %s; registered %s:%s", best.name, objective.primary_metric, metric,
             best.params, model.name, model.version)
    return {"model_name": model.name, "model_version": model.version, "trial": best.name, "params": best.params,
            "metric": objective.primary_metric, "value": metric}


def _best(sweep: SweepResult) -> TrialInfo | None:
    """The backend's own pick (Azure's ``best_child_run_id``) when it made one, else our ranking; a warning
    with both when they differ, so the report and the registered model never disagree in silence."""
    ranked = best_trial(sweep.trials, sweep.objective)
    picked = next((t for t in sweep.trials if t.name == sweep.best_trial), None)
    if picked is None:
        return ranked
    if ranked is not None and ranked.name != picked.name:
        log.warning("Sweep %s: the backend picked %s (%s %s), the ranking %s (%s %s); registering the backend's pick",
                    sweep.name, picked.name, sweep.objective.primary_metric, trial_score(picked, sweep.objective),
                    ranked.name, sweep.objective.primary_metric, trial_score(ranked, sweep.objective))
    return picked


def cleanup(backend: Backend, names: RunNames, *, delete_endpoint: bool = True,
            archive: Sequence[tuple[str, int]] = ()) -> dict[str, Any]:
    """Delete what the run created; what is already gone counts as done. Stray jobs of the run (every attempt's,
    and the trials of its sweeps) are canceled; they are looked up by name, never by listing the workspace. With
    ``delete_endpoint`` off, ``endpoint_kept`` says whether the run's own endpoint exists (a run on a stable
    endpoint never made one)."""
    stray = _running_jobs(backend, names)
    for name in stray:  # a job whose watch was lost on the last try, a sweep's orphaned trials: still running
        log.warning("Job %s was still running on the %s backend when the run ended: canceling it", name, backend.kind)
        backend.jobs.cancel(name, reason="cleanup: the pipeline run ended")
    # The run's endpoint by each name it may have (a run deployed before names were salted has the older one):
    # looked up by name, never by listing the workspace.
    deleted = any([backend.endpoints.delete(name) for name in names.endpoints]) if delete_endpoint else False
    kept = not delete_endpoint and any(_exists(backend, name) for name in names.endpoints)
    archived = []
    for model_name, version in archive:
        try:
            backend.models.archive(model_name, int(version))
            archived.append(f"{model_name}:{version}")
        except NotFound:
            pass
    log.info("Cleanup of run %s: endpoint %s %s; canceled %s; archived %s", names.run_key, names.endpoint,
             "deleted" if deleted else "kept" if kept else "never made", stray or "nothing", archived or "nothing")
    return {"endpoint_deleted": deleted, "canceled_jobs": stray, "archived_models": archived, "endpoint_kept": kept}


def _exists(backend: Backend, endpoint: str) -> bool:
    return backend.endpoints.first_existing(endpoint) is not None


def _running_jobs(backend: Backend, names: RunNames) -> list[str]:
    """The run's jobs that have not ended: each attempt of its training job, sweep, export and reference jobs, and
    the sweeps' trials (a sweep whose controller died may have left trials running)."""
    running = []
    for base in (names.train_job, names.sweep, names.export_job, names.reference_job):
        for name in attempts(base):
            try:
                info = backend.jobs.get(name)
            except NotFound:
                break
            if not info.status.is_terminal():
                running.append(name)
            if info.kind == "sweep":
                running += [t.name for t in backend.jobs.sweep_result(name).trials if not t.status.is_terminal()]
    return running


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix or len(prefix) > 23:
        raise check.fail("endpoint_prefix", f"{prefix!r} must be 1 to 23 characters",
                          "leave room for the run's 9-character suffix within Azure's 32")
    return prefix
