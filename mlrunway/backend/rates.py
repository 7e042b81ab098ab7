"""A rate card: what compute costs an hour, the data a :class:`~mlrunway.backend.protocol.Priced` backend returns.

Declared once (:mod:`mlrunway.settings`): the connection's ``rates`` (and the local connection's ``local_rate``)::

    {"currency": "USD", "per_hour": {"Standard_NC6s_v3": 3.06, "Standard_NC6s_v3:spot": 0.61},
     "local_rate": 0.04}

What a job costs by it, and a budget over those costs, is :mod:`mlrunway.ledger`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, Strict, WithJsonSchema, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.backend.types import Usage
from mlrunway.errors import SpecError
from mlrunway.settings import MAX_PRICE, NOT_A_FLAG, PRICE_WORDS, SettingsError, parse, price_setting, setting

__all__ = ["TIERS", "RateCard", "rate_key"]

TIERS = ("dedicated", "low_priority", "spot")
_PRICE = re.compile(r"^\s*(?P<amount>[0-9]+(?:\.[0-9]+)?)\s*(?P<currency>[A-Za-z]{3})?\s*$")


def _price(value: Any) -> Any:
    """A price as a number, or as text with its currency (``"3.06 USD"``), which the card checks against its own."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a price")
    if isinstance(value, str) and (match := _PRICE.match(value)):
        return {"amount": float(match["amount"]), "currency": (match["currency"] or "").upper() or None}
    return value


Price = Annotated[Any, BeforeValidator(_price), WithJsonSchema({"anyOf": [
    {"type": "number", "minimum": 0}, {"type": "string", "pattern": _PRICE.pattern}]}), Field(json_schema_extra={
        "problem": "{value!r} is not a price", "fix": "give a number of at least 0 per hour, in the card's currency"})]
RateKey = Annotated[str, Field(pattern=rf"^[A-Za-z0-9_.-]+(:({'|'.join(TIERS)}))?$", json_schema_extra={
    "problem": "is not a VM size", "fix": "name a VM size as Azure does (Standard_NC6s_v3), with :spot or "
                                          ":low_priority for those tiers"})]


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class RateCard:
    """What compute costs an hour, declared once (:mod:`mlrunway.settings`): the connection's ``rates`` (and the
    local connection's ``local_rate``)."""

    currency: str = setting(
        "USD", pattern=r"^[A-Z]{3}$", description="The currency of every rate on the card (ISO 4217: USD, EUR, ...).",
        problem="{value!r} is not a currency code", fix="use three capital letters, e.g. USD or EUR")
    per_hour: dict[RateKey, Price] = setting(
        {}, description="Azure ML: the price of an hour of one node, by VM size (Standard_NC6s_v3), with :spot or "
                        ":low_priority for those tiers.",
        problem="{value!r} is not a rate card", fix='give {"<VM size>": <price per hour>, ...}')
    local_rate: Annotated[float | None, NOT_A_FLAG] = price_setting(
        None, description="The local backend: the price of a core-hour (one process for an hour); empty: jobs show "
                          "hours, not money.",
        fix="give the price of a core-hour, e.g. 0.04")
    retail_prices: Annotated[bool, Strict()] = setting(
        False, description="Azure ML: price the VM sizes the card lacks from Azure's public Retail Prices API, for "
                           "the workspace's region (Linux pay-as-you-go, spot and low-priority meters; cached a day "
                           "in the reports folder).",
        problem="{value!r} is not true or false", fix="pass true or false")

    @model_validator(mode="after")
    def _one_currency(self) -> RateCard:
        """Each rate a number in the card's currency ("3.06 USD" read so; "2.80 EUR" on a USD card refused)."""
        rates: dict[str, float] = {}
        for key, price in self.per_hour.items():
            if isinstance(price, dict):
                if price["currency"] not in (None, self.currency):
                    raise SettingsError(f"per_hour.{key}", f"is in {price['currency']} and the card in "
                                        f"{self.currency}: a currency mix",
                                        f"give every rate in {self.currency}, or set currency to theirs")
                price = price["amount"]
            if not isinstance(price, (int, float)) or not 0 <= price <= MAX_PRICE:  # NaN compares False
                raise SettingsError(f"per_hour.{key}", PRICE_WORDS["problem"].format(value=price), PRICE_WORDS["fix"])
            rates[_key(key)] = float(price)
        object.__setattr__(self, "per_hour", rates)
        return self

    @classmethod
    def parse(cls, value: Mapping[str, Any] | str | None, field: str = "rates", *,
              local_rate: Any = None) -> RateCard:
        """The card from a connection's extra (a mapping or its JSON); ``local_rate``: the local connection's own
        field, which fills the card's. Every mistake names ``<field>.<setting>`` and the fix."""
        if isinstance(value, str) and value.strip():
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise check.fail(field, f"is not JSON ({exc})",
                                 'write the rate card as JSON, e.g. {"currency": "USD", "per_hour": {...}}') from None
        if not isinstance(value, Mapping) and value not in (None, ""):  # a list, a number: refused by name
            return parse(cls, value, field, noun="rate card")  # type: ignore[arg-type]
        card = dict(value) if isinstance(value, Mapping) else {}
        if local_rate not in (None, ""):
            card["local_rate"] = local_rate
        try:
            return parse(cls, card, field, noun="rate card")
        except SpecError as exc:  # the local connection's own field is named as the form names it
            if local_rate in (None, "") or not str(exc).startswith(f"{field}.local_rate:"):
                raise
            raise SpecError(str(exc).replace(f"{field}.local_rate", "local_rate", 1)) from None

    def filled(self, rates: Mapping[str, float]) -> RateCard:
        """The card with ``rates`` (by ``<size>`` or ``<size>:<tier>``) added where it has none of its own."""
        return replace(self, per_hour={**{_key(k): v for k, v in rates.items()}, **self.per_hour})

    def rate(self, usage: Usage) -> float | None:
        """The rate of what ``usage`` ran on, per its unit; None when the card does not price it."""
        key = rate_key(usage)
        return self.local_rate if key is None else self.per_hour.get(_key(key))



def rate_key(usage: Usage) -> str | None:
    """The card's key for what ``usage`` ran on, as a user writes it (``Standard_NC6s_v3``,
    ``Standard_NC6s_v3:spot``); None for this machine, which ``local_rate`` prices."""
    if usage.size is None:
        return None
    return usage.size if (usage.tier or "dedicated") == "dedicated" else f"{usage.size}:{usage.tier}"



def _key(key: str) -> str:
    """VM sizes as Azure compares them: case-insensitive, ``:dedicated`` the same as none."""
    return key.lower().removesuffix(":dedicated")

