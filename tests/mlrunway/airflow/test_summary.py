"""The demo's summary: a line per task that got that far, and where the run's sweep report was saved."""

from __future__ import annotations

from pathlib import Path

from mlrunway.airflow.summary import format_summary

RESULTS = {
    "sweep": {"trials": 8, "stopped_early": ["t1", "t2"], "epochs": 100, "sweep_name": "d-0123abcd-sweep"},
    "cleanup": {"endpoint_deleted": True},
}


def test_the_summary_names_the_saved_report_and_what_is_left_running():
    report = Path("/ws/reports/d-0123abcd-sweep/report.html")
    lines = format_summary("success", RESULTS, [], report).splitlines()
    assert lines == ["run: success", "sweep: 8 trials, 2 stopped early by Bandit, 100 epochs",
                     "cleanup: endpoint deleted; nothing left running",
                     f"report: {report} (in the Airflow UI: the run's Sweep report tab)"]
    left = format_summary("failed", RESULTS, ["pid 7: python -m mlrunway.local.serving.server"])
    assert left.splitlines()[-1] == "cleanup: endpoint deleted; LEFT RUNNING: pid 7: python -m mlrunway.local.serving.server"


def test_the_onnx_line_reads_parity_recorded_before_and_after_the_relative_tolerance():
    old = {"max_abs_diff": 3.8e-06, "top1_agreement": 1.0, "samples": 256, "inputs": "validation images",
           "atol": 1e-4, "min_top1_agreement": 1.0, "passed": True}  # as recorded before issue 32: no rtol
    new = {**old, "atol": 1e-5, "rtol": 1e-4, "tolerance_used": 0.0412}

    def onnx_line(parity):
        export = {"model_name": "d-onnx", "model_version": 1, "opset": 18, "parity": parity}
        return next(line for line in format_summary("success", {"export_onnx": export}, []).splitlines()
                    if line.startswith("onnx:"))

    assert onnx_line(old) == "onnx: d-onnx:1 opset 18, max |onnx - torch| 3.8e-06, top-1 agreement 100% on 256 " \
                             "validation images"
    assert onnx_line(new) == "onnx: d-onnx:1 opset 18, max |onnx - torch| 3.8e-06 (4.12% of the tolerance), top-1 " \
                             "agreement 100% on 256 validation images"
    assert onnx_line({**new, "top1_agreement": None}).endswith("(4.12% of the tolerance) on 256 validation images")
    outputs = [{"name": "logits", "max_abs_diff": 3.8e-06, "tolerance_used": 0.0412},
               {"name": "weekly_sales", "max_abs_diff": 0.0012, "tolerance_used": 0.2}]
    assert onnx_line({**new, "outputs": outputs}) == "onnx: d-onnx:1 opset 18, max |onnx - torch| 3.8e-06 (4.12% of " \
        "the tolerance), the most on weekly_sales of 2 outputs, top-1 agreement 100% on 256 validation images"
