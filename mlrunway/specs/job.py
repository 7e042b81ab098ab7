"""The command job spec, named and shaped like ``azure.ai.ml.command``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from mlrunway import check
from mlrunway.compat import type_from_kind

__all__ = [
    "CommandJobSpec",
    "Distribution",
    "Input",
    "MpiDistribution",
    "Output",
    "PyTorchDistribution",
    "TensorFlowDistribution",
    "distribution_from_dict",
]

PLACEHOLDER = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_IO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The tag that says which of mlrunway's own jobs a job is ("export", "reference"): a backend runs such a job in the
# environment that role needs (Azure: the export environment, the deployment's scoring environment) unless the spec
# names one. A team's jobs have no such tag.
ROLE_TAG = "mlrunway.role"
Literal_ = str | int | float | bool


@dataclass(frozen=True, kw_only=True)
class Input:
    """A data input: a local path (local backend) or an ``azureml://`` / ``https://`` URI (Azure)."""

    path: str
    type: Literal["uri_folder", "uri_file"] = "uri_folder"

    def __post_init__(self) -> None:
        check.one_of("input.type", self.type, ("uri_folder", "uri_file"))
        if not isinstance(self.path, str) or not self.path:
            raise check.fail("input.path", f"{self.path!r} is empty", "pass a folder or file path")


@dataclass(frozen=True, kw_only=True)
class Output:
    """A named output folder the job writes into; ``${{outputs.<name>}}`` resolves to it."""

    type: Literal["uri_folder"] = "uri_folder"


@dataclass(frozen=True, kw_only=True)
class PyTorchDistribution:
    """One process per GPU (or per CPU slot) under torchrun; Azure sets the torch.distributed variables."""

    type: Literal["pytorch"] = "pytorch"
    process_count_per_instance: int = 1

    def __post_init__(self) -> None:
        check.positive_int("distribution.process_count_per_instance", self.process_count_per_instance)

    @property
    def processes_per_instance(self) -> int:
        return self.process_count_per_instance


@dataclass(frozen=True, kw_only=True)
class MpiDistribution:
    """MPI launch (Horovod, DeepSpeed); Azure runs mpirun with this many processes per node."""

    type: Literal["mpi"] = "mpi"
    process_count_per_instance: int = 1

    def __post_init__(self) -> None:
        check.positive_int("distribution.process_count_per_instance", self.process_count_per_instance)

    @property
    def processes_per_instance(self) -> int:
        return self.process_count_per_instance


@dataclass(frozen=True, kw_only=True)
class TensorFlowDistribution:
    """tf.distribute workers and parameter servers; each process gets its TF_CONFIG. ``worker_count`` None is
    the service's default: the job's instance count (:meth:`workers`)."""

    type: Literal["tensorflow"] = "tensorflow"
    worker_count: int | None = None
    parameter_server_count: int = 0

    def __post_init__(self) -> None:
        if self.worker_count is not None:
            check.positive_int("distribution.worker_count", self.worker_count)
        check.positive_int("distribution.parameter_server_count", self.parameter_server_count, minimum=0)

    def workers(self, instance_count: int) -> int:
        """The workers: as given, else one per instance (Azure ML's default, the spec's)."""
        return instance_count if self.worker_count is None else self.worker_count

    @property
    def processes_per_instance(self) -> int:
        return (self.worker_count or 1) + self.parameter_server_count


Distribution = PyTorchDistribution | MpiDistribution | TensorFlowDistribution
_DISTRIBUTIONS: dict[str, type] = {
    "pytorch": PyTorchDistribution,
    "mpi": MpiDistribution,
    "tensorflow": TensorFlowDistribution,
}
DISTRIBUTIONS: tuple[str, ...] = tuple(_DISTRIBUTIONS)  # the distributions' type names, as a form lists them


def distribution_from_dict(data: Mapping[str, Any] | None) -> Distribution | None:
    """Rebuild a distribution from ``to_dict`` output (``{"type": ..., ...}``)."""
    if data is None:
        return None
    fields = type_from_kind("distribution", data)
    name = check.one_of("distribution.type", fields.get("type"), tuple(_DISTRIBUTIONS))
    return _DISTRIBUTIONS[name](**fields)


def _literal_or_input(name: str, value: Any) -> Literal_ | Input:
    if isinstance(value, Mapping):
        value = Input(**value)
    if not isinstance(value, (str, int, float, bool, Input)):
        raise check.fail(
            f"inputs.{name}", f"{type(value).__name__} is not an input", "pass a str, int, float, bool or Input"
        )
    return value


JOB_TIERS = ("null", "spot", "basic", "standard", "premium")  # azure-ai-ml's JobTierNames, as its entities write them


def _queue_settings(value: Any) -> dict[str, str]:
    """``{"job_tier": <tier>}`` as azure-ai-ml's ``QueueSettings`` takes it, the tier in its entity's (lower) case."""
    if not isinstance(value, Mapping):
        raise check.fail("command_job.queue_settings", f"{value!r} is not an object", 'pass {"job_tier": "spot"}')
    if unknown := sorted(set(value) - {"job_tier"}):
        raise check.fail(f"command_job.queue_settings.{unknown[0]}", "is not a queue setting mlrunway passes",
                         'pass {"job_tier": "spot"} (basic, standard or premium)')
    tier = str(value.get("job_tier", "")).lower()
    if tier not in JOB_TIERS:
        raise check.fail("command_job.queue_settings.job_tier", f"{value.get('job_tier')!r} is not a job tier",
                         f"use one of {', '.join(JOB_TIERS[1:])}")
    return {"job_tier": tier}


@dataclass(frozen=True, kw_only=True)
class CommandJobSpec:
    """What to run: a code folder and a command line with ``${{inputs.x}}`` / ``${{outputs.y}}`` placeholders.

    :param code: folder snapshotted as the job's working directory.
    :param command: shell-free command line; placeholders are substituted per argument.
    :param inputs: literals (str, int, float, bool) or :class:`Input` paths.
    :param outputs: named output folders; the ``outputs`` folder in the working dir is always kept.
    :param environment_variables: extra variables for every process.
    :param distribution: pytorch, mpi or tensorflow; ``None`` runs one process.
    :param instance_count: nodes; the local backend has one.
    :param environment: Azure environment (curated name or ``name@latest``); ignored locally.
    :param compute: Azure compute target; ignored locally.
    :param timeout: seconds after which the job is canceled.
    :param tags: the job's tags (Azure ML's job tags; MLflow run tags locally).
    :param queue_settings: Azure ML's ``queue_settings`` of a serverless job: ``{"job_tier": "spot"}`` (or
        ``basic``, ``standard``, ``premium``), which its cost is priced by; ignored locally.
    """

    code: str
    command: str
    inputs: Mapping[str, Literal_ | Input] = field(default_factory=dict)
    outputs: Mapping[str, Output] = field(default_factory=dict)
    environment_variables: Mapping[str, str] = field(default_factory=dict)
    distribution: Distribution | None = None
    instance_count: int = 1
    experiment_name: str = "Default"
    display_name: str | None = None
    environment: str | None = None
    compute: str | None = None
    timeout: float | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    queue_settings: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not self.code:
            raise check.fail("command_job.code", "is empty", "pass the folder that holds the training script")
        if not isinstance(self.command, str) or not self.command.strip():
            raise check.fail("command_job.command", "is empty", "pass the command line, e.g. 'python train.py'")
        inputs = {name: _literal_or_input(name, value) for name, value in self.inputs.items()}
        outputs = {name: Output(**o) if isinstance(o, Mapping) else o for name, o in self.outputs.items()}
        for name in (*inputs, *outputs):
            if not _IO_NAME.match(name):
                raise check.fail(f"command_job.inputs/outputs.{name}", "is not an identifier", "use [A-Za-z_][A-Za-z0-9_]*")
        for section, name in PLACEHOLDER.findall(self.command):
            declared = inputs if section == "inputs" else outputs
            if name not in declared:
                raise check.fail(
                    "command_job.command",
                    f"${{{{{section}.{name}}}}} has no matching {section[:-1]}",
                    f"declare {section}={{'{name}': ...}} or remove the placeholder",
                )
        bad_env = [k for k, v in self.environment_variables.items() if not isinstance(v, str)]
        if bad_env:
            raise check.fail(f"command_job.environment_variables.{bad_env[0]}", "is not a string", "pass strings only")
        check.positive_int("command_job.instance_count", self.instance_count)
        check.job_name("command_job.experiment_name", self.experiment_name)
        check.optional_seconds("command_job.timeout", self.timeout)
        if self.queue_settings is not None:
            object.__setattr__(self, "queue_settings", MappingProxyType(_queue_settings(self.queue_settings)))
        object.__setattr__(self, "inputs", MappingProxyType(inputs))
        object.__setattr__(self, "outputs", MappingProxyType(outputs))
        object.__setattr__(self, "environment_variables", MappingProxyType(dict(self.environment_variables)))
        object.__setattr__(self, "tags", MappingProxyType({str(k): str(v) for k, v in self.tags.items()}))

    @property
    def process_count(self) -> int:
        """Processes across all instances."""
        per_instance = self.distribution.processes_per_instance if self.distribution else 1
        return per_instance * self.instance_count

    def with_data_interval(self, interval: tuple[str, str] | None) -> CommandJobSpec:
        """A copy whose processes get an Airflow run's data interval (ISO start and end) as the environment
        variables ``MLRUNWAY_DATA_INTERVAL_START`` and ``_END``: a backfill's run can train on its own interval's
        data, and a script that ignores them runs unchanged."""
        if interval is None:
            return self
        return replace(self, environment_variables={**self.environment_variables,
                                                    "MLRUNWAY_DATA_INTERVAL_START": interval[0],
                                                    "MLRUNWAY_DATA_INTERVAL_END": interval[1]})

    def with_inputs(self, **values: Literal_ | Input) -> CommandJobSpec:
        """Return a copy with inputs added or replaced (a sweep trial's hyperparameters)."""
        return replace(self, inputs={**self.inputs, **values})

    def to_dict(self) -> dict[str, Any]:
        def encode(value: Literal_ | Input) -> Any:
            return {"path": value.path, "type": value.type} if isinstance(value, Input) else value

        dist = self.distribution
        return {
            "code": self.code,
            "command": self.command,
            "inputs": {k: encode(v) for k, v in self.inputs.items()},
            "outputs": {k: {"type": v.type} for k, v in self.outputs.items()},
            "environment_variables": dict(self.environment_variables),
            "distribution": None if dist is None else dict(vars(dist)),
            "instance_count": self.instance_count,
            "experiment_name": self.experiment_name,
            "display_name": self.display_name,
            "environment": self.environment,
            "compute": self.compute,
            "timeout": self.timeout,
            "tags": dict(self.tags),
            "queue_settings": None if self.queue_settings is None else dict(self.queue_settings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommandJobSpec:
        data = dict(data)
        data["distribution"] = distribution_from_dict(data.get("distribution"))
        return cls(**data)
