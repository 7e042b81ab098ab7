"""A deployment's data collector, in azure-ai-ml's words, and the capability of reading back what it collected.

The settings are ``ManagedOnlineDeployment(data_collector=DataCollector(...))``'s, as a dict::

    {"collections": {"model_inputs": {"enabled": "true"}, "model_outputs": {"enabled": "true"}},
     "sampling_rate": 1.0, "rolling_rate": "hour"}

Two kinds of collection, as on Azure ML:

- **custom logging**: any name but ``request`` and ``response`` (at most five); the scoring script fills it with
  ``azureml.ai.monitoring.Collector(name=...).collect(dataframe)``. ``model_inputs`` and ``model_outputs`` are the
  names Azure's model monitoring looks for.
- **payload logging**: ``request`` and ``response``, the HTTP bodies themselves, with no change to the script.

``sampling_rate`` (0 to 1, default 1) is the share of data kept; ``rolling_rate`` (``minute``, ``hour`` or ``day``,
default ``hour``) is how the files are partitioned in time. Each record is Azure's JSON line (``specversion``,
``id``, ``source``, ``type`` (``azureml.inference.<collection>``), ``time``, ``data``, ``correlationid``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mlrunway import check

__all__ = ["PAYLOAD_COLLECTIONS", "ROLLING_RATES", "Capture", "DataCollector", "ModelMonitor", "Replay", "rows_of"]

PAYLOAD_COLLECTIONS = ("request", "response")
ROLLING_RATES = ("minute", "hour", "day")  # azure-ai-ml's DataCollectorSchema allows these three
MAX_CUSTOM = 5  # Azure ML: "as many as five" Collector objects in a scoring script
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TRUE, _FALSE = ("true", "True", True), ("false", "False", False)


@dataclass(frozen=True)
class DataCollector:
    """What a deployment collects: ``enabled`` names (lower case, as the SDK compares them), the share kept and
    the files' time partition."""

    enabled: tuple[str, ...]
    sampling_rate: float = 1.0
    rolling_rate: str = "hour"

    @classmethod
    def parse(cls, value: Any, field: str = "data_collector") -> DataCollector | None:
        """The settings from azure-ai-ml's shape; None when ``value`` is empty or enables nothing. Every mistake
        names its field."""
        if value is None or value == {}:
            return None
        if not isinstance(value, Mapping):
            raise check.fail(field, f"{value!r} is not a mapping",
                             'pass {"collections": {"model_inputs": {"enabled": "true"}}, "sampling_rate": 1.0}')
        unknown = sorted(set(value) - {"collections", "sampling_rate", "rolling_rate"})
        if unknown:
            raise check.fail(f"{field}.{unknown[0]}", "is not a data collector setting",
                             "use collections, sampling_rate and rolling_rate")
        collections = value.get("collections")
        if not isinstance(collections, Mapping) or not collections:
            raise check.fail(f"{field}.collections", "names no collection",
                             'pass {"model_inputs": {"enabled": "true"}, ...} (or request/response for payloads)')
        enabled = tuple(name.lower() for name, setting in collections.items()
                        if _enabled(f"{field}.collections", name, setting))
        custom = [name for name in enabled if name not in PAYLOAD_COLLECTIONS]
        if len(custom) > MAX_CUSTOM:
            raise check.fail(f"{field}.collections", f"enables {len(custom)} custom collections",
                             f"enable at most {MAX_CUSTOM}, as Azure ML allows")
        rate = value.get("sampling_rate")
        if rate is None:
            rate = 1.0
        elif isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
            raise check.fail(f"{field}.sampling_rate", f"{rate!r} is not a share of the data in (0, 1]",
                             "pass e.g. 1.0 for all, 0.1 for a tenth; disable a collection to collect none")
        rolling = str(value.get("rolling_rate") or "hour").lower()
        check.one_of(f"{field}.rolling_rate", rolling, ROLLING_RATES)
        return cls(enabled, float(rate), rolling) if enabled else None

    @property
    def custom(self) -> tuple[str, ...]:
        """The collections the scoring script fills through ``Collector``."""
        return tuple(name for name in self.enabled if name not in PAYLOAD_COLLECTIONS)

    @property
    def payload(self) -> tuple[str, ...]:
        """``request`` and/or ``response``: filled by the server, whatever the script does."""
        return tuple(name for name in self.enabled if name in PAYLOAD_COLLECTIONS)

    def to_dict(self) -> dict[str, Any]:
        """azure-ai-ml's shape again (what :meth:`parse` reads)."""
        return {"collections": {name: {"enabled": "true"} for name in self.enabled},
                "sampling_rate": self.sampling_rate, "rolling_rate": self.rolling_rate}


def _enabled(field: str, name: Any, setting: Any) -> bool:
    if not isinstance(name, str) or not _NAME.match(name):
        raise check.fail(f"{field}.{name}", "is not a collection name",
                         "use letters, digits, _ and - (the name your score.py gives its Collector)")
    flag = setting.get("enabled", True) if isinstance(setting, Mapping) else setting
    if isinstance(setting, Mapping) and (extra := sorted(set(setting) - {"enabled"})):
        raise check.fail(f"{field}.{name}.{extra[0]}", "is not supported",
                         "give each collection only enabled; the data lands in the workspace's default store")
    if flag in _TRUE:
        return True
    if flag in _FALSE:
        return False
    raise check.fail(f"{field}.{name}.enabled", f"{flag!r} is not true or false", 'pass "true" or "false"')


def rows_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of collector records (a record's ``data``: a list of rows, or one), in order."""
    rows: list[dict[str, Any]] = []
    for record in records:
        data = record.get("data")
        rows += [r for r in (data if isinstance(data, list) else [data]) if isinstance(r, dict)]
    return rows


@runtime_checkable
class Capture(Protocol):
    """A backend that reads back what its deployments collected (the local one: files under its workspace)."""

    def captured(self, endpoint: str, deployment: str, collection: str, start: float,
                 end: float) -> list[dict[str, Any]]:
        """The records ``deployment`` wrote to ``collection`` over [start, end) (epoch seconds), oldest first:
        each Azure's JSON object, its rows under ``data``."""
        ...


@runtime_checkable
class Replay(Protocol):
    """A backend that can run a scoring script on this machine and keep what it collects (a monitor's reference)."""

    def replay(self, model: str, code_dir: str, scoring_script: str, requests: list[Any], out: str) -> dict[str, int]:
        """Give ``requests`` to the script serving ``model`` (``name:version``), with ``model_inputs`` and
        ``model_outputs`` enabled; write each collection's rows to ``<out>/<collection>.jsonl``; return the counts."""
        ...


@runtime_checkable
class ModelMonitor(Protocol):
    """A backend whose service computes drift itself (Azure ML's model monitor), over what its deployments collect."""

    def ensure_monitor(self, endpoint: str, deployment: str,
                       metric_thresholds: dict[str, dict[str, float]]) -> str | None:
        """Create or update the service's monitor of ``deployment`` with these metrics and thresholds (azure-ai-ml's
        ``metric_thresholds``); return its name, or None when the connection asks for no monitor."""
        ...
