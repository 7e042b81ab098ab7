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
from typing import Annotated, Any, Literal, Protocol, get_args, runtime_checkable

from pydantic import BeforeValidator, ConfigDict, Field, Strict, WithJsonSchema, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway.settings import ANY_CASE, SettingsError, parse, setting

__all__ = ["PAYLOAD_COLLECTIONS", "ROLLING_RATES", "Capture", "Collecting", "DataCollector", "ModelMonitor", "Replay", "rows_of"]

PAYLOAD_COLLECTIONS = ("request", "response")
RollingRate = Literal["minute", "hour", "day"]  # azure-ai-ml's DataCollectorSchema allows these three
ROLLING_RATES: tuple[str, ...] = get_args(RollingRate)
MAX_CUSTOM = 5  # Azure ML: "as many as five" Collector objects in a scoring script
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TRUE, _FALSE = ("true", "True", True), ("false", "False", False)


_FLAG = {"type": ["boolean", "string"], "enum": [*_TRUE[::-1], *_FALSE[::-1]]}


def _enabled(value: Any) -> bool:
    """A collection's setting, azure-ai-ml's ``{"enabled": "true"}`` (the SDK's strings, either case of the first
    letter, or a boolean), or the flag alone (``{"request": true}``)."""
    flag = value.get("enabled", True) if isinstance(value, Mapping) else value
    if isinstance(value, Mapping) and (extra := sorted(set(value) - {"enabled"})):
        raise SettingsError(str(extra[0]), "is not supported",
                            "give each collection only enabled; the data lands in the workspace's default store")
    if isinstance(flag, bool):
        return flag
    if isinstance(flag, str) and flag in _TRUE + _FALSE:
        return flag in _TRUE
    raise SettingsError("enabled", f"{flag!r} is not true or false", 'pass "true" or "false"')


Enabled = Annotated[bool, BeforeValidator(_enabled), WithJsonSchema({"anyOf": [
    _FLAG, {"type": "object", "properties": {"enabled": _FLAG}, "additionalProperties": False}]})]


CollectionName = Annotated[str, Field(pattern=_NAME.pattern, json_schema_extra={
    "problem": "is not a collection name",
    "fix": "use letters, digits, _ and - (the name your score.py gives its Collector)"})]


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Collecting:
    """The ``data_collector`` field as a user writes it, in azure-ai-ml's shape, declared once
    (:mod:`mlrunway.settings`): its validation and the trigger form's Param come from here."""

    collections: dict[CollectionName, Enabled] = setting(
        ..., min_length=1, description='Per collection name, {"enabled": "true"} or "false": model_inputs and '
                                       "model_outputs (filled by your score.py), request and response (the HTTP "
                                       "bodies).",
        problem="names no collection",
        fix='pass {"model_inputs": {"enabled": "true"}, ...} (or request/response for payloads)')
    sampling_rate: Annotated[float, Strict()] = setting(
        1.0, gt=0, le=1, description="The share of the data kept, above 0 and at most 1.",
        problem="{value!r} is not a share of the data in (0, 1]",
        fix="pass e.g. 1.0 for all, 0.1 for a tenth; disable a collection to collect none")
    rolling_rate: Annotated[RollingRate, ANY_CASE] = setting(
        "hour", description="How the collected files are partitioned in time.",
        problem="{value!r} is not supported", fix=f"use one of {', '.join(ROLLING_RATES)}")

    @model_validator(mode="after")
    def _at_most_five_custom(self) -> Collecting:
        custom = [n for n, on in self.collections.items() if on and n.lower() not in PAYLOAD_COLLECTIONS]
        if len(custom) > MAX_CUSTOM:
            raise SettingsError("collections", f"enables {len(custom)} custom collections",
                                f"enable at most {MAX_CUSTOM}, as Azure ML allows")
        return self


@dataclass(frozen=True)
class DataCollector:
    """What a deployment collects: ``enabled`` names (lower case, as the SDK compares them), the share kept and
    the files' time partition."""

    enabled: tuple[str, ...]
    sampling_rate: float = 1.0
    rolling_rate: str = "hour"

    @classmethod
    def parse(cls, value: Any, field: str = "data_collector") -> DataCollector | None:
        """The settings from azure-ai-ml's shape, as :class:`Collecting` declares it; None when ``value`` is empty
        or enables nothing. Every mistake names its field."""
        if value is None or value == {}:
            return None
        given = parse(Collecting, value, field, noun="data collector")
        enabled = tuple(name.lower() for name, on in given.collections.items() if on)
        return cls(enabled, float(given.sampling_rate), given.rolling_rate) if enabled else None
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
