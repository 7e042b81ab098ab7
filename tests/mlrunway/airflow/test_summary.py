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
