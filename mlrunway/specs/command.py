"""What a command job runs, read from its spec alone, the same on every backend: its command line with
``${{inputs.x}}`` / ``${{outputs.y}}`` substituted (split as a shell would, run without one), and how many processes
of its code a distribution runs at once.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from re import Match

from mlrunway.specs.job import PLACEHOLDER, CommandJobSpec, Input, MpiDistribution, PyTorchDistribution

__all__ = ["process_count", "resolve_command"]

_PYTHONS = {"python", "python3", f"python3.{sys.version_info.minor}"}


def resolve_command(command: str, inputs: Mapping[str, object], outputs: Mapping[str, Path | str], *,
                    python: str | None = sys.executable) -> list[str]:
    """Split the command line and substitute ``${{inputs.x}}`` / ``${{outputs.y}}`` in each argument; a leading
    ``python`` runs under ``python`` (default: this interpreter, so a local job uses the backend's environment;
    None: left as written, for a job whose node has its own)."""

    def value(match: Match[str]) -> str:
        section, name = match.groups()
        if section == "outputs":
            return str(outputs[name])
        item = inputs[name]
        return item.path if isinstance(item, Input) else str(item)

    argv = [PLACEHOLDER.sub(value, token) for token in shlex.split(command)]
    if argv and argv[0] in _PYTHONS and python is not None:
        argv[0] = python
    return argv


def process_count(spec: CommandJobSpec) -> int:
    """How many processes of the job's own code its distribution runs at once (its launcher left out): what its
    cost counts in core-hours (:mod:`mlrunway.ledger.cost`)."""
    dist = spec.distribution
    if dist is None:
        return 1
    if isinstance(dist, (PyTorchDistribution, MpiDistribution)):
        return dist.process_count_per_instance
    return dist.workers(spec.instance_count) + dist.parameter_server_count
