"""``asset_prices``: dated reference prices fetched from a public price source (one row per ticker and day: the first price fetched that day)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime

import duckdb

from warehouse.db import transaction


def store_prices(con: duckdb.DuckDBPyConnection, rows: Iterable[tuple[str, date, float]], source: str,
                 fetched_at: datetime) -> int:
    """Insert (ticker, day, usd) rows; returns the rows written. A day's first price stays: derivation judges an
    article by the price of its day, and a later fetch the same day must not turn a published question around
    (a level above that morning's price, below the evening's)."""
    rows = list(rows)
    if not rows:
        return 0
    count = "SELECT count(*) FROM asset_prices"
    with transaction(con):
        before = con.execute(count).fetchall()[0][0]
        con.executemany(
            "INSERT INTO asset_prices VALUES (?, ?, ?, ?, ?) ON CONFLICT (ticker, day) DO NOTHING",
            [(t, d, float(usd), source, fetched_at) for t, d, usd in rows],
        )
        return int(con.execute(count).fetchall()[0][0] - before)


def load_prices(con: duckdb.DuckDBPyConnection) -> list[tuple[str, date, float]]:
    return [(r[0], r[1], r[2]) for r in con.execute("SELECT ticker, day, usd FROM asset_prices ORDER BY ticker, day").fetchall()]
