"""Which periods changed since the previous set: only those get new parts.

A part is never rewritten: the next set reuses it unless its period changed, which is found without reading the
history: rows whose change stamps (``fetched_at``, ``enriched_at``, ``tagged_at``, ``updated_at``,
``withdrawn_at``: set by the pipeline when it writes a row) are newer than the previous set's watermarks (zone
maps skip the older row groups), articles of stories updated since (the story summary is part of each news row),
and the previous head's rows when the hour moved. What stamps cannot show (a deletion, a corrected date) is
caught by one count and time sum per warehouse table compared with the parts' (each part records its rows' count
and time sum): on a mismatch every period's count and sum is compared (a full scan) and the differing periods are
rebuilt. A changed period gets a new part file under a new name.

Known limit: a story that keeps growing makes every period holding one of its articles be rebuilt at each
publish (recent hours and days in practice).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb

from warehouse.parts.periods import Cuts, range_sql

# Per table: the warehouse table, its time column (the period of a row: the sentiment buckets by their last
# instant, so that today's day bucket, still filling, stays in the head), and its change stamps (columns the
# pipeline sets to the time of the run that wrote the row).
SOURCES = {
    "news": ("articles", "published_at", ("fetched_at", "enriched_at", "tagged_at")),
    "stories": ("stories", "first_seen", ("updated_at",)),
    "events": ("prediction_events", "created_at", ("updated_at", "withdrawn_at")),
    "sentiment": ("asset_sentiment",
                  "(bucket_start + CASE WHEN grain = 'day' THEN INTERVAL 1 DAY ELSE INTERVAL 1 HOUR END "
                  "- INTERVAL 1 MICROSECOND)", ("updated_at",)),
}


def _changed_where(table: str, since: str) -> str:
    """Rows of ``table`` whose stamps are after ``since`` (zone maps skip the old row groups: stamps grow with
    insertion order)."""
    stamps = SOURCES[table][2]
    lit = f"TIMESTAMP '{since}'"
    return " OR ".join(f"{s} > {lit}" for s in stamps)


def changed_periods(con: duckdb.DuckDBPyConnection, cuts: Cuts, since: dict[str, str | None]) -> tuple[
        set[str], dict[str, str | None]]:
    """Periods holding a row written after the previous set's watermarks, and the new watermarks."""
    periods: set[str] = set()
    marks: dict[str, str | None] = {}
    for table, (src, col, stamps) in SOURCES.items():
        w = since.get(table)
        top = "greatest(" + ", ".join(f"coalesce(max({s}), TIMESTAMP '0001-01-01')" for s in stamps) + ")"
        if w is None:
            marks[table] = _iso(con.execute(f"SELECT {top} FROM {src}").fetchall()[0][0])
            continue
        rows = con.execute(
            f"SELECT {cuts.sql(col)} AS period, {top} FROM {src} WHERE {_changed_where(table, w)} GROUP BY 1"
        ).fetchall()
        periods.update(r[0] for r in rows)
        newest = max((r[1] for r in rows), default=None)
        marks[table] = w if newest is None else max(w, _iso(newest) or w)
    return periods, marks


def _iso(value: datetime | None) -> str | None:
    """A watermark; an empty table's is the year 1 (every row written later is newer)."""
    return None if value is None else value.isoformat(sep=" ")


def periods_of_changed_stories(con: duckdb.DuckDBPyConnection, cuts: Cuts, since: str,
                               news_since: str | None = None) -> set[str]:
    """Periods holding an article of a story updated after ``since`` (the story summary in those news rows
    changed), or of a story one of whose articles was written after ``news_since``: each news row carries what the
    earlier articles of its story hold (``warehouse.parts.contents.PRIOR_SQL``), and a publish may run before the stories
    step brings the story in step (``--select serving_snapshot``). Members are found from the earliest such story's
    first article on, and the changed articles' stories from two days before the earliest of them (zone maps skip
    the rest)."""
    changed = f"SELECT id FROM stories WHERE updated_at > TIMESTAMP '{since}'"
    if news_since is not None:
        articles = f"SELECT id, published_at FROM articles WHERE {_changed_where('news', news_since)}"
        changed += f"""
            UNION SELECT story_id FROM story_articles
            WHERE published_at >= (SELECT min(published_at) FROM ({articles})) - INTERVAL 2 DAY
              AND article_id IN (SELECT id FROM ({articles}))"""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _cw_changed_stories AS {changed}")
    try:
        first = con.execute(
            "SELECT min(first_seen) FROM stories WHERE id IN (SELECT id FROM _cw_changed_stories)"
        ).fetchall()[0][0]
        if first is None:
            return set()
        rows = con.execute(
            f"""SELECT DISTINCT {cuts.sql('published_at')} FROM story_articles
                WHERE published_at >= ? AND story_id IN (SELECT id FROM _cw_changed_stories)""",
            [first],
        ).fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS _cw_changed_stories")
    return {r[0] for r in rows}


def periods_of_stories_in(con: duckdb.DuckDBPyConnection, cuts: Cuts, periods: set[str]) -> set[str]:
    """Periods holding an article of a story that has an article in ``periods``, by the articles' dates now.
    A date corrected without a stamp (found by the time sums) moves an article within its story's order, and the
    story's other articles carry that order (``story_first`` and the prior columns), wherever they lie."""
    if not periods:
        return set()
    keys = ", ".join(f"'{p}'" for p in sorted(periods))
    rows = con.execute(f"""
        WITH touched AS (
            SELECT DISTINCT sa.story_id FROM story_articles sa JOIN articles a ON a.id = sa.article_id
            WHERE {cuts.sql('a.published_at')} IN ({keys}))
        SELECT DISTINCT {cuts.sql('a.published_at')} FROM story_articles sa JOIN articles a ON a.id = sa.article_id
        WHERE sa.story_id IN (SELECT story_id FROM touched)""").fetchall()
    return {r[0] for r in rows}


def periods_from(con: duckdb.DuckDBPyConnection, cuts: Cuts, start: datetime | None,
                 end: datetime | None = None) -> set[str]:
    """Periods (under ``cuts``) of every row in ``[start, end)``: where the rows of a previous part or head go
    when the cuts moved."""
    out: set[str] = set()
    for src, col, _ in SOURCES.values():
        rows = con.execute(f"SELECT DISTINCT {cuts.sql(col)} FROM {src} WHERE {range_sql(col, start, end)}").fetchall()
        out.update(r[0] for r in rows)
    return out


def _agg_sql(col: str) -> str:
    """Row count and sum of the time column in µs (for sentiment the bucket start: cheaper than its end)."""
    col = "bucket_start" if col == SOURCES["sentiment"][1] else col
    return f"count(*)::VARCHAR, coalesce(sum(epoch_us({col}))::HUGEINT, 0)::VARCHAR"


# The whole-table check: what the stamps cannot show. Articles: deletions (count) and corrected dates (the sync
# copies a date without touching any stamp: the sum of times). Stories: deletions (count); a story whose
# first_seen moved is updated, so the periods of all its articles (the old first one's included) are rebuilt.
# Events are never deleted and every change is stamped; sentiment buckets only change with articles of their own
# period (an hour bucket is in its articles' period, a day bucket in the period of its day, or the head): both
# are left out.
CHECKED = {"news": True, "stories": False}  # table -> whether the time sum is checked besides the count


def totals(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Per checked table: row count (and time sum) over the whole warehouse table (one cheap scan each)."""
    out = {}
    for t, with_sum in CHECKED.items():
        src, col, _ = SOURCES[t]
        row = con.execute(f"SELECT {_agg_sql(col) if with_sum else 'count(*)::VARCHAR'} FROM {src}").fetchall()[0]
        out[t] = list(row)
    return out


def period_aggregates(con: duckdb.DuckDBPyConnection, cuts: Cuts) -> dict[str, dict[str, list[str]]]:
    """Per period with any row: per table, row count and sum of the time column (a full scan: the fallback)."""
    out: dict[str, dict[str, list[str]]] = {}
    for table, (src, col, _) in SOURCES.items():
        rows = con.execute(
            f"""SELECT {cuts.sql('h')}, sum(n)::VARCHAR, sum(s)::VARCHAR FROM (
                    SELECT date_trunc('hour', {col}) AS h, count(*) AS n,
                           sum(epoch_us({"bucket_start" if table == "sentiment" else col}))::HUGEINT AS s
                    FROM {src} GROUP BY 1) GROUP BY 1"""
        ).fetchall()
        for period, n, s in rows:
            out.setdefault(period, {})[table] = [n, s]
    return out


def range_aggregates(
    con: duckdb.DuckDBPyConnection, lo: datetime | None, hi: datetime | None,
    ranges: list[tuple[datetime | None, datetime | None]] | None = None, tables: Any = SOURCES,
) -> dict[str, list[str]]:
    """Per table (of ``tables``): row count and sum of the time column of the warehouse rows in ``[lo, hi)`` (or in
    any of ``ranges``)."""
    out = {}
    for t in tables:
        src, col, _ = SOURCES[t]
        if ranges is None:
            where = range_sql(col, lo, hi)
        else:  # the exact ranges within their hull (the hull's lower bound lets zone maps skip older rows)
            where = f"({hull_sql(col, ranges)}) AND (" + (" OR ".join(
                f"({range_sql(col, a, b)})" for a, b in ranges) or "false") + ")"
        out[t] = list(con.execute(f"SELECT {_agg_sql(col)} FROM {src} WHERE {where}").fetchall()[0])
    return out


def hull_sql(col: str, ranges: list[tuple[datetime | None, datetime | None]]) -> str:
    """``col`` within the smallest range holding all of ``ranges``, on the stored column (zone maps apply): for
    sentiment, whose period goes by the bucket's end, on ``bucket_start`` a day earlier."""
    if not ranges:
        return "false"
    los = [a for a, _ in ranges]
    his = [b for _, b in ranges]
    lo = None if any(a is None for a in los) else min(los)
    hi = None if any(b is None for b in his) else max(his)
    if col == SOURCES["sentiment"][1]:
        return range_sql("bucket_start", lo - timedelta(days=1) if lo is not None else None, hi)
    return range_sql(col, lo, hi)
