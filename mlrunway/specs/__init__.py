"""Frozen, validated specs named like azure-ai-ml's entities; the early-termination policies are
``mlrunway.early_termination``'s, found here too.

Each name is imported when first used (PEP 562): a local job's supervisor imports ``mlrunway.specs.job`` alone (a
distributed job's launch plan), not the sweep's declarations and pydantic (about 200 ms of its start)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlrunway.early_termination.bandit import BanditPolicy
    from mlrunway.early_termination.median import MedianStoppingPolicy
    from mlrunway.early_termination.truncation import TruncationSelectionPolicy
    from mlrunway.specs.job import (
        CommandJobSpec,
        Input,
        MpiDistribution,
        Output,
        PyTorchDistribution,
        TensorFlowDistribution,
    )
    from mlrunway.specs.search_space import (
        Choice,
        LogNormal,
        LogUniform,
        Normal,
        QLogNormal,
        QLogUniform,
        QNormal,
        QUniform,
        Randint,
        Uniform,
    )
    from mlrunway.specs.sweep import Objective, SamplingAlgorithm, SweepLimits, SweepSpec

__all__ = [
    "BanditPolicy",
    "Choice",
    "CommandJobSpec",
    "Input",
    "LogNormal",
    "LogUniform",
    "MedianStoppingPolicy",
    "MpiDistribution",
    "Normal",
    "Objective",
    "Output",
    "PyTorchDistribution",
    "QLogNormal",
    "QLogUniform",
    "QNormal",
    "QUniform",
    "Randint",
    "SamplingAlgorithm",
    "SweepLimits",
    "SweepSpec",
    "TensorFlowDistribution",
    "TruncationSelectionPolicy",
    "Uniform",
]

_HOME = {"BanditPolicy": "mlrunway.early_termination.bandit", "MedianStoppingPolicy": "mlrunway.early_termination.median",
         "TruncationSelectionPolicy": "mlrunway.early_termination.truncation",
         **dict.fromkeys(("CommandJobSpec", "Input", "MpiDistribution", "Output", "PyTorchDistribution",
                          "TensorFlowDistribution"), "mlrunway.specs.job"),
         **dict.fromkeys(("Objective", "SamplingAlgorithm", "SweepLimits", "SweepSpec"), "mlrunway.specs.sweep")}


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(_HOME.get(name, "mlrunway.specs.search_space")), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
