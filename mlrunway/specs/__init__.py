"""Frozen, validated specs named like azure-ai-ml's entities; the early-termination policies are
``mlrunway.early_termination``'s, found here too."""

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
