"""Today's reference prices from a CoinGecko-compatible API, for the event checks' price bands.

Offline (no route, DNS failure, timeout, an error status) the fetch returns a reason instead of prices: the
shipped table (``pipeline/events/data/asset_reference.csv``) and prices fetched earlier still apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

import httpx

BATCH = 100  # ids per request: CoinGecko's simple/price takes a comma-separated list


@dataclass(frozen=True)
class PriceFetch:
    prices: list[tuple[str, date, float]]  # (ticker, day, USD)
    error: str | None = None  # why nothing (or not everything) was fetched


def fetch_prices(base_url: str, ids: Mapping[str, str], today: date, *, timeout: float = 10.0,
                 user_agent: str = "cryptowire") -> PriceFetch:
    """USD prices of ``ids`` (ticker -> CoinGecko id) from ``{base_url}/simple/price``, dated ``today``."""
    by_id = {v: k for k, v in ids.items()}
    out: list[tuple[str, date, float]] = []
    names = sorted(by_id)
    url = base_url.rstrip("/") + "/simple/price"
    try:
        with httpx.Client(timeout=timeout, headers={"User-Agent": user_agent}, follow_redirects=True) as client:
            for i in range(0, len(names), BATCH):
                batch = names[i : i + BATCH]
                resp = client.get(url, params={"ids": ",".join(batch), "vs_currencies": "usd"})
                if resp.status_code != 200:
                    return PriceFetch(out, f"{url} answered {resp.status_code}: {resp.text[:200]!r}")
                body = resp.json()
                if not isinstance(body, dict):
                    return PriceFetch(out, f"{url} answered a {type(body).__name__}, not an object of coin ids")
                for coin, quote in body.items():
                    usd = quote.get("usd") if isinstance(quote, dict) else None
                    if coin in by_id and isinstance(usd, int | float) and usd > 0:
                        out.append((by_id[coin], today, float(usd)))
    except (httpx.HTTPError, ValueError) as exc:
        return PriceFetch(out, f"could not read {url}: {type(exc).__name__}: {exc}")
    return PriceFetch(out)
