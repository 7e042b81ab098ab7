"""A shadow that is compared: during a rollout's mirror window the endpoint keeps, for each mirrored request, the
champion's answer beside the challenger's (:class:`~mlrunway.backend.protocol.Shadow`), and this module says
how often they agree and how their latencies compare.

Two answers agree by the rollout's rule (:class:`ShadowRule`): the values under ``keys`` (any depth, in order;
``["label"]`` for a classifier whose answer also carries probabilities), or the whole answer when no key is
named; numbers agree within ``tolerance`` (absolute up to 1, relative beyond: ``|a - b| <= tolerance * max(1,
|a|)``, ``a`` the champion's), everything else must be equal. Only requests the champion answered (200) are
compared; a challenger that then fails (any other status) disagrees. Answers that are not JSON are compared as
text, and answers too large to keep (digests only) for equality.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mlrunway.backend.types import MirroredAnswer

EXAMPLES = 3  # disagreements quoted in the evidence
QUOTE = 200  # characters of each answer quoted


@dataclass(frozen=True)
class ShadowRule:
    keys: tuple[str, ...] = ()
    tolerance: float = 0.0

    def describe(self) -> str:
        what = f"the values of {', '.join(self.keys)}" if self.keys else "the whole answer"
        return f"{what}, numbers within {self.tolerance:g}" if self.tolerance else f"{what}, equal"


@dataclass(frozen=True)
class ShadowReport:
    """What the mirror window's pairs say. ``disagreement``: the share of compared requests that disagree (None
    when none was compared); latencies are the medians and p99s of the compared pairs, in ms."""

    mirrored: int
    compared: int
    agreed: int
    challenger_failed: int
    rule: str
    champion_p50_ms: float | None
    challenger_p50_ms: float | None
    champion_p99_ms: float | None
    challenger_p99_ms: float | None
    examples: tuple[dict[str, Any], ...] = ()

    @property
    def disagreement(self) -> float | None:
        return (self.compared - self.agreed) / self.compared if self.compared else None

    def summary(self) -> str:
        if not self.compared:
            return f"{self.mirrored} mirrored request(s), none the champion answered: nothing compared"
        return (f"the challenger agreed with the champion on {self.agreed} of {self.compared} mirrored requests "
                f"({1 - (self.disagreement or 0):.1%}; {self.rule}; {self.challenger_failed} failed), p50 "
                f"{ms(self.challenger_p50_ms)} against the champion's {ms(self.champion_p50_ms)}")

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "examples"}, "examples": list(self.examples),
                "disagreement": None if self.disagreement is None else round(self.disagreement, 6)}


def compare(pairs: Sequence[MirroredAnswer], rule: ShadowRule) -> ShadowReport:
    """Compare each pair the champion answered (200) by ``rule``; the first disagreements are quoted."""
    compared = agreed = failed = 0
    examples: list[dict[str, Any]] = []
    champion_ms: list[float] = []
    challenger_ms: list[float] = []
    for pair in pairs:
        if pair.champion_status != 200:
            continue  # the client's own bad request, or the champion's failure: no answer to compare with
        compared += 1
        champion_ms.append(pair.champion_ms)
        challenger_ms.append(pair.shadow_ms)
        if pair.shadow_status != 200:
            failed += 1
            same = False
        else:
            same = agree(pair, rule)
        agreed += same
        if not same and len(examples) < EXAMPLES:
            examples.append({"champion": (pair.champion_answer or pair.champion_digest)[:QUOTE],
                             "challenger": (pair.shadow_answer or pair.shadow_digest)[:QUOTE],
                             "challenger_status": pair.shadow_status})
    return ShadowReport(mirrored=len(pairs), compared=compared, agreed=agreed, challenger_failed=failed,
                        rule=rule.describe(), champion_p50_ms=_quantile(champion_ms, 0.5),
                        challenger_p50_ms=_quantile(challenger_ms, 0.5),
                        champion_p99_ms=_quantile(champion_ms, 0.99), challenger_p99_ms=_quantile(challenger_ms, 0.99),
                        examples=tuple(examples))


def agree(pair: MirroredAnswer, rule: ShadowRule) -> bool:
    """Whether the two answers of a pair agree by ``rule`` (both 200)."""
    if pair.champion_answer is None or pair.shadow_answer is None:  # kept as digests: equal or not
        return bool(pair.champion_digest) and pair.champion_digest == pair.shadow_digest
    try:
        champion, challenger = json.loads(pair.champion_answer), json.loads(pair.shadow_answer)
    except ValueError:
        return pair.champion_answer == pair.shadow_answer
    if rule.keys:
        wanted = set(rule.keys)
        found = list(_values(champion, wanted)), list(_values(challenger, wanted))
        if not found[0] and not found[1]:  # neither answer has the keys: the rule cannot say they agree
            return False
        return len(found[0]) == len(found[1]) and all(
            k == j and _same(a, b, rule.tolerance) for (k, a), (j, b) in zip(*found, strict=True))
    return _same(champion, challenger, rule.tolerance)


def _values(document: Any, keys: set[str]) -> Iterator[tuple[str, Any]]:
    """(key, value) for each of ``keys`` anywhere in the document, in document order (not below a match)."""
    if isinstance(document, dict):
        for key, value in document.items():
            if key in keys:
                yield key, value
            else:
                yield from _values(value, keys)
    elif isinstance(document, list):
        for item in document:
            yield from _values(item, keys)


def _same(a: Any, b: Any, tolerance: float) -> bool:
    if _number(a) and _number(b):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return bool(a == b or abs(a - b) <= tolerance * max(1.0, abs(a)))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tolerance) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, tolerance) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 3)


def ms(value: float | None) -> str:
    """A latency as the evidence says it: ``12.3 ms``, or ``n/a`` where there was none."""
    return "n/a" if value is None else f"{value:.1f} ms"
