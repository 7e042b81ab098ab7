"""``make demo``'s entry point is Airflow's own command line, in a process that freezes its heap at exit."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_demos_entry_point_runs_airflows_command_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mlrunway.airflow.demo", "version"], capture_output=True, text=True,
                          cwd=REPO, env={"PATH": "/usr/bin:/bin", "AIRFLOW_HOME": str(tmp_path),
                                         "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().split(".")[0] == "3"  # Airflow 3's version, from its CLI

