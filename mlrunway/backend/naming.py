"""Names: what one DAG run creates (``RunNames``), and the attempts of a job that was retried.

Every name derives from the DAG and the run, so two runs or a backfill never collide and a retried task finds
what its earlier try created. A job that ended Failed or Canceled is not re-attached to: the retry submits a
new attempt under ``<name>-a2``, ``-a3``, ..., so every attempt stays visible and a reader finds the newest.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from mlrunway import check

__all__ = ["RunNames", "attempt_name", "attempt_number", "attempts", "base_name", "endpoint_salt"]

_ATTEMPT = re.compile(r"^(?P<base>.+)-a(?P<n>[2-9]|[1-9][0-9]+)$")


@dataclass(frozen=True)
class RunNames:
    """Names of what one DAG run creates. Jobs, models and reports are the workspace's own: they derive from the DAG
    and the run alone. An endpoint's name is unique in its whole Azure region, across workspaces, and scheduled
    and backfill run ids are the same in every installation (``scheduled__<date>``): so where the backend says
    so (``Backend.endpoint_salt``: Azure's workspace ARM id), the endpoint's name also derives from the workspace.

    :param endpoint_salt: what else the endpoint's name derives from ("" locally: the name is ``unsalted_endpoint``).
    """

    prefix: str
    run_key: str
    endpoint_salt: str = ""

    @classmethod
    def of(cls, dag_id: str, run_id: str, prefix: str, endpoint_salt: str = "") -> RunNames:
        run_key = hashlib.sha256(f"{dag_id}/{run_id}".encode()).hexdigest()[:8]
        names = cls(prefix, run_key, endpoint_salt)
        check.endpoint_name(names.endpoint)  # the tightest rule: fail before any job starts
        return names

    @classmethod
    def of_sweep(cls, sweep: str, endpoint_salt: str = "") -> RunNames:
        """The names of the run whose sweep is ``sweep`` (``<prefix>-<run_key>-sweep``)."""
        stem = base_name(sweep).removesuffix("-sweep")
        prefix, _, run_key = stem.rpartition("-")
        if stem == sweep or not prefix or len(run_key) != 8:
            raise check.fail("sweep", f"{sweep!r} is not a pipeline run's sweep", "use <prefix>-<8 hex>-sweep")
        return cls(prefix, run_key, endpoint_salt)

    @property
    def endpoint(self) -> str:
        """``<prefix>-<8 hex>``: the run's key, salted with ``endpoint_salt`` when there is one (as long, so within
        Azure's 32 characters for a prefix of up to 23)."""
        if not self.endpoint_salt:
            return self.unsalted_endpoint
        return f"{self.prefix}-{hashlib.sha256(f'{self.run_key}/{self.endpoint_salt}'.encode()).hexdigest()[:8]}"

    @property
    def unsalted_endpoint(self) -> str:
        """The name the run's endpoint had before names were salted (a run in flight across the upgrade)."""
        return f"{self.prefix}-{self.run_key}"

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Every name the run's endpoint may have: its own, then the one before the upgrade (when different)."""
        return tuple(dict.fromkeys((self.endpoint, self.unsalted_endpoint)))

    @property
    def train_job(self) -> str:
        return f"{self.prefix}-{self.run_key}-train"

    @property
    def sweep(self) -> str:
        return f"{self.prefix}-{self.run_key}-sweep"

    @property
    def export_job(self) -> str:
        """The export job (ONNX and its parity gate, :mod:`mlrunway.onnx_export.job`)."""
        return f"{self.prefix}-{self.run_key}-export"

    @property
    def reference_job(self) -> str:
        """The job that computes the smoke test's expected answer with the team's score.py."""
        return f"{self.prefix}-{self.run_key}-reference"

    @property
    def model(self) -> str:
        return f"{self.prefix}-{self.run_key}"


def endpoint_salt(backend: object) -> str:
    """The backend's ``endpoint_salt`` ("" for a backend written before there was one: its names as before)."""
    return str(getattr(backend, "endpoint_salt", "") or "")


def attempt_name(base: str, attempt: int) -> str:
    """The name of attempt ``attempt`` (1-based) of job ``base``: the first keeps the name, then ``-a2``..."""
    return base if attempt == 1 else f"{base}-a{attempt}"


def attempt_number(name: str) -> int:
    """Which attempt ``name`` is (1 for a name without an ``-aN`` suffix)."""
    match = _ATTEMPT.match(name)
    return int(match["n"]) if match else 1


def base_name(name: str) -> str:
    """The first attempt's name of the job ``name`` is an attempt of."""
    match = _ATTEMPT.match(name)
    return match["base"] if match else name


def attempts(base: str) -> Iterator[str]:
    """The names of ``base``'s attempts in order: ``base``, ``base-a2``, ``base-a3``, ..."""
    attempt = 1
    while True:
        yield attempt_name(base, attempt)
        attempt += 1
