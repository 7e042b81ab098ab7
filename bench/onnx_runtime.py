"""ONNX Runtime against PyTorch eager on the exported model: batch 1 and 64, the same threads, and parity.

    .venv/bin/python bench/onnx_runtime.py [--duration 2] [--batches 1 64] [--threads 1 2] [--repeats 5]

About 2 minutes. PyTorch runs the ``torch.export`` program that train.py saved (``.module()``, executed op by op, in
``torch.inference_mode``); ONNX Runtime runs the ONNX model exported from it, with ``intra_op_num_threads``
equal to ``torch.set_num_threads``. Each cell calls the model back to back on a real validation batch for
``--duration`` seconds after a warm-up, PyTorch and ONNX Runtime alternating, every cell once per repeat (the
cells' order rotated each repeat). The speed-up is taken within each repeat (PyTorch's p50 over ONNX Runtime's).
Parity is the export gate's own comparison on every validation image, and must pass. Prints a table and records
bench/results/onnx_runtime.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from _common import Bench, build_model, harness_args, interleaved, table, validation_images


def timed(call: Callable[[], Any], duration: float) -> dict[str, float]:
    for _ in range(20):  # warm-up: allocations, kernel selection
        call()
    latencies = []
    stop = time.perf_counter() + duration
    while (start := time.perf_counter()) < stop:
        call()
        latencies.append(time.perf_counter() - start)
    latencies.sort()
    return {"calls_per_s": len(latencies) / sum(latencies), "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    harness_args(parser, repeats=5)
    args = parser.parse_args()
    bench = Bench("onnx_runtime", args)

    import numpy as np
    import onnxruntime as ort
    import torch

    from mlrunway.onnx_export.parity import compare

    with tempfile.TemporaryDirectory() as scratch:
        torch_dir, onnx_dir, data = build_model(Path(scratch))
        images = validation_images(onnx_dir, data)
        model = torch.export.load(torch_dir / "model.pt2").module()
        sessions = {}
        for threads in args.threads:
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            sessions[threads] = ort.InferenceSession(str(onnx_dir / "model.onnx"), options,
                                                     providers=["CPUExecutionProvider"])
        rows = []
        cells = [(threads, batch) for threads in args.threads for batch in args.batches]
        for repeat, order in interleaved(cells, args.repeats):
            for threads, batch in order:
                torch.set_num_threads(threads)
                session = sessions[threads]
                x = np.ascontiguousarray(images[:batch])
                tx = torch.from_numpy(x)

                def eager(tx: torch.Tensor = tx) -> Any:
                    with torch.inference_mode():
                        return model(tx)

                t = timed(eager, args.duration)
                o = timed(partial(session.run, None, {"input": x}), args.duration)
                cell = f"{threads} thread{'s' if threads > 1 else ''}, batch {batch}"
                bench.add(f"PyTorch p50 ms, {cell}", t["p50_ms"], "ms")
                bench.add(f"ONNX Runtime p50 ms, {cell}", o["p50_ms"], "ms")
                bench.add(f"speed-up, {cell}", t["p50_ms"] / o["p50_ms"], "x")
                bench.add(f"ONNX Runtime images/s, {cell}", o["calls_per_s"] * batch, "images/s")
                rows.append({"repeat": repeat, "threads": threads, "batch": batch,
                             "torch_images_per_s": t["calls_per_s"] * batch, "ort_images_per_s": o["calls_per_s"] * batch,
                             "torch_p50_ms": t["p50_ms"], "ort_p50_ms": o["p50_ms"],
                             "speedup": t["p50_ms"] / o["p50_ms"]})

        def reference(chunk: Any) -> Any:
            with torch.inference_mode():
                return model(torch.from_numpy(np.ascontiguousarray(chunk))).numpy()

        session = sessions[args.threads[-1]]
        parity = compare(reference, lambda chunk: session.run(None, {"input": np.ascontiguousarray(chunk)})[0],
                         images, source="validation images", atol=1e-4, min_top1_agreement=1.0)
    print(table(rows, [("repeat", "repeat"), ("threads", "threads"), ("batch", "batch"), ("torch_p50_ms", "torch p50 ms"),
                       ("ort_p50_ms", "ORT p50 ms"), ("speedup", "ORT speed-up"),
                       ("torch_images_per_s", "torch img/s"), ("ort_images_per_s", "ORT img/s")]))
    print(f"parity: {parity.summary()}")
    if not parity.passed:
        raise SystemExit(f"the export's parity gate failed, so these are not timings of the same model: "
                         f"{parity.summary()}; not recorded")
    bench.record(rows, ("torch", "onnxruntime", "onnx"), parity=parity.to_dict(),
                 torch_side="torch.export program .module(), inference_mode")


if __name__ == "__main__":
    main()
