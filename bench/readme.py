"""Write the docs' benchmark figures from bench/results/, so the text and the figures cannot drift.

    .venv/bin/python bench/readme.py [--check]

Each block of a docs page (``docs/**/*.md``; the performance page holds most) between ``<!-- bench:<name> -->`` and ``<!-- /bench:<name> -->`` is rewritten from
``bench/results/<name>.json``: its tables, the sentences that quote a figure, the targets' verdicts and where the
figures come from (commit, repeats, machine). ``--check`` writes nothing and fails when a block differs from what
the results say (a test runs it). Every figure is the median over the repeats, with the min and max beside it.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RESULTS = REPO / "bench" / "results"
BLOCK = re.compile(r"(<!-- bench:(?P<name>[a-z_]+) [^>]*-->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)", re.S)

Doc = dict[str, Any]


def number(value: float, unit: str = "") -> str:
    if unit == "metric":
        return f"{value:.4f}"
    if unit in ("", "epochs", "requests", "count") and float(value).is_integer():
        return f"{int(value):,}"
    if unit == "fraction":
        return f"{value:.0%}" if abs(value) >= 0.1 else f"{value:.1%}"
    if unit in ("ratio", "x"):
        return f"{value:.2f}x" if unit == "ratio" and value < 10 else f"{value:.1f}x"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 0.1 or value == 0:
        return f"{value:.2f}".rstrip("0").rstrip(".") if unit in ("", "points", "epochs") else f"{value:.2f}"
    return f"{value:.2g}"


def spread(figure: Doc) -> str:
    """``median (min–max)``, or the value alone when every run gave it."""
    unit = figure.get("unit", "")
    if figure["min"] == figure["max"]:
        return number(figure["median"], unit)
    return f"{number(figure['median'], unit)} ({number(figure['min'], unit)} to {number(figure['max'], unit)})"


def of(doc: Doc, name: str) -> str:
    figure = doc["figures"].get(name)
    return spread(figure) if figure else "-"


def provenance(doc: Doc, command: str) -> str:
    m = doc["machine"]
    speed = m.get("host_speed_s", {})
    state = "clean" if doc["clean"] else "NOT CLEAN (forced)"
    chunks = f" (in {len(doc['chunks'])} chunks, resumed by whole repeats)" if doc.get("chunks") else ""
    return (f"Recorded by `{command}` at commit `{str(doc['commit'])[:10]}` ({state}) on {doc['date'][:10]}, "
            f"{doc['repeats']} interleaved repeat{'s' if doc['repeats'] != 1 else ''} in {doc['duration_s'] / 60:.0f} "
            f"min{chunks}, on {m['cores']} cores ({m['cpu']}, {m['memory_gib']} GiB, Linux {m['kernel']}, Python "
            f"{m['python']}); host-speed probe {speed.get('before')} s before and {speed.get('after')} s after "
            f"({speed.get('probe', '')}). Each figure: median (min to max) over the repeats; every run is in "
            f"`bench/results/{doc['benchmark']}.json`.")


def targets(doc: Doc) -> str:
    lines = []
    for t in doc.get("targets", []):
        unit = doc["figures"][t["figure"]].get("unit", "")
        mark = {"met": "met", "missed": "**missed**"}.get(t["verdict"], t["verdict"])
        lines.append(f"- Target: {t['what']}: {mark} (median {number(t['median'], unit)}, "
                     f"{number(t['min'], unit)} to {number(t['max'], unit)}).")
    return "\n".join(lines)


def md_table(header: list[str], rows: list[list[str]], right_from: int = 1) -> str:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    return "\n".join("| " + " | ".join(line) + " |" for line in [header, align, *rows])


def endpoint(doc: Doc) -> str:
    labels = doc["labels"]
    clients = doc["args"]["clients"]
    servers = [s for s in labels if f"{s} req/s at {clients[0]}" in doc["figures"]]
    header = ["server"]
    for c in clients:
        header += [f"req/s at {c}"] + ([f"p99 ms at {c}"] if c != 1 else [])
    rows = []
    for s in servers:
        row = [f"**{labels[s]}**" if s == "mlrunway" else labels[s]]
        for c in clients:
            row += [of(doc, f"{s} req/s at {c}")] + ([of(doc, f"{s} p99 ms at {c}")] if c != 1 else [])
        rows.append(row)
    said = []
    at = [c for c in clients if f"mlrunway / bare scoring, req/s at {c}" in doc["figures"]]
    if at:
        shares = ", ".join(f"{of(doc, f'mlrunway / bare scoring, req/s at {c}')} at {_clients(c)}" for c in at)
        p99_at = 16 if 16 in at else at[-1]
        said.append(f"Of the bare scoring app's requests, the endpoint serves {shares} (each the ratio within one "
                    f"repeat), with p99 {of(doc, f'mlrunway p99 ms at {p99_at}')} ms at {_clients(p99_at)}.")
    peers = [f"{of(doc, f'mlrunway / {p}, req/s at 16')} {labels[p].split(', ')[-1]}" for p in ("azureml", "azureml-tuned")
             if f"mlrunway / {p}, req/s at 16" in doc["figures"]]
    if peers:
        said.append(f"Against Azure's scoring server at 16 clients: {' and '.join(peers)}.")
    cost = "the limits' cost in "
    at = [c for c in clients if f"{cost}req/s at {c}" in doc["figures"]]
    if at:
        said.append("The limits (the guarded protocol against uvicorn's httptools without it, the same app) cost "
                    + ", ".join(f"{of(doc, f'{cost}req/s at {c}')} of the req/s at {_clients(c)}" for c in at)
                    + "; the difference in p99 (with them, minus without) is "
                    + ", ".join(f"{of(doc, f'{cost}p99 ms at {c}')} ms at {_clients(c)}" for c in at) + ".")
    return "\n\n".join([md_table(header, rows), " ".join(said), targets(doc), provenance(doc, "python bench/endpoint.py")])


def _clients(count: int) -> str:
    return f"{count} client{'s' if count != 1 else ''}"


def onnx_runtime(doc: Doc) -> str:
    rows = []
    for threads in doc["args"]["threads"]:
        for batch in doc["args"]["batches"]:
            cell = f"{threads} thread{'s' if threads > 1 else ''}, batch {batch}"
            rows.append([str(threads), str(batch), of(doc, f"PyTorch p50 ms, {cell}"),
                         of(doc, f"ONNX Runtime p50 ms, {cell}"), of(doc, f"speed-up, {cell}"),
                         of(doc, f"ONNX Runtime images/s, {cell}")])
    parity = doc["parity"]
    said = (f"Parity on all {parity['samples']} validation images: max |onnx - torch| {parity['max_abs_diff']:.2g}, "
            f"top-1 agreement {parity['top1_agreement']:.0%}.")
    return "\n\n".join([md_table(["threads", "batch", "PyTorch p50 ms", "ONNX Runtime p50 ms", "speed-up",
                                  "ONNX Runtime img/s"], rows, 0), said,
                        provenance(doc, "python bench/onnx_runtime.py")])


def _grouped(doc: Doc, key: str, policy: str, mode_prefix: str, unit: str = "") -> str:
    values = [r[key] for r in doc["results"] if r["policy"] == policy and r["mode"].startswith(mode_prefix)]
    if not values:
        return "-"
    return spread({"median": statistics.median(values), "min": min(values), "max": max(values), "unit": unit})


def early_termination(doc: Doc) -> str:
    policies = list(dict.fromkeys((r["policy"], r["mode"].split(",")[0]) for r in doc["results"]))
    rows = []
    for policy, mode in policies:
        rows.append([policy, "live, 2 at once" if mode == "live" else mode, _grouped(doc, "stopped_early", policy, mode),
                     _grouped(doc, "epochs", policy, mode), _grouped(doc, "best_metric", policy, mode, "metric")])
    said = (f"Bandit(0.15, 1, 10) live runs {of(doc, 'Bandit live: fewer epochs than none')} fewer epochs than no policy, "
            f"its best {of(doc, BEHIND)} points behind: how the tutorial's settings fit this dataset, which the sweep "
            f"report's advice replays for any sweep. A stopped trial logged "
            f"{of(doc, 'Bandit live: epochs logged past a stop, median')} epochs past the interval it was stopped at "
            f"(median; max {of(doc, 'Bandit live: epochs logged past a stop, max')}); the share of the repeats in which the "
            f"report's replay made the live decisions exactly: {of(doc, 'Bandit live: replay reproduces its decisions')}. "
            f"Every live Bandit trial's "
            f"curve equals the no-policy curve of the same trial: {'yes' if doc['curves_match'] else '**no**'}; the "
            f"no-policy curves are the same in every repeat: {'yes' if doc['curves_same_every_repeat'] else 'no'}.")
    return "\n\n".join([md_table(["policy", "how", "trials stopped early", "epochs", "best best_val_acc"], rows, 2), said,
                        targets(doc), provenance(doc, "python bench/early_termination.py")])


SHARE = "Airflow's share: the DAG's wall over the core calls'"
BEHIND = "Bandit live: best behind none's (points)"


def orchestration(doc: Doc) -> str:
    rows = [[run, of(doc, f"{run}: wall s"), of(doc, f"{run}: wall over the jobs'")]
            for run in ("core calls", "airflow dags test")]
    said = (f"Airflow's own share, the DAG's wall time over the same steps as plain calls: "
            f"{of(doc, SHARE)}. Parsing the DAG file adds "
            f"{of(doc, 'parse: the DAG file adds s')} s to `import airflow.sdk` ({of(doc, 'parse: import airflow.sdk s')} s "
            f"alone).")
    return "\n\n".join([md_table(["pipeline", "wall s", "wall over the train and sweep jobs'"], rows), said,
                        targets(doc), provenance(doc, "python bench/orchestration.py")])


def rollout(doc: Doc, command: str = "python bench/rollout.py") -> str:
    rows = []
    for name, decision in doc["expected"].items():
        mine = [r for r in doc["results"] if r["rollout"] == name]
        outside = max(r["failed_outside_challenger"] for r in mine)
        rows.append([name, f"`{decision}` in {len(mine)} of {len(mine)}", of(doc, f"{name}: total s"),
                     of(doc, f"{name}: rollback s after the first failed request"),
                     of(doc, f"{name}: client requests"), of(doc, f"{name}: failed client requests"), str(outside)])
    stages = {r["rollout"]: r["stages"] for r in doc["results"] if r["repeat"] == 0}
    said = " ".join(f"Stages of {name} (first repeat): {text}." for name, text in stages.items())
    return "\n\n".join([md_table(["rollout", "decision", "total s", "back to 0% after the first failed request s",
                                  "client requests", "failed", "failed outside the challenger"], rows), said,
                        targets(doc), provenance(doc, command)])


def rollout_ray(doc: Doc) -> str:
    return rollout(doc, "python bench/rollout.py --backend ray")


def gate(doc: Doc) -> str:
    rows = [[f"{r['n']:,}", f"{r['discordance']:.0%}", f"{r['effect'] * 100:+.0f} points", f"{r['rate']:.1%}",
             f"{r['bound']:.1%} ({r['bound_is']})"] for r in doc["results"]]
    return "\n\n".join([md_table(["items", "disagreeing", "challenger's true effect", "promoted",
                                  "95% Clopper-Pearson bound"], rows, 0),
                        f"Each case: {doc['gates_per_case'] * doc['repeats']:,} simulated gates (champion accuracy "
                        f"{doc['accuracy']:.2f}), the gate's defaults.", targets(doc),
                        provenance(doc, "python bench/gate.py")])


def faults(doc: Doc) -> str:
    measures = doc["measures"]
    rows = [[fault] + [of(doc, f"{fault}: {label} (s)") for label in measures.values()] for fault in doc["faults"]]
    return "\n\n".join([md_table(["fault (SIGKILL)"] + [f"{label} (s)" for label in measures.values()], rows),
                        provenance(doc, "python bench/faults.py")])


def trial_overhead(doc: Doc) -> str:
    rows = []
    for size in doc["args"]["sizes"]:
        n, c = size.split("x")
        rows.append([f"{n} trials, {c} at once", of(doc, f"{size}: xargs"), of(doc, f"{size}: sweep"),
                     of(doc, f"{size}: over script, per trial"), of(doc, f"{size}: controller RSS growth"),
                     of(doc, f"{size}: report page")])
    return "\n\n".join([md_table(["size", "xargs -P s", "sweep s", "over its script, per trial s",
                                  "controller RSS growth MB", "report page s"], rows),
                        targets(doc), provenance(doc, "python bench/trial_overhead.py")])


def capture(doc: Doc) -> str:
    labels, clients = doc["labels"], doc["args"]["clients"]
    rows = [[labels[s]] + [cell for c in clients for cell in (of(doc, f"{s} req/s at {c}"), of(doc, f"{s} p99 ms at {c}"))]
            for s in labels]
    header = ["data collector"] + [cell for c in clients for cell in (f"req/s at {c}", f"p99 ms at {c}")]
    cost = "capture's cost in req/s at"
    costs = ", ".join(f"{of(doc, f'{s} {cost} {c}')} for {s} at {_clients(c)}" for s in ("custom", "payload")
                      for c in clients)
    kept = "; ".join(f"{s}: {k['captured']:,} rows of {k['requests']:,} answered requests"
                     for s, k in doc.get("kept", {}).items())
    return "\n\n".join([md_table(header, rows), f"Capture's cost in req/s (1 - with / without, within a repeat): "
                         f"{costs}. Kept after the last repeat: {kept}.", targets(doc),
                         provenance(doc, "python bench/capture.py")])


def report_page(doc: Doc) -> str:
    trials = doc["args"]["trials"]
    rows = [[f"{trials} trials of {e} epochs", of(doc, f"{trials} trials of {e} epochs: page s")]
            for e in doc["args"]["epochs"]]
    return "\n\n".join([md_table(["sweep", "page s (plot and HTML, warm)"], rows), targets(doc),
                        provenance(doc, "python bench/report_page.py")])


def samplers(doc: Doc) -> str:
    trials = doc["args"]["trials"]
    rows = [[name, of(doc, f"{name}: best of {trials}"), of(doc, f"{name}: sweep wall")] for name in ("random", "bayesian")]
    best: dict[int, dict[str, float]] = {}
    for row in doc["results"]:
        best.setdefault(row["repeat"], {})[row["sampling"]] = row["best"]
    won = sum(b["bayesian"] < b["random"] for b in best.values())
    gap = of(doc, "random's best minus bayesian's")
    said = (f"Random's best minus bayesian's: {gap}; bayesian found the lower "
            f"minimum on {won} of {len(best)} seeds.")
    return "\n\n".join([md_table(["sampling", f"best of {trials} (Hartmann-4, minimum about -3.73)", "sweep wall s"],
                                  rows), said, targets(doc), provenance(doc, "python bench/samplers.py")])


def ray_vs_local(doc: Doc) -> str:
    tasks = ("train", "sweep", "pick_best", "export_onnx", "four tasks")
    rows = [[task, of(doc, f"{task}: local"), of(doc, f"{task}: ray")] for task in tasks]
    cluster = (f"The tests' cluster (two nodes and an MLflow server on this machine) started in "
               f"{of(doc, 'cluster: start')} s and held {of(doc, 'cluster: resident memory')} MB resident.")
    return "\n\n".join([md_table(["task", "local s", "Ray s"], rows), cluster,
                        provenance(doc, "python bench/ray_vs_local.py")])


def endpoint_ray(doc: Doc) -> str:
    clients = doc["args"]["clients"]
    rows = [[doc["labels"][s]] + [cell for c in clients for cell in (of(doc, f"{s} req/s at {c}"),
                                                                       of(doc, f"{s} p99 ms at {c}"))]
            for s in ("ray", "mlrunway", "bare") if f"{s} req/s at {clients[0]}" in doc["figures"]]
    header = ["server"] + [cell for c in clients for cell in (f"req/s at {c}", f"p99 ms at {c}")]
    ratios = ", ".join(f"{of(doc, f'ray / mlrunway, req/s at {c}')} of its requests and "
                       f"{of(doc, f'ray / mlrunway, p99 at {c}')} its p99 at {c} clients" for c in clients)
    return "\n\n".join([md_table(header, rows), f"Against the local endpoint, within each repeat: {ratios}.",
                        targets(doc), provenance(doc, "python bench/endpoint.py --servers mlrunway ray bare "
                                                      "--clients 16 64")])


def ray_faults(doc: Doc) -> str:
    rows = [[label, of(doc, label)] for label in doc["measures"].values() if label in doc["figures"]]
    return "\n\n".join([md_table(["fault, and what is measured", "s"], rows),
                        provenance(doc, "python bench/ray_faults.py")])


def ddp_ray_vs_local(doc: Doc) -> str:
    rows = [[f"{kind}, {shape}", of(doc, f"submit to ended: {kind}"), of(doc, f"placed to ended: {kind}")]
            for kind, shape in (("local", "1 instance x 2 processes"), ("ray", "2 instances x 1 process"))]
    return "\n\n".join([md_table(["backend, shape", "submit to ended s", "placed to ended s"], rows),
                        provenance(doc, "python bench/ddp_ray_vs_local.py")])


RENDER: dict[str, Callable[[Doc], str]] = {"endpoint": endpoint, "onnx_runtime": onnx_runtime,
                                           "early_termination": early_termination, "orchestration": orchestration,
                                           "rollout": rollout, "faults": faults, "trial_overhead": trial_overhead,
                                           "report_page": report_page, "samplers": samplers, "gate": gate,
                                           "capture": capture, "ray_vs_local": ray_vs_local,
                                           "ddp_ray_vs_local": ddp_ray_vs_local, "endpoint_ray": endpoint_ray,
                                           "rollout_ray": rollout_ray, "ray_faults": ray_faults}


def render(text: str, results: Path = RESULTS) -> str:
    """``text`` with every benchmark block rewritten from its results file."""
    def block(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDER:
            raise SystemExit(f"docs block bench:{name} names no benchmark (known: {', '.join(RENDER)})")
        doc = json.loads((results / f"{name}.json").read_text())
        return f"{match[1]}{RENDER[name](doc)}\n{match[4]}"

    return BLOCK.sub(block, text)


def pages() -> list[Path]:
    """The docs pages that hold a benchmark block."""
    return [page for page in sorted(DOCS.rglob("*.md")) if BLOCK.search(page.read_text())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a page differs from the results")
    args = parser.parse_args()
    stale = []
    for page in pages():
        text = page.read_text()
        written = render(text)
        if written == text:
            continue
        stale.append(page.relative_to(REPO).as_posix())
        if not args.check:
            page.write_text(written)
    if args.check and stale:
        sys.exit(f"the benchmark figures of {', '.join(stale)} differ from bench/results/: run make bench-readme")
    print(f"{len(stale)} of {len(pages())} pages rewritten from bench/results/" if not args.check else "up to date")


if __name__ == "__main__":
    main()
