"""The fuzz test's generated cases, in the terminal summary whatever ``-q`` or ``-s`` (each generated test records
its tally as the ``fuzz`` property: tests/chaos/test_endpoint_fuzz.py)."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [f"{report.nodeid.rsplit('::', 1)[-1]}: {value}"
             for reports in terminalreporter.stats.values() for report in reports
             if isinstance(report, pytest.TestReport) and report.when == "call"
             for name, value in report.user_properties if name == "fuzz"]
    if lines:
        terminalreporter.write_sep("-", "generated fuzz cases")
        for line in lines:
            terminalreporter.write_line(line)
