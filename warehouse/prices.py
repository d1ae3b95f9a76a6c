"""``asset_prices``: dated reference prices fetched from a public price source (one row per ticker and day)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime

import duckdb

from warehouse.db import transaction


def store_prices(con: duckdb.DuckDBPyConnection, rows: Iterable[tuple[str, date, float]], source: str,
                 fetched_at: datetime) -> int:
    """Upsert (ticker, day, usd) rows; a later fetch of the same day replaces the price. Returns rows written."""
    rows = list(rows)
    if not rows:
        return 0
    with transaction(con):
        con.executemany(
            "INSERT INTO asset_prices VALUES (?, ?, ?, ?, ?) ON CONFLICT (ticker, day) DO UPDATE "
            "SET usd = excluded.usd, source = excluded.source, fetched_at = excluded.fetched_at",
            [(t, d, float(usd), source, fetched_at) for t, d, usd in rows],
        )
    return len(rows)


def load_prices(con: duckdb.DuckDBPyConnection) -> list[tuple[str, date, float]]:
    return [(r[0], r[1], r[2]) for r in con.execute("SELECT ticker, day, usd FROM asset_prices ORDER BY ticker, day").fetchall()]
