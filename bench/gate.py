"""The champion/challenger gate's error rates, by simulation: how often it promotes a challenger that is equal or
worse (false promotions) and how often one that is clearly better (power), through the gate's own code
(``gate.mcnemar`` and ``gate.decide`` with the default settings: 95% one-sided, min_improvement 0, min_samples
100).

    .venv/bin/python bench/gate.py [--gates 4000] [--repeats 5]

Each simulated gate draws ``n`` items, each one of: only the challenger right (probability ``(d + e) / 2``), only
the champion right (``(d - e) / 2``), both right (the rest of the champion's accuracy ``a``), both wrong; ``d`` is
the discordance rate (the share of items the two models disagree on) and ``e`` the challenger's true improvement
in accuracy. Cases: the example's evaluation set (its 360 test images, ``a`` = 0.90) and the earlier split (180),
discordance 5% and 10%, effects -2, 0, +3 and +5 points; and a team's larger set (1,000). Each repeat is a fresh
seed of ``--gates`` gates per case; a case's figure per repeat is its promotion rate and the Clopper-Pearson 95%
bound of it (upper for e <= 0, lower for e > 0). Targets (on the example's set, d = 10%): false promotions' upper
bound <= 5% at e = 0 and e = -2 points, promotions >= 80% at +5 points (the effect the README names). Recorded in
bench/results/gate.json. About a minute.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import Bench, Target, harness_args, interleaved, table
from scipy import stats

from mlrunway.deploy import gate
from mlrunway.deploy.gate import GateSettings

ACCURACY = 0.90
CASES = [(n, d, e) for n in (360, 180) for d in (0.05, 0.10) for e in (-0.02, 0.0, 0.03, 0.05)] + \
    [(1000, 0.10, e) for e in (0.0, 0.02, 0.03)]
NAMED = (360, 0.10, 0.05)  # the README's effect: +5 points where 10% of the images are told apart


def run_case(n: int, d: float, e: float, gates: int, seed: int) -> int:
    """How many of ``gates`` simulated gates promote."""
    rng = np.random.default_rng(seed)
    p = [(d + e) / 2, (d - e) / 2, ACCURACY - (d - e) / 2]  # challenger only, champion only, both right
    kinds = rng.choice(4, size=(gates, n), p=[*p, 1 - sum(p)])
    settings, promoted = GateSettings(), 0
    for kind in kinds:
        champion, challenger = ((kind == 1) | (kind == 2)).tolist(), ((kind == 0) | (kind == 2)).tolist()
        promoted += gate.decide(gate.mcnemar(champion, challenger, settings.confidence), settings)[0]
    return promoted


def bound(promoted: int, gates: int, upper: bool) -> float:
    """The one-sided 95% Clopper-Pearson bound of a promotion rate."""
    interval = stats.binomtest(promoted, gates).proportion_ci(confidence_level=0.90, method="exact")
    return float(interval.high if upper else interval.low)


def label(n: int, d: float, e: float) -> str:
    return f"n={n} d={d:.0%} e={e * 100:+.0f} pts"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gates", type=int, default=4000, help="simulated gates per case and repeat")
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    bench = Bench("gate", args)
    totals: dict[tuple[int, float, float], list[int]] = {case: [0, 0] for case in CASES}
    started = time.perf_counter()
    for repeat, order in interleaved(CASES, args.repeats):
        for n, d, e in order:
            promoted = run_case(n, d, e, args.gates, seed=repeat * 1000 + CASES.index((n, d, e)))
            totals[(n, d, e)][0] += promoted
            totals[(n, d, e)][1] += args.gates
            bench.add(f"{label(n, d, e)}: promoted", promoted / args.gates, "share")
            kind = "upper" if e <= 0 else "lower"
            bench.add(f"{label(n, d, e)}: {kind} bound", bound(promoted, args.gates, e <= 0), "share")
        print(f"repeat {repeat + 1} of {args.repeats}: {time.perf_counter() - started:.0f} s", flush=True)
    rows = [{"case": label(*case), "n": case[0], "discordance": case[1], "effect": case[2],
             "gates": gates, "promoted": promoted, "rate": round(promoted / gates, 4),
             "bound": round(bound(promoted, gates, case[2] <= 0), 4), "bound_is": "upper" if case[2] <= 0 else "lower"}
            for case, (promoted, gates) in totals.items()]
    print(table(rows, [("case", "case (all repeats)"), ("gates", "gates"), ("rate", "promoted"),
                       ("bound", "95% CP bound"), ("bound_is", "bound")]))
    named = label(*NAMED)
    bench.record(rows, ("numpy", "scipy"), [
        Target(f"{label(360, 0.10, 0.0)}: upper bound", "<=", 0.05,
               "false promotions, equal challenger (example's set, d=10%): 95% upper bound"),
        Target(f"{label(360, 0.10, -0.02)}: upper bound", "<=", 0.05,
               "false promotions, worse challenger (-2 points): 95% upper bound"),
        Target(f"{named}: promoted", ">=", 0.80, "promotions at the named effect (+5 points, d=10%, n=360)"),
    ], accuracy=ACCURACY, gates_per_case=args.gates, settings=vars(GateSettings()))


if __name__ == "__main__":
    main()
