"""``make demo``'s entry point: Airflow's own command line (``python -m mlrunway.airflow.demo dags test ...`` is
``airflow dags test ...``) in a process that lets its heap go at exit without collecting it.

``airflow dags test`` runs every task in this one process and exits normally: Python's shutdown then walks every
object that MLflow and Airflow left (3.2 s after the demo DAG's last task, measured when export still ran here and
torch and ONNX added theirs, and this lived in every operator's base class; export is a job since issue 64). Frozen at exit (``gc.freeze``), objects in reference cycles are not finalized, as none
are in a task process under an executor, which ends with ``os._exit``; the atexit handlers that close logs and
connections run as before. It is the demo's wall clock, so it is the demo's entry point's, not the operators'.
"""

from __future__ import annotations

import atexit
import gc
import sys


def main() -> None:
    atexit.register(gc.freeze)
    from airflow.__main__ import main as airflow

    sys.exit(airflow())


if __name__ == "__main__":
    main()
