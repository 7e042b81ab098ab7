"""The parity gate: ONNX Runtime against PyTorch on the same inputs, with the figures that decide it."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ParityError, SpecError

# The parity rule, numpy's ``isclose``: |candidate - reference| <= ATOL + RTOL * |reference|, on every output. The
# relative part scales with the outputs (float32 rounding grows with them); the absolute part covers outputs
# near zero. Chosen by measurement (issue 32): honest exports used at most 36% of this tolerance at output
# scales from 1e-2 to 1e5 (the worst: outputs spread around zero, where rounding is relative to the layer's
# scale, not the output's), 8-10% on the digits classifier; a last-layer bias drifted by 1% used 1.4 to 9,000
# times it. ATOL 1e-4 let that drift through at outputs near 1e-2; RTOL 1e-5 failed honest exports from 1e3 up.
ATOL = 1e-5
RTOL = 1e-4


def check_tolerance(atol: Any, rtol: Any) -> None:
    """``atol`` and ``rtol`` are finite numbers, at least 0 and not both 0: a SpecError naming the field
    otherwise (a templated value that rendered to text, a negative one that nothing could pass)."""
    for field, value in (("atol", atol), ("rtol", rtol)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
            raise SpecError(f"onnx parity {field}: {value!r} is not a number >= 0; pass e.g. {field}="
                            f"{ATOL if field == 'atol' else RTOL:g}")
    if atol == 0 and rtol == 0:
        raise SpecError("onnx parity atol, rtol: both 0 asks for bit-equal outputs, which float32 rounding "
                        f"breaks; pass e.g. atol={ATOL:g}, rtol={RTOL:g}")


def _differences(reference: Any, candidate: Any) -> Any:
    """|candidate - reference| elementwise (float64), 0 where both hold the same value (NaN beside NaN, an
    infinity beside the same infinity) and ``inf`` where a NaN or infinity faces a different value."""
    import numpy as np

    reference, candidate = np.asarray(reference, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(candidate - reference)
    same = (candidate == reference) | (np.isnan(candidate) & np.isnan(reference))
    return np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff))


def tolerance_used(reference: Any, candidate: Any, atol: float = ATOL, rtol: float = RTOL) -> float:
    """The largest share of the tolerance any output uses: max |candidate - reference| / (atol + rtol *
    |reference|), elementwise over arrays of the same shape; within the rule when at most 1. A NaN or infinity
    where the other side has a different value uses it all (``inf``)."""
    import numpy as np

    diff = _differences(reference, candidate)
    if diff.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        used = diff / (atol + rtol * np.abs(np.asarray(reference, dtype=np.float64)))
    used = np.where(diff == 0, 0.0, np.where(np.isnan(used), np.inf, used))
    return float(used.max())


def _share(used: float) -> str:
    """A tolerance share as people read it: "4% of the tolerance", "250% ...", "3.1e+04 times the tolerance"."""
    if math.isinf(used) or math.isnan(used):
        return "a NaN or infinity against a different value, beyond any tolerance"
    percent = used * 100
    if percent < 10:
        return f"{percent:.1g}% of the tolerance"
    return f"{percent:.0f}% of the tolerance" if percent < 1000 else f"{used:.2g} times the tolerance"


@dataclass(frozen=True)
class ParityReport:
    """How far the exported model is from its source on ``samples`` inputs; ``top1_agreement`` is measured for
    classifiers only (None for a model whose outputs are not class scores). ``max_abs_diff`` is None when there
    was no source to compare with (a team's own ``model.onnx`` with no ``.pt2`` beside it): the model was only
    checked and run, and ``inputs`` says so.

    ``tolerance_used`` is the worst output's share of ``atol + rtol * |torch|``; the gate passes when it is at
    most 1. A report recorded before the relative part existed has neither ``rtol`` nor ``tolerance_used``: it
    was judged by max |onnx - torch| <= atol, so it reads as ``rtol`` 0 and ``max_abs_diff / atol``."""

    max_abs_diff: float | None
    top1_agreement: float | None
    samples: int
    inputs: str
    atol: float
    min_top1_agreement: float
    rtol: float = 0.0
    tolerance_used: float | None = None
    # Each output's own figures, by name in the ONNX model's order ({"name", "max_abs_diff", "tolerance_used"}), and
    # the output top-1 agreement was measured on; a report recorded before them has neither (one figure for all).
    outputs: tuple[dict[str, Any], ...] | None = None
    top1_output: str | None = None

    def __post_init__(self) -> None:
        if self.tolerance_used is None and self.max_abs_diff is not None:
            if self.rtol:
                raise ValueError(f"ParityReport tolerance_used: missing with rtol={self.rtol:g}; compute it with "
                                 "tolerance_used(reference, candidate, atol, rtol)")
            object.__setattr__(self, "tolerance_used", tolerance_used(0.0, self.max_abs_diff, self.atol, 0.0))

    @classmethod
    def from_dict(cls, figures: dict[str, Any]) -> ParityReport:
        """The report ``to_dict`` wrote, by this version or one before ``rtol`` or per-output figures (``passed`` is
        recomputed)."""
        kept = {k: v for k, v in figures.items() if k != "passed"}
        if kept.get("outputs") is not None:
            kept["outputs"] = tuple(dict(output) for output in kept["outputs"])
        return cls(**kept)

    @property
    def worst_output(self) -> dict[str, Any] | None:
        """The output that used the most of its tolerance, where there are several and each was measured."""
        measured = [o for o in self.outputs or () if o.get("tolerance_used") is not None]
        return max(measured, key=lambda o: float(o["tolerance_used"])) if len(measured) > 1 else None

    @property
    def rule(self) -> str:
        """The tolerance in words: "1e-05 + 0.0001·|torch|", or "0.0001" for a purely absolute one."""
        return f"{self.atol:g} + {self.rtol:g}·|torch|" if self.rtol else f"{self.atol:g}"

    @property
    def passed(self) -> bool:
        within = self.tolerance_used is None or self.tolerance_used <= 1
        return within and (self.top1_agreement is None or self.top1_agreement >= self.min_top1_agreement)

    def summary(self) -> str:
        on = f" on {self.top1_output}" if self.top1_output and len(self.outputs or ()) > 1 else ""
        top1 = "" if self.top1_agreement is None else \
            f", top-1 agreement{on} {self.top1_agreement:.2%} (required {self.min_top1_agreement:.2%})"
        if self.max_abs_diff is None or self.tolerance_used is None:
            return f"no PyTorch model to compare with: ran on {self.samples} {self.inputs}"
        worst = self.worst_output
        per = "" if worst is None else f" ({len(self.outputs or ())} outputs; the most: {worst['name']})"
        return (f"max |onnx - torch| {self.max_abs_diff:.3g}, {_share(self.tolerance_used)} ({self.rule}){per}{top1} "
                f"on {self.samples} {self.inputs}")

    def to_dict(self) -> dict[str, Any]:
        figures = {**vars(self), "passed": self.passed}
        figures["outputs"] = None if self.outputs is None else [dict(o) for o in self.outputs]
        return figures


def per_output(parity: dict[str, Any]) -> list[tuple[str, str]]:
    """Each output's name and figures in words (``("logits", "4% of the tolerance, max |onnx - torch| 3e-06")``),
    from a recorded report with several (since issue 83); none for a report of one output, or one recorded before
    (one figure for all outputs), or figures that are not numbers."""
    outputs = parity.get("outputs")
    if not isinstance(outputs, list) or len(outputs) < 2:
        return []
    return [(o["name"], f"{_share(float(o['tolerance_used']))}, max |onnx - torch| {o['max_abs_diff']:.3g}")
            for o in outputs if isinstance(o, dict) and isinstance(o.get("name"), str)
            and all(isinstance(o.get(k), int | float) and not isinstance(o.get(k), bool)
                    for k in ("tolerance_used", "max_abs_diff"))]


def outputs_of(result: Any) -> list[Any]:
    """A model's outputs as a list of arrays: one tensor or array, or a tuple or list of them (ONNX Runtime's, in
    the model's output order; a torch module's structured outputs are flattened by the export first)."""
    import numpy as np

    items = list(result) if isinstance(result, (tuple, list)) else [result]
    return [np.asarray(item.numpy() if hasattr(item, "numpy") else item) for item in items]


def rows(inputs: Any) -> int:
    """How many samples ``inputs`` holds: an array's length, or the first array's of a dict by input name."""
    return len(next(iter(inputs.values()))) if isinstance(inputs, dict) else len(inputs)


def _chunk(inputs: Any, start: int, stop: int) -> Any:
    if isinstance(inputs, dict):
        return {name: array[start:stop] for name, array in inputs.items()}
    return inputs[start:stop]


def compare(reference: Callable[[Any], Any], candidate: Callable[[Any], Any], inputs: Any, *, source: str,
            atol: float = ATOL, rtol: float = RTOL, min_top1_agreement: float, batch: int = 64,
            classifier: bool = True, names: list[str] | None = None, top1_output: str | None = None) -> ParityReport:
    """Run both models on ``inputs`` (an array, batch first, or a dict of them by input name, as each model takes
    them) in batches and report; raise ParityError when it fails: an output outside ``atol + rtol * |reference|``
    (numpy's ``isclose``), or, for a ``classifier``, a top-1 agreement below ``min_top1_agreement`` on the output
    ``top1_output`` names (default: the first). Each model gives its outputs as a list in one order, ``names``
    (default: ``logits`` for one, else their positions); each output is compared, and reported, by its name."""
    import numpy as np

    check_tolerance(atol, rtol)
    worst: list[float] = []
    used: list[float] = []
    labels: list[str] = []
    agree, total, top1 = 0, rows(inputs), 0
    for start in range(0, total, batch):
        chunk = _chunk(inputs, start, start + batch)
        expected, got = outputs_of(reference(chunk)), outputs_of(candidate(chunk))
        if len(expected) != len(got):
            raise ParityError(f"onnx parity: {len(got)} outputs, and PyTorch gives {len(expected)}")
        if not worst:
            labels = names or (["logits"] if len(got) == 1 else [str(k) for k in range(len(got))])
            if len(labels) != len(got):
                raise ParityError(f"onnx parity: {len(got)} outputs, and {len(labels)} names ({', '.join(labels)})")
            if top1_output is not None and top1_output not in labels:
                raise SpecError(f"signature.json classifier_output: {top1_output!r} is not one of the model's "
                                f"outputs ({', '.join(labels)}); name the output that holds the class scores")
            top1 = labels.index(top1_output) if top1_output is not None else 0
            worst, used = [0.0] * len(got), [0.0] * len(got)
        for k, (name, want, have) in enumerate(zip(labels, expected, got, strict=True)):
            if want.shape != have.shape:
                raise ParityError(f"onnx parity: output {name} has shape {have.shape}, and PyTorch's {want.shape}")
            if have.dtype.kind not in "fcbiu":
                raise ParityError(f"onnx parity: output {name} is {have.dtype}, not numbers to compare")
            worst[k] = max(worst[k], float(np.max(_differences(want, have), initial=0.0)))
            used[k] = max(used[k], tolerance_used(want, have, atol, rtol))
        if classifier:
            agree += int(np.sum(expected[top1].argmax(1) == got[top1].argmax(1)))
    report = ParityReport(max_abs_diff=max(worst, default=0.0), top1_agreement=agree / total if classifier else None,
                          samples=total, inputs=source, atol=atol, min_top1_agreement=min_top1_agreement,
                          rtol=rtol, tolerance_used=max(used, default=0.0),
                          outputs=tuple({"name": n, "max_abs_diff": w, "tolerance_used": u}
                                        for n, w, u in zip(labels, worst, used, strict=True)),
                          top1_output=labels[top1] if classifier and labels else None)
    if not report.passed:
        raise ParityError(f"onnx parity gate failed: {report.summary()}; the ONNX model was not registered")
    return report
