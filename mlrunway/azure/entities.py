"""Our specs as azure-ai-ml entities: ``command(...)``, ``job(**space).sweep(...)``, distributions, policies.

Pure translation, offline: nothing here talks to Azure. The tests pass every entity through the SDK's own REST
serializer (``_to_rest_object``) and check the result field by field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from azure.ai.ml import Input, Output, command
from azure.ai.ml import MpiDistribution as AzMpi
from azure.ai.ml import PyTorchDistribution as AzPyTorch
from azure.ai.ml import TensorFlowDistribution as AzTensorFlow
from azure.ai.ml import sweep as azsweep
from azure.ai.ml.entities import Command, QueueSettings
from azure.ai.ml.entities._builders.sweep import Sweep
from azure.ai.ml.entities._job.sweep.sampling_algorithm import RandomSamplingAlgorithm

from mlrunway import check
from mlrunway.early_termination import EarlyTerminationPolicy
from mlrunway.early_termination.bandit import BanditPolicy
from mlrunway.early_termination.median import MedianStoppingPolicy
from mlrunway.early_termination.truncation import TruncationSelectionPolicy
from mlrunway.specs import search_space as space
from mlrunway.specs.job import CommandJobSpec, Distribution, MpiDistribution, PyTorchDistribution
from mlrunway.specs.job import Input as OurInput
from mlrunway.specs.sweep import SweepSpec

# The tutorial's curated environment (Azure ML's "Train PyTorch models at scale", SDK v2).
DEFAULT_ENVIRONMENT = "AzureML-acpt-pytorch-2.8-cuda12.6@latest"


def distribution(dist: Distribution | None, instance_count: int = 1) -> Any:
    """azure-ai-ml's distribution; a TensorFlow one without ``worker_count`` has one worker per instance, as the
    service's own default (it was sent as 1)."""
    if dist is None:
        return None
    if isinstance(dist, PyTorchDistribution):
        return AzPyTorch(process_count_per_instance=dist.process_count_per_instance)
    if isinstance(dist, MpiDistribution):
        return AzMpi(process_count_per_instance=dist.process_count_per_instance)
    return AzTensorFlow(worker_count=dist.workers(instance_count), parameter_server_count=dist.parameter_server_count)


def _input(value: Any) -> Any:
    if isinstance(value, OurInput):
        return Input(type=value.type, path=value.path)
    return value


def command_job(spec: CommandJobSpec, *, name: str | None = None, compute: str | None = None,
                environment: Any = None, instance_type: str | None = None) -> Command:
    """``azure.ai.ml.command`` for the spec; ``./outputs`` is captured by Azure as the job's artifacts.

    The environment is the spec's, else ``environment`` (a name or an ``Environment``: the backend passes the
    connection's, or one pinned to the project's torch), else the tutorial's curated PyTorch one. No compute
    (the spec's or ``compute``) is serverless: Azure ML provisions ``instance_type`` (or its default) per job.
    """
    target = compute or spec.compute
    return command(
        name=name,
        code=str(Path(spec.code)),
        command=spec.command,
        inputs={k: _input(v) for k, v in spec.inputs.items()},
        outputs={k: Output(type=o.type) for k, o in spec.outputs.items()},
        environment=spec.environment or environment or DEFAULT_ENVIRONMENT,
        environment_variables=dict(spec.environment_variables),
        compute=target,
        instance_type=None if target else instance_type,
        distribution=distribution(spec.distribution, spec.instance_count),
        instance_count=spec.instance_count,
        experiment_name=spec.experiment_name,
        display_name=spec.display_name or name,
        tags=dict(spec.tags),
        timeout=int(spec.timeout) if spec.timeout else None,
        queue_settings=queue_settings(spec, target),
    )


def queue_settings(spec: CommandJobSpec, compute: str | None) -> QueueSettings | None:
    """The job's queue settings on serverless compute (a cluster's own priority decides there; AzureJobs.validate
    refuses queue_settings with a cluster before any job)."""
    tier = (spec.queue_settings or {}).get("job_tier")
    return QueueSettings(job_tier=tier) if tier and tier != "null" and compute is None else None


def expression(expr: space.SearchExpression) -> Any:
    """Our search expression as the same-named ``azure.ai.ml.sweep`` class (Azure's semantics are ours)."""
    if isinstance(expr, space.Choice):
        return azsweep.Choice(values=list(expr.values))
    if isinstance(expr, space.Randint):
        return azsweep.Randint(upper=expr.upper)
    if isinstance(expr, (space.Normal, space.LogNormal)):
        normal: type[azsweep.Normal] = azsweep.Normal if isinstance(expr, space.Normal) else azsweep.LogNormal
        return normal(mu=expr.mu, sigma=expr.sigma)
    if isinstance(expr, (space.QNormal, space.QLogNormal)):
        qnormal: type[azsweep.QNormal] = azsweep.QNormal if isinstance(expr, space.QNormal) else azsweep.QLogNormal
        return qnormal(mu=expr.mu, sigma=expr.sigma, q=expr.q)  # type: ignore[arg-type]
    if isinstance(expr, (space.QUniform, space.QLogUniform)):
        quantized: type[azsweep.QUniform] = azsweep.QUniform if isinstance(expr, space.QUniform) else azsweep.QLogUniform
        # The SDK annotates q as int; the REST spec and the service take any positive number.
        return quantized(min_value=expr.min_value, max_value=expr.max_value, q=expr.q)  # type: ignore[arg-type]
    uniform: type[azsweep.Uniform] = azsweep.Uniform if isinstance(expr, space.Uniform) else azsweep.LogUniform
    return uniform(min_value=expr.min_value, max_value=expr.max_value)


def policy(p: EarlyTerminationPolicy | None) -> Any:
    """Our policy with ``evaluation_interval`` always explicit (the SDK defaults it to 0, the YAML to 1)."""
    if p is None:
        return None
    common = {"evaluation_interval": p.evaluation_interval, "delay_evaluation": p.delay_evaluation}
    if isinstance(p, BanditPolicy):
        slack = {"slack_factor": p.slack_factor} if p.slack_factor is not None else {"slack_amount": p.slack_amount}
        return azsweep.BanditPolicy(**common, **slack)
    if isinstance(p, MedianStoppingPolicy):
        return azsweep.MedianStoppingPolicy(**common)
    if isinstance(p, TruncationSelectionPolicy):
        return azsweep.TruncationSelectionPolicy(**common, truncation_percentage=p.truncation_percentage)
    raise check.fail("early_termination.type", f"{p.type!r} is not an early-termination policy of azure-ai-ml, "
                     "which has bandit, median_stopping and truncation_selection",
                     "use one of those, or run this sweep on the local backend")


def _logbase(base: float | str | None) -> str | None:
    """The spec types ``logbase`` as a string ("e" or a positive number): a number is sent as its text (10 -> "10")."""
    return None if base is None else base if isinstance(base, str) else f"{base:g}"


def sweep_job(spec: SweepSpec, *, name: str | None = None, compute: str | None = None,
              environment: Any = None, instance_type: str | None = None) -> Sweep:
    """``command(...)(**search_space).sweep(...)`` with limits; experiment_name set again (``job(...)`` drops it)."""
    trial = command_job(spec.trial, compute=compute, environment=environment, instance_type=instance_type)
    sampling: Any = spec.sampling.type
    if sampling == "random":  # the rule and logbase as given; Azure samples
        sampling = RandomSamplingAlgorithm(seed=spec.seed, rule=spec.sampling.rule, logbase=_logbase(spec.sampling.logbase))
    job: Sweep = trial(**{k: expression(v) for k, v in spec.search_space.items()}).sweep(
        compute=compute or spec.trial.compute,
        sampling_algorithm=sampling,
        primary_metric=spec.objective.primary_metric,
        goal=spec.objective.goal.capitalize(),
        early_termination_policy=policy(spec.early_termination),
        queue_settings=queue_settings(spec.trial, compute or spec.trial.compute),
    )
    limits = spec.limits
    job.set_limits(max_total_trials=limits.max_total_trials, max_concurrent_trials=limits.max_concurrent_trials,
                   timeout=int(limits.timeout) if limits.timeout else None,
                   trial_timeout=int(limits.trial_timeout) if limits.trial_timeout else None)
    job.name = name
    job.experiment_name = spec.trial.experiment_name
    job.display_name = name
    return job
