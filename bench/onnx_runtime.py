"""ONNX Runtime against PyTorch eager on the exported model: batch 1 and 64, the same threads, and parity.

    .venv/bin/python bench/onnx_runtime.py [--duration 5] [--batches 1 64] [--threads 1 2]

PyTorch runs the ``torch.export`` program that train.py saved (``.module()``, executed op by op, in
``torch.inference_mode``); ONNX Runtime runs the ONNX model exported from it, with ``intra_op_num_threads``
equal to ``torch.set_num_threads``. Each cell calls the model back to back on a real validation batch for
``--duration`` seconds after a warm-up. Parity is the export gate's own comparison on every validation image.
Prints a table and records bench/results/onnx_runtime.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import build_model, record, table, validation_images


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
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    import torch

    from mlrunway.onnx_export.parity import compare

    with tempfile.TemporaryDirectory() as scratch:
        torch_dir, onnx_dir, data = build_model(Path(scratch))
        images = validation_images(onnx_dir, data)
        model = torch.export.load(torch_dir / "model.pt2").module()
        rows = []
        for threads in args.threads:
            torch.set_num_threads(threads)
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            session = ort.InferenceSession(str(onnx_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
            for batch in args.batches:
                x = np.ascontiguousarray(images[:batch])
                tx = torch.from_numpy(x)

                def eager(tx: torch.Tensor = tx) -> Any:
                    with torch.inference_mode():
                        return model(tx)

                t = timed(eager, args.duration)
                o = timed(lambda x=x, session=session: session.run(None, {"input": x}), args.duration)
                rows.append({"threads": threads, "batch": batch,
                             "torch_images_per_s": t["calls_per_s"] * batch, "ort_images_per_s": o["calls_per_s"] * batch,
                             "torch_p50_ms": t["p50_ms"], "ort_p50_ms": o["p50_ms"],
                             "speedup": t["p50_ms"] / o["p50_ms"]})

        def reference(chunk: Any) -> Any:
            with torch.inference_mode():
                return model(torch.from_numpy(np.ascontiguousarray(chunk))).numpy()

        parity = compare(reference, lambda chunk: session.run(None, {"input": np.ascontiguousarray(chunk)})[0],
                         images, source="validation images", atol=1e-4, min_top1_agreement=1.0)
    print(table(rows, [("threads", "threads"), ("batch", "batch"), ("torch_p50_ms", "torch p50 ms"),
                       ("ort_p50_ms", "ORT p50 ms"), ("speedup", "ORT speed-up"),
                       ("torch_images_per_s", "torch img/s"), ("ort_images_per_s", "ORT img/s")]))
    print(f"parity: {parity.summary()}")
    record("onnx_runtime", args, rows, ("torch", "onnxruntime", "onnx"), parity=parity.to_dict(),
           torch_side="torch.export program .module(), inference_mode")


if __name__ == "__main__":
    main()
