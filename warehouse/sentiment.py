"""The write side of ``asset_sentiment``: per ticker, per hour and per day, article counts by sentiment and the
mean score (table definitions and what they mean: ``migrations/0007_asset_sentiment.sql``).

Counted: every ``article_tickers`` row whose article has a real publication date, with that asset's own
sentiment (``article_tickers.sentiment``; the article's while the ticker has none yet). Articles with
``date_inferred`` are left out: they carry the time they were fetched, so a feed that drops its dates (or a first
run over an old feed) would pile them into the current hour as if they were news of that hour. When a later fetch
finds the real date, the article enters the bucket of that date.

Incremental: ``asset_sentiment_inputs`` holds what was counted (one row per article and ticker: its hour, label
and score). A refresh compares it with the current articles; the ``(ticker, hour)`` buckets of rows that
appeared, changed (re-scored, re-dated) or went away (re-tagged), and the days holding them, are recomputed from
the inputs, and no others. The comparison reads every article once (a set difference in DuckDB); the
aggregation touches only the changed buckets. All of it is one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from warehouse.db import transaction, utcnow

CURRENT_SQL = """
CREATE OR REPLACE TEMP TABLE _sent_now AS
SELECT t.article_id, t.ticker, date_trunc('hour', a.published_at) AS hour,
       -- the asset's own sentiment ("BTC rallies as ETH slides" counts negative for ETH); the article's until scored
       lower(coalesce(t.sentiment, a.sentiment)) AS sentiment,
       CASE WHEN t.sentiment IS NULL THEN a.sentiment_score ELSE t.sentiment_score END AS sentiment_score
FROM article_tickers t JOIN articles a ON a.id = t.article_id
WHERE NOT coalesce(a.date_inferred, false)
"""

# Rows that went away or changed, and rows that are new or changed (a changed row is in both).
DIFF_SQL = """
CREATE OR REPLACE TEMP TABLE _sent_gone AS SELECT * FROM asset_sentiment_inputs EXCEPT SELECT * FROM _sent_now;
CREATE OR REPLACE TEMP TABLE _sent_new AS SELECT * FROM _sent_now EXCEPT SELECT * FROM asset_sentiment_inputs;
CREATE OR REPLACE TEMP TABLE _sent_hours AS
    SELECT DISTINCT ticker, hour FROM (SELECT ticker, hour FROM _sent_gone UNION ALL SELECT ticker, hour FROM _sent_new);
CREATE OR REPLACE TEMP TABLE _sent_days AS SELECT DISTINCT ticker, date_trunc('day', hour) AS day FROM _sent_hours;
"""

APPLY_SQL = """
DELETE FROM asset_sentiment_inputs USING _sent_gone g
    WHERE asset_sentiment_inputs.article_id = g.article_id AND asset_sentiment_inputs.ticker = g.ticker;
INSERT INTO asset_sentiment_inputs SELECT * FROM _sent_new;
DELETE FROM asset_sentiment USING _sent_hours h
    WHERE asset_sentiment.grain = 'hour' AND asset_sentiment.ticker = h.ticker AND asset_sentiment.bucket_start = h.hour;
DELETE FROM asset_sentiment USING _sent_days d
    WHERE asset_sentiment.grain = 'day' AND asset_sentiment.ticker = d.ticker AND asset_sentiment.bucket_start = d.day;
"""

AGGREGATES = """count(*), count(*) FILTER (WHERE i.sentiment = 'positive'), count(*) FILTER (WHERE i.sentiment = 'neutral'),
    count(*) FILTER (WHERE i.sentiment = 'negative'), count(i.sentiment_score), avg(i.sentiment_score)"""

HOURS_SQL = f"""
INSERT INTO asset_sentiment
SELECT i.ticker, 'hour', i.hour, {AGGREGATES}, $now
FROM asset_sentiment_inputs i JOIN _sent_hours h ON h.ticker = i.ticker AND h.hour = i.hour
GROUP BY i.ticker, i.hour
"""

DAYS_SQL = f"""
INSERT INTO asset_sentiment
SELECT i.ticker, 'day', d.day, {AGGREGATES}, $now
FROM asset_sentiment_inputs i JOIN _sent_days d ON d.ticker = i.ticker AND d.day = date_trunc('day', i.hour)
GROUP BY i.ticker, d.day
"""


@dataclass
class SentimentReport:
    changed: int  # (article, ticker) rows that appeared, changed or went away
    hours: int  # (ticker, hour) buckets recomputed (some may have emptied and gone)
    days: int  # (ticker, day) buckets recomputed
    rows: int  # rows in asset_sentiment afterwards


def refresh_asset_sentiment(con: duckdb.DuckDBPyConnection, now: datetime | None = None) -> SentimentReport:
    """Bring ``asset_sentiment`` up to date with ``articles`` and ``article_tickers`` (one transaction)."""
    now = now or utcnow()
    with transaction(con):
        con.execute(CURRENT_SQL)
        con.execute(DIFF_SQL)
        changed = con.execute("SELECT (SELECT count(*) FROM _sent_gone) + (SELECT count(*) FROM _sent_new)").fetchall()
        hours, days = con.execute("SELECT (SELECT count(*) FROM _sent_hours), (SELECT count(*) FROM _sent_days)").fetchall()[0]
        con.execute(APPLY_SQL)
        con.execute(HOURS_SQL, {"now": now})
        con.execute(DAYS_SQL, {"now": now})
        rows = con.execute("SELECT count(*) FROM asset_sentiment").fetchall()[0][0]
        for name in ("_sent_now", "_sent_gone", "_sent_new", "_sent_hours", "_sent_days"):
            con.execute(f"DROP TABLE {name}")
    return SentimentReport(changed=int(changed[0][0]), hours=int(hours), days=int(days), rows=int(rows))
