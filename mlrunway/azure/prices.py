"""Azure's public Retail Prices API: the hourly price of a VM size in a region, to fill what a connection's rate card
lacks (``RateCard.retail_prices``, :mod:`mlrunway.ledger.cost`).

``GET https://prices.azure.com/api/retail/prices?currencyCode='<cur>'&$filter=...`` needs no sign-in and answers
``{"BillingCurrency", "CustomerEntityId", "CustomerEntityType", "Items": [...], "NextPageLink", "Count"}``, a page at
a time (followed until ``NextPageLink`` is empty). Of a size's items in the workspace's region, only hourly
(``unitOfMeasure`` "1 Hour") pay-as-you-go (``type`` "Consumption") Linux meters count (a ``productName`` that ends
in "Windows" is the Windows price); the meter's name says its tier: "... Spot" is spot, "... Low Priority" low
priority, else dedicated. Where several meters of one tier disagree after the primary meter region is preferred,
the tier is left unknown rather than guessed.

Answers are cached a day in the reports folder (``rates/retail-<region>-<currency>.json``), which the workers and the
triggerer share; a failed read (the service away, a 429) is logged and leaves the rate unknown, uncached, and so is
an answer without a meter. The filter's values are case-sensitive: ``armSkuName`` must be spelled as the region lists
its sizes (``Standard_NC6s_v3``, where ARM answers a cluster's ``vmSize`` upper-cased; ``AzureJobs`` spells it so).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from azure.core import PipelineClient
from azure.core.exceptions import AzureError
from azure.core.pipeline.policies import RetryPolicy
from azure.core.rest import HttpRequest

__all__ = ["CACHE_S", "PRICES_HOST", "RetailPrices", "tier_rates"]

PRICES_HOST = "https://prices.azure.com"
CACHE_S = 24 * 3600.0
MAX_PAGES = 20  # a size's meters in one region fit in one page; a service that pages on and on is not followed
log = logging.getLogger(__name__)


def tier_rates(items: list[dict[str, Any]], currency: str) -> dict[str, float]:
    """The Linux pay-as-you-go price per hour of each tier (``dedicated``, ``spot``, ``low_priority``) among a VM
    size's items; a tier whose meters disagree is left out."""
    found: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if (item.get("unitOfMeasure") != "1 Hour" or item.get("type") != "Consumption"
                or str(item.get("productName", "")).endswith("Windows") or item.get("currencyCode") != currency
                or not isinstance(item.get("retailPrice"), (int, float)) or item["retailPrice"] <= 0):
            continue
        meter = f"{item.get('meterName', '')} {item.get('skuName', '')}"
        tier = "spot" if "Spot" in meter else "low_priority" if "Low Priority" in meter else "dedicated"
        found.setdefault(tier, []).append(item)
    rates = {}
    for tier, candidates in found.items():
        primary = [c for c in candidates if c.get("isPrimaryMeterRegion")] or candidates
        prices = {float(c["retailPrice"]) for c in primary}
        if len(prices) == 1:
            rates[tier] = prices.pop()
        else:
            log.warning("Retail Prices: %d %s meters of %s disagree (%s): its rate is left unknown", len(primary),
                        tier, primary[0].get("armSkuName"), sorted(prices))
    return rates


class RetailPrices:
    """The prices of VM sizes in ``region``, in ``currency``, read from the Retail Prices API and cached under
    ``folder``; ``transport``: azure-core's (tests pass a fake service)."""

    def __init__(self, folder: Path, region: str, currency: str, **transport: Any) -> None:
        self.file = Path(folder) / "rates" / f"retail-{region.lower()}-{currency}.json"
        self.region, self.currency = region.lower(), currency
        self.client = PipelineClient(base_url=PRICES_HOST, policies=[RetryPolicy(retry_total=2)], **transport)

    def rates(self, size: str) -> dict[str, float]:
        """``size``'s price per hour by tier (those the service prices); from the cache while it is a day old."""
        cache = self._cached()
        entry = cache.get(size.lower())
        if isinstance(entry, dict) and time.time() - float(entry.get("at", 0)) < CACHE_S:
            return dict(entry.get("rates") or {})
        try:
            rates = tier_rates(self._items(size), self.currency)
        except (AzureError, ValueError) as exc:
            log.warning("Retail Prices: %s in %s could not be read (%s): its rate is unknown", size, self.region, exc)
            return {}
        if rates:  # an empty answer (a size misspelled, a region without it) is not kept: it would hold a day
            cache[size.lower()] = {"at": time.time(), "rates": rates}
            self._write(cache)
        return rates

    def _items(self, size: str) -> list[dict[str, Any]]:
        query = (f"serviceName eq 'Virtual Machines' and armRegionName eq '{self.region}' and armSkuName eq '{size}' "
                 "and priceType eq 'Consumption'")
        url: str | None = f"{PRICES_HOST}/api/retail/prices?currencyCode='{self.currency}'&$filter={quote(query)}"
        items: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            if not url:
                break
            response = self.client.send_request(HttpRequest("GET", url))
            response.raise_for_status()
            page = response.json()
            items += page.get("Items") or []
            url = page.get("NextPageLink") or None
        return items

    def _cached(self) -> dict[str, Any]:
        try:
            data = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, cache: dict[str, Any]) -> None:
        """Whole or not at all (a temporary file renamed over it): a reader never sees half a cache."""
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.file.with_name(f".{self.file.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
            os.replace(tmp, self.file)
        except OSError as exc:  # a read-only reports folder: the rates still serve this process
            log.warning("Retail Prices: the cache %s could not be written: %s", self.file, exc)
