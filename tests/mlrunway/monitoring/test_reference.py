"""The reference runner's place (issue 77): it lives beside the monitoring code, and the command users were told to
run, ``python -m mlrunway.local.reference``, still runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mlrunway.errors import SpecError
from mlrunway.monitoring.reference import read_requests


@pytest.mark.parametrize("module", ["mlrunway.monitoring.reference", "mlrunway.local.reference"],
                         ids=["new-place", "old-name"])
def test_the_reference_runner_answers_under_its_new_place_and_its_old_name(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, check=True)
    assert "--requests" in done.stdout and "--model" in done.stdout


def test_a_requests_file_reads_bodies_and_wrapped_requests_and_names_a_bad_line(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text('{"data": [1]}\n\n{"request": {"data": [2]}}\n')
    assert read_requests(path) == [{"data": [1]}, {"data": [2]}]
    path.write_text('{"data": [1]}\nnot json\n')
    with pytest.raises(SpecError, match="requests line 2: is not JSON"):
        read_requests(path)
