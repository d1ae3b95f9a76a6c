"""The memo of event derivation per article (table ``event_memo``): which articles must be derived again.

Derivation reads one article at a time and nothing else but its rules and reference data, so a result stays right
until the article's inputs or that reference data (the ``fingerprint``) change. A run derives the stale articles
only, stores their results here, and merges the events of every article from the memo, as a full pass would. The
warehouse's reference prices are compared row by row instead (``event_memo_prices``): a new day's price makes stale
only the articles naming its ticker from the ticker's previous price day on, whose checks read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import duckdb

from warehouse.db import transaction

# Every column derivation reads, in ``pipeline.events.ArticleIn``'s order; a change to any re-derives the article.
COLUMNS = ("id", "title", "summary", "url", "image_url", "source_name", "published_at", "tickers", "topics",
           "published_offset")


def _input_hash(alias: str) -> str:
    # DuckDB's hash() adds nothing for an empty list, so a tag moved from tickers (now empty) to topics would hash
    # as before: the topics are hashed with a prefix of their own.
    columns = [f"list_transform({alias}.topics, lambda t: 'topic:' || t)" if c == "topics" else f"{alias}.{c}"
               for c in COLUMNS]
    return f"hash({', '.join(columns)})"


def changed_prices(con: duckdb.DuckDBPyConnection) -> list[tuple[str, date]]:
    """``(ticker, day)`` of the reference prices added, changed or removed since the memo's results were stored."""
    return con.execute(
        """SELECT DISTINCT ticker, day FROM (
             (SELECT ticker, day, usd FROM asset_prices EXCEPT SELECT ticker, day, usd FROM event_memo_prices)
             UNION ALL
             (SELECT ticker, day, usd FROM event_memo_prices EXCEPT SELECT ticker, day, usd FROM asset_prices))
           ORDER BY ALL"""
    ).fetchall()


def stale_articles(con: duckdb.DuckDBPyConnection, fingerprint: str,
                   repriced: Sequence[tuple[str, datetime]] = (), every: bool = False) -> list[tuple[Any, ...]]:
    """The articles with no memo under ``fingerprint`` for their current inputs, and those naming a ticker of
    ``repriced`` published at or after its time (their checks read a changed price); every article with ``every``.
    Rows: ``COLUMNS`` and the input hash."""
    columns = ", ".join(f"a.{c}" for c in COLUMNS)
    return con.execute(
        f"""WITH a AS (SELECT *, {_input_hash("articles")} AS input_hash FROM articles)
        SELECT {columns}, a.input_hash FROM a
        LEFT JOIN event_memo m ON m.article_id = a.id AND m.fingerprint = $fp
        WHERE $every OR m.article_id IS NULL OR m.input_hash <> a.input_hash OR EXISTS (
            SELECT 1 FROM (SELECT unnest($tickers::VARCHAR[]) AS ticker, unnest($since::TIMESTAMP[]) AS since) r
            WHERE list_contains(a.tickers, r.ticker) AND a.published_at >= r.since)
        ORDER BY a.id""",
        {"fp": fingerprint, "every": every, "tickers": [t for t, _ in repriced], "since": [s for _, s in repriced]},
    ).fetchall()


def store(con: duckdb.DuckDBPyConnection, fingerprint: str, rows: Sequence[tuple[str, int, str | None, str | None]],
          prices: Sequence[tuple[str, date, float]], replace_all: bool = False) -> None:
    """Record ``(article_id, input_hash, candidate_json, refused_json)`` of derived articles (replacing their earlier
    rows; every row with ``replace_all``), drop the rows of other fingerprints and of articles no longer stored, and
    record ``prices`` (ticker, day, USD: the warehouse's, as derivation read them) as the memo's. One transaction."""
    import pyarrow as pa  # only the events step needs it

    table = pa.table({
        "article_id": pa.array([r[0] for r in rows], pa.string()),
        "input_hash": pa.array([r[1] for r in rows], pa.uint64()),
        "candidate": pa.array([r[2] for r in rows], pa.string()),
        "refused": pa.array([r[3] for r in rows], pa.string()),
    })
    read = pa.table({
        "ticker": pa.array([p[0] for p in prices], pa.string()),
        "day": pa.array([p[1] for p in prices], pa.date32()),
        "usd": pa.array([p[2] for p in prices], pa.float64()),
    })
    con.register("_memo_new", table)
    con.register("_memo_prices", read)
    try:
        with transaction(con):
            con.execute("DELETE FROM event_memo WHERE $all OR fingerprint <> $fp OR article_id NOT IN "
                        "(SELECT id FROM articles) OR article_id IN (SELECT article_id FROM _memo_new)",
                        {"fp": fingerprint, "all": replace_all})
            con.execute("INSERT INTO event_memo SELECT article_id, input_hash, $fp, candidate, refused FROM _memo_new",
                        {"fp": fingerprint})
            con.execute("DELETE FROM event_memo_prices")
            con.execute("INSERT INTO event_memo_prices SELECT ticker, day, usd FROM _memo_prices")
    finally:
        con.unregister("_memo_new")
        con.unregister("_memo_prices")


def has_results(con: duckdb.DuckDBPyConnection, fingerprint: str) -> bool:
    """Whether the memo holds results under ``fingerprint`` (none: every article is derived this run)."""
    return bool(con.execute("SELECT EXISTS (SELECT 1 FROM event_memo WHERE fingerprint = $fp)",
                            {"fp": fingerprint}).fetchall()[0][0])


def results(con: duckdb.DuckDBPyConnection, fingerprint: str) -> list[tuple[str | None, str | None]]:
    """``(candidate_json, refused_json)`` of every stored article that gave either, under ``fingerprint``, oldest
    article first, the order a full pass reads them in."""
    return con.execute(
        "SELECT m.candidate, m.refused FROM event_memo m JOIN articles a ON a.id = m.article_id "
        "WHERE m.fingerprint = $fp AND (m.candidate IS NOT NULL OR m.refused IS NOT NULL) ORDER BY a.published_at, a.id",
        {"fp": fingerprint},
    ).fetchall()
