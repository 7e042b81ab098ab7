"""Where the builder was: :func:`mlrunway.lifecycle.lifecycle` (the builder sits above the operators, which stand on
``mlrunway.airflow``), re-exported so a DAG importing it from here keeps working."""

from mlrunway.lifecycle import lifecycle

__all__ = ["lifecycle"]
