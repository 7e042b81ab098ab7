"""The parity gate: ONNX Runtime against PyTorch on the same inputs, with the figures that decide it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlrunway.errors import ParityError

# The parity rule, numpy's ``isclose``: |candidate - reference| <= ATOL + RTOL * |reference|, on every output. The
# relative part scales with the outputs (float32 rounding grows with them); the absolute part covers outputs
# near zero.
ATOL = 1e-4
RTOL = 1e-4


def tolerance_used(reference: Any, candidate: Any, atol: float = ATOL, rtol: float = RTOL) -> float:
    """The largest share of the tolerance any output uses: max |candidate - reference| / (atol + rtol *
    |reference|), elementwise over arrays of the same shape; within the rule when at most 1. A NaN or infinity
    where the other side has a different value uses it all (``inf``)."""
    import numpy as np

    reference, candidate = np.asarray(reference, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    if reference.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        used = np.abs(candidate - reference) / (atol + rtol * np.abs(reference))
    same = (candidate == reference) | (np.isnan(candidate) & np.isnan(reference))
    used = np.where(same, 0.0, np.where(np.isfinite(used), used, np.inf))
    return float(used.max())


@dataclass(frozen=True)
class ParityReport:
    """How far the exported model is from its source on ``samples`` inputs; ``top1_agreement`` is measured for
    classifiers only (None for a model whose outputs are not class scores). ``max_abs_diff`` is None when there
    was no source to compare with (a team's own ``model.onnx`` with no ``.pt2`` beside it): the model was only
    checked and run, and ``inputs`` says so."""

    max_abs_diff: float | None
    top1_agreement: float | None
    samples: int
    inputs: str
    atol: float
    min_top1_agreement: float

    @property
    def passed(self) -> bool:
        within = self.max_abs_diff is None or self.max_abs_diff <= self.atol
        return within and (self.top1_agreement is None or self.top1_agreement >= self.min_top1_agreement)

    def summary(self) -> str:
        top1 = "" if self.top1_agreement is None else \
            f", top-1 agreement {self.top1_agreement:.2%} (required {self.min_top1_agreement:.2%})"
        if self.max_abs_diff is None:
            return f"no PyTorch model to compare with: ran on {self.samples} {self.inputs}"
        return f"max |onnx - torch| {self.max_abs_diff:.3g} (tolerance {self.atol:g}){top1} on {self.samples} {self.inputs}"

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "passed": self.passed}


def compare(reference: Callable[[Any], Any], candidate: Callable[[Any], Any], inputs: Any, *, source: str,
            atol: float, min_top1_agreement: float, batch: int = 64, classifier: bool = True) -> ParityReport:
    """Run both models on ``inputs`` (N, ...) float32 in batches and report; raise ParityError when it fails.
    Top-1 agreement counts only for a ``classifier``."""
    import numpy as np

    worst, agree = 0.0, 0
    for start in range(0, len(inputs), batch):
        chunk = inputs[start:start + batch]
        expected, got = np.asarray(reference(chunk)), np.asarray(candidate(chunk))
        if expected.shape != got.shape:
            raise ParityError(f"onnx parity: output shape {got.shape} differs from PyTorch's {expected.shape}")
        worst = max(worst, float(np.max(np.abs(expected - got))))
        agree += int(np.sum(expected.argmax(1) == got.argmax(1)))
    report = ParityReport(max_abs_diff=worst, top1_agreement=agree / len(inputs) if classifier else None,
                          samples=len(inputs), inputs=source,
                          atol=atol, min_top1_agreement=min_top1_agreement)
    if not report.passed:
        raise ParityError(f"onnx parity gate failed: {report.summary()}; the ONNX model was not registered")
    return report
