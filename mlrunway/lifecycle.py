"""A team's whole lifecycle in one call: the six tasks from one job, one sweep and one deployment description.

    with DAG("my_model", params={"epochs": Param(8, type="integer")}, ...):
        lifecycle(job={"command": "python fit.py --lr ${{inputs.lr}} --epochs ${{inputs.epochs}}", "code": CODE,
                       "inputs": {"lr": 0.01, "epochs": "{{ params.epochs }}"}},
                  sweep={"search_space": {"lr": {"type": "loguniform", "min_value": -7, "max_value": -2}},
                         "objective": {"primary_metric": "val_rmse", "goal": "minimize"}},
                  deployment={"sample_request": "sample_request.json"})

Each description is in azure-ai-ml's words, and any value in it may be a template (``{{ params.x }}``); the
tasks render them natively (numbers stay numbers, objects stay objects). The sweep is described once: the
Sweep task runs it, and the Train task's preflight renders the same object and checks the job, the sweep (each
search-space name reaching the command, each ``${{inputs.x}}`` defined) and the deployment's production settings
before the first job starts. A description's unknown key is refused when the DAG file is parsed.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, Context

from mlrunway import check
from mlrunway.airflow.hook import DEFAULT_CONN_ID
from mlrunway.backend.capture import DataCollector
from mlrunway.backend.types import Instances
from mlrunway.deploy import strategy_for
from mlrunway.ledger.budget import Budget
from mlrunway.operators import (
    CleanupOperator,
    DeployBlueOperator,
    ExportOnnxOperator,
    PickBestModelOperator,
    SweepOperator,
    TrainModelOperator,
)
from mlrunway.operators.deploy_blue import FLAT_KEYS, grouped
from mlrunway.operators.preflight import check_run, check_scoring_script

SWEEP_KEYS = ("trial", "search_space", "objective", "sampling_algorithm", "seed", "limits", "early_termination")
CLEANUP_KEYS = ("keep_endpoint",)  # a deployment's keys that belong to the cleanup task
# Arguments the builder sets itself, which a description may not override.
OWN = frozenset({"task_id", "backend_conn_id", "name_prefix", "model_name", "model_version", "sweep_name",
                 "model_card", "budget"})


@dataclass(frozen=True)
class Lifecycle:
    """The six tasks, in order, for a DAG that adds its own around them (``lifecycle(...).cleanup >> notify``), and
    the preflight the Train task runs before its job (``preflight(context)``; the context's ``task`` renders)."""

    preflight: Callable[[Context], None]
    train: TrainModelOperator
    sweep: SweepOperator
    pick_best: PickBestModelOperator
    export_onnx: ExportOnnxOperator
    deploy: DeployBlueOperator
    cleanup: CleanupOperator


def lifecycle(*, job: Mapping[str, Any] | str, sweep: Mapping[str, Any], deployment: Mapping[str, Any] | None = None,
              export: Mapping[str, Any] | None = None, model_path: str = "outputs/model",
              name_prefix: str = "model", backend_conn_id: str = DEFAULT_CONN_ID,
              preflight: Callable[[Context], None] | None = None, job_retries: int = 2,
              job_retry_delay: timedelta = timedelta(seconds=60), budget: Mapping[str, Any] | str | None = None
              ) -> Lifecycle:
    """Make the six tasks in the current DAG, chained train >> sweep >> pick_best >> export_onnx >> deploy >> cleanup.

    :param job: the training job, as ``azure.ai.ml.command`` takes it (or a template that renders to one); each
        trial of the sweep runs it too, unless ``sweep`` has a ``trial`` of its own.
    :param sweep: ``search_space``, ``objective``, ``sampling_algorithm``, ``seed``, ``limits``,
        ``early_termination`` (:class:`~mlrunway.operators.SweepOperator`'s arguments).
    :param deployment: DeployBlueOperator's arguments (``code_dir`` defaults to the job's ``code``;
        ``sample_request``, ``endpoint_name``, ``rollout``, ...) and ``keep_endpoint`` for the cleanup.
    :param export: ExportOnnxOperator's arguments (``inputs_file``, ``data_dir``, ``atol``, ``rtol``, ...).
    :param model_path: where the job leaves its model (``outputs/model``, or a named output ``${{outputs.model}}``).
    :param name_prefix: prefix of every name the run creates (jobs, models, the endpoint).
    :param backend_conn_id: the Airflow connection of the backend (``mlrunway_default``: local, no set-up).
    :param preflight: a check of the team's own, called with the context before the builder's checks.
    :param job_retries: the Train and Sweep tasks' retries, ``job_retry_delay`` apart: a retry re-attaches to the
        job whose watch was lost (its status unreadable past the connection's ``transient_outage_s``); a job that
        ended Failed or Canceled fails its task for good, never run again by a retry.
    :param job_retry_delay: the delay between those retries.
    :param budget: the most the run's jobs may spend (:class:`~mlrunway.ledger.budget.Budget`: ``max_cost`` or
        ``max_compute_hours``, and a ``reserve`` for export and the reference), or a template (``{{ params.budget
        }}``); None: the connection's ``budget``, else no limit. The sweep stops at it and still delivers its best
        model.
    """
    Budget.parse(budget if not _templated(budget) else None)  # refused when the DAG file is parsed
    sweep_args = _described("sweep", sweep, SWEEP_KEYS)
    deployment = dict(deployment or {})
    deploy_args = _described("deployment", {k: v for k, v in deployment.items() if k not in CLEANUP_KEYS},
                             (*_arguments(DeployBlueOperator), *FLAT_KEYS))
    export_args = _described("export", export or {}, _arguments(ExportOnnxOperator))
    if "code_dir" not in deploy_args:
        if not isinstance(job, Mapping) or not job.get("code"):
            raise check.fail("deployment.code_dir", "is missing and the job has no code folder to take it from",
                             "pass the folder that holds score.py")
        deploy_args["code_dir"] = job["code"]
    trial = sweep_args.pop("trial", job)
    common: dict[str, Any] = {"backend_conn_id": backend_conn_id, "name_prefix": name_prefix}

    def checks(context: Context) -> None:
        if preflight is not None:
            preflight(context)
        task: Any = context["task"]  # an mlrunway operator: it renders natively, ${{inputs.x}} untouched
        backend = getattr(task, "backend", None)
        if backend is not None and (why := backend.capabilities.endpoints) is not None:
            task.log.warning("PREFLIGHT: the deploy task will refuse on this backend (%s); the tasks before it run", why)
        described = task.render_template({"job": job, "sweep": {"trial": trial, **sweep_args},
                                          "deployment": deploy_args, "name_prefix": name_prefix, "budget": budget},
                                         context)
        check_run(context, job=described["job"], sweep=described["sweep"], name_prefix=described["name_prefix"],
                  budget=described["budget"])
        production = _flat(described["deployment"])
        DataCollector.parse(production.get("data_collector"))
        Instances.parse("deployment", instance_type=production.get("instance_type"),
                        instance_count=production.get("instance_count"))
        check_scoring_script(code_dir=production["code_dir"], scoring_script=production.get("scoring_script"))
        strategy_for(production.get("strategy"), production.get("endpoint_name")).validate(
            getattr(task, "backend", None), production)

    # The Train task checks what later steps need of its job as soon as it ends: the model against export's
    # settings, and the sweep's metric when the trials run this same job (a sweep's own trial may log others). An
    # objective given as one template is rendered only by the sweep: its metric is then not required here.
    objective = sweep_args.get("objective")
    required = [objective["primary_metric"]] if "trial" not in sweep and isinstance(objective, Mapping) and \
        objective.get("primary_metric") else None
    retried: dict[str, Any] = {"retries": job_retries, "retry_delay": job_retry_delay}
    train = TrainModelOperator(task_id="train", job=job, model_path=model_path, export=export_args,
                               required_metrics=required, preflight=checks, budget=budget, **retried, **common)
    swept = SweepOperator(task_id="sweep", trial=trial, **sweep_args, budget=budget, **retried, **common)
    pick = PickBestModelOperator(task_id="pick_best", sweep_name=_out(swept, "sweep_name"), model_path=model_path,
                                 **common)
    exported = ExportOnnxOperator(task_id="export_onnx", model_name=_out(pick, "model_name"),
                                  model_version=_out(pick, "model_version"), **export_args, **common)
    task_args = {k: v for k, v in deploy_args.items() if k not in FLAT_KEYS}
    for group, settings in grouped(deploy_args).items():  # a description's flat keys, the task's two objects
        task_args[group] = {**(task_args.get(group) or {}), **settings}
    deploy = DeployBlueOperator(task_id="deploy_blue", model_name=_out(exported, "model_name"),
                                model_version=_out(exported, "model_version"),
                                model_card={"job": job, "sweep": sweep_args}, budget=budget, **task_args,
                                **common)
    clean = CleanupOperator(task_id="cleanup", endpoint_name=_flat(deploy_args).get("endpoint_name"),
                            keep_endpoint=deployment.get("keep_endpoint", False), **common)
    train >> swept >> pick >> exported >> deploy >> clean
    return Lifecycle(checks, train, swept, pick, exported, deploy, clean)


def _templated(value: Any) -> bool:
    """Whether ``value`` is a template (rendered by the task), not a value to check when the DAG file is parsed."""
    return "{{" in json.dumps(value, default=str)


def _flat(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """A deployment description with its ``smoke`` and ``production`` objects' settings among its own keys."""
    objects = [deployment.get(group) for group in ("smoke", "production")]
    return {**{k: v for k, v in deployment.items() if k not in ("smoke", "production")},
            **{k: v for settings in objects if isinstance(settings, Mapping) for k, v in settings.items()}}


def _out(task: BaseOperator, key: str) -> Any:
    """One key of the task's returned dict, as an XComArg (the operators push each key as its own XCom)."""
    return task.output[key]  # type: ignore[index]


def _arguments(operator: type[BaseOperator]) -> tuple[str, ...]:
    """The keyword arguments ``operator`` takes itself (not BaseOperator's), less those the builder sets."""
    own = inspect.signature(operator.__init__).parameters
    return tuple(name for name, p in own.items() if p.kind is p.KEYWORD_ONLY and name not in OWN)


def _described(field: str, description: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(description, Mapping):
        raise check.fail(field, f"{description!r} is not an object", f"pass a dict of {', '.join(allowed)}")
    if unknown := sorted(set(description) - set(allowed)):
        raise check.fail(f"{field}.{unknown[0]}", "is not one of its arguments", f"use {', '.join(allowed)}")
    return dict(description)
