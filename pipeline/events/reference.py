"""The asset reference table: when each asset started trading and dated reference prices.

Derivation checks every question against it, whatever the wording: a price level must lie within
``PRICE_BAND`` of the asset's reference price at publication, and an asset that has traded for more than
``LIVE_FOR`` has no mainnet launch ahead of it. Prices and CoinGecko ids ship as ``data/asset_reference.csv``
(see the README there); start dates come from the asset registry (``since`` in models/tagging/registry.yaml),
which the tagger reads too; prices fetched later (the ``asset_reference_prices`` asset) are added with
``with_prices``.
"""

from __future__ import annotations

import bisect
import csv
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

REFERENCE_PATH = Path(__file__).resolve().with_name("data") / "asset_reference.csv"
# A level 80 % under or 10x over the reference price: wide enough for forecasts made over a year of moves,
# narrow enough to keep counts, holdings and market caps out (those are thousands of times off).
PRICE_BAND = (0.2, 10.0)
# Forecasts name levels far from today's price ("XRP to $27" at $0.55, "$0.001 SHIB"): such a level is the asset's
# out to these multiples, unless another asset the article names has it within its own PRICE_BAND ("Ethereum lags
# as Bitcoin eyes $100K" gives ETH no $100K question). Counts stay out: they are thousands of times off.
FORECAST_BAND = (0.05, 60.0)
# A forecast the words tie to the price itself ("$0.001 SHIB price", "push SOL price to $1,300", "$500 mark") may
# lie out to this multiple: readers list such meme targets as questions (27 dev gold levels lay at 60-100x); an
# amount not tied so ("whale moves $8 million", "staker could earn $200,000") stays within FORECAST_BAND.
PRICED_FORECAST_MAX = 100.0
LIVE_FOR = timedelta(days=365)
# A level the words give no direction for is "above" when it is this far above the asset's reference price
# (and "below" when as far below it); nearer, the table is too coarse to tell.
DIRECTION_MARGIN = 1.25
# "close below" a level this many times the reference price (or "above" one this far under it) is settled the
# day it is asked: no market lists it, and such a "level" is more often a count ("active addresses could fall
# below 800K"). Wide enough for a coarse table and a month of moves (3x refused "ENA could drop below $0.85" in
# August 2025, on the table's July price of $0.28).
SETTLED_MARGIN = 4.0
SETTLED_STALE = timedelta(days=365)  # a price older than this says nothing of what is settled (ENA tripled in 2025)
# A reference price older than this no longer tells today's levels well (a band is 0.2x-10x of it): the price
# asset says so when derivation has nothing newer for an asset (offline runs are normal, so it does not fail).
STALE_AFTER = timedelta(days=90)


@dataclass
class AssetFacts:
    ticker: str
    trading_since: date | None = None
    prices: list[tuple[date, float]] = field(default_factory=list)  # sorted by date
    coingecko_id: str | None = None  # where ``asset_reference_prices`` fetches today's price


class Reference:
    """Facts per ticker; an asset missing from the table has no band and no start date."""

    def __init__(self, facts: dict[str, AssetFacts]):
        self._facts = facts

    @classmethod
    def load(cls, path: Path = REFERENCE_PATH, registry: Path | None = None) -> Reference:
        from models.tagging import load_registry

        facts: dict[str, AssetFacts] = {
            a.symbol: AssetFacts(a.symbol, trading_since=a.since) for a in load_registry(registry) if a.since
        }
        with path.open(encoding="utf-8", newline="") as f:
            for n, row in enumerate(csv.DictReader(f), 2):
                try:
                    ticker, what = row["ticker"].strip().upper(), row["field"].strip()
                    item = facts.setdefault(ticker, AssetFacts(ticker))
                    if what == "price_usd":
                        item.prices.append((date.fromisoformat(row["date"]), float(row["value"])))
                    elif what == "coingecko_id":
                        item.coingecko_id = row["value"].strip()
                    else:
                        raise ValueError(f"unknown field {what!r} (price_usd or coingecko_id; start dates are the "
                                         "registry's `since`)")
                except (KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{n}: bad reference row ({exc}); see {path.parent / 'README.md'}") from exc
        for item in facts.values():
            item.prices.sort()
        return cls(facts)

    def with_prices(self, rows: Iterable[tuple[str, date, float]]) -> Reference:
        """A copy with more dated prices (ticker, day, USD), e.g. those fetched into the warehouse."""
        facts = {t: AssetFacts(f.ticker, f.trading_since, list(f.prices), f.coingecko_id) for t, f in self._facts.items()}
        for ticker, day, usd in rows:
            if usd and usd > 0:
                facts.setdefault(ticker, AssetFacts(ticker)).prices.append((day, float(usd)))
        for item in facts.values():
            item.prices.sort()
        return Reference(facts)

    def previous_price_day(self, ticker: str, day: date) -> date | None:
        """The latest day before ``day`` with a price of ``ticker``; None when there is none."""
        prices = self._facts[ticker].prices if ticker in self._facts else []
        i = bisect.bisect_left(prices, (day, float("-inf")))  # prices are sorted by day
        return prices[i - 1][0] if i else None

    def digest(self) -> str:
        """A text that changes with any fact: start dates, prices, ids (what the event memo's fingerprint reads)."""
        return repr(sorted((t, f.trading_since, f.prices, f.coingecko_id) for t, f in self._facts.items()))

    def price_at(self, ticker: str, when: datetime | date) -> float | None:
        """The latest reference price on or before ``when``; else the earliest one (an article older than
        the table); None for an asset without prices."""
        item = self._facts.get(ticker)
        if item is None or not item.prices:
            return None
        day = when.date() if isinstance(when, datetime) else when
        i = bisect.bisect_right(item.prices, (day, float("inf")))
        return item.prices[max(i - 1, 0)][1]

    def price_range(self, ticker: str, when: datetime | date) -> tuple[float, float, date] | None:
        """The lowest and highest of the reference prices around ``when`` (the latest on or before it and the
        next after it; after the table, the latest alone), and the day of the latest: where the price was known to
        lie. None for an article older than the table, long after it (``SETTLED_STALE``), or an asset without
        prices: the table says nothing about that time."""
        item = self._facts.get(ticker)
        day = when.date() if isinstance(when, datetime) else when
        if item is None or not item.prices or day < item.prices[0][0]:
            return None
        i = bisect.bisect_right(item.prices, (day, float("inf")))
        if day - item.prices[i - 1][0] > SETTLED_STALE:
            return None  # the shipped table alone, long after its last price (offline): it knows no range now
        around = [p for _, p in item.prices[i - 1:i + 1]]
        return min(around), max(around), item.prices[i - 1][0]

    def band(self, ticker: str, when: datetime | date, wide: bool = False, priced: bool = False,
             ) -> tuple[float, float] | None:
        """The levels that are a price of ``ticker`` at ``when`` (``wide``: as a forecast, ``FORECAST_BAND``, out to
        ``PRICED_FORECAST_MAX`` when ``priced``: the words tie the level to the price)."""
        ref = self.price_at(ticker, when)
        if ref is None:
            return None
        lo, hi = FORECAST_BAND if wide else PRICE_BAND
        if wide and priced:
            hi = PRICED_FORECAST_MAX
        return ref * lo, ref * hi

    def trading_since(self, ticker: str) -> date | None:
        item = self._facts.get(ticker)
        return item.trading_since if item else None

    def live_for_long(self, ticker: str, when: datetime) -> bool | None:
        """Whether the asset has traded for more than ``LIVE_FOR`` at ``when``; None when the table does not say."""
        since = self.trading_since(ticker)
        if since is None:
            return None
        return (when.date() if isinstance(when, datetime) else when) - since > LIVE_FOR

    def newest_price_days(self) -> dict[str, date]:
        """ticker -> the day of its newest price, for the assets that have prices."""
        return {t: f.prices[-1][0] for t, f in self._facts.items() if f.prices}

    def coingecko_ids(self) -> dict[str, str]:
        """ticker -> CoinGecko coin id, for the assets that have one."""
        return {t: f.coingecko_id for t, f in self._facts.items() if f.coingecko_id}

    def __contains__(self, ticker: object) -> bool:
        return ticker in self._facts

    def __len__(self) -> int:
        return len(self._facts)


_DEFAULT: Reference | None = None


def default_reference() -> Reference:
    """The shipped table, read once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Reference.load()
    return _DEFAULT
