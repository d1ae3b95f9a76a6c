"""Asset checks: each is one SQL query counting the rows that break a rule (0 means the check passes)."""

import dagster as dg

from pipeline.assets.enrich import articles, crypto_assets
from pipeline.assets.events import prediction_events
from pipeline.assets.ingest import POOL, raw_articles
from pipeline.assets.sentiment import asset_sentiment
from pipeline.assets.serving import serving_snapshot
from pipeline.resources import SnapshotsResource, WarehouseResource
from warehouse.events import CHECKS as EVENT_CHECKS

# A broken cursor or id would break the API: stop before publishing.
BLOCKING_EVENT_CHECKS = {"id_format", "id_unique", "created_at_unique"}

# The same count as warehouse/sentiment.py, from scratch: each asset's own label (the article's until scored).
_RECOUNT = """SELECT t.ticker, date_trunc('day', a.published_at), count(*),
            count(*) FILTER (WHERE lower(coalesce(t.sentiment, a.sentiment)) = 'positive'),
            count(*) FILTER (WHERE lower(coalesce(t.sentiment, a.sentiment)) = 'neutral'),
            count(*) FILTER (WHERE lower(coalesce(t.sentiment, a.sentiment)) = 'negative')
     FROM article_tickers t JOIN articles a ON a.id = t.article_id WHERE NOT coalesce(a.date_inferred, false)
     GROUP BY ALL"""
_STORED = "SELECT ticker, bucket_start, articles, positive, neutral, negative FROM asset_sentiment WHERE grain = 'day'"
RECOUNT_SQL = (f"SELECT {{select}} FROM (({_STORED} EXCEPT {_RECOUNT}) UNION ALL ({_RECOUNT} EXCEPT {_STORED}))")


def _violations(
    warehouse: WarehouseResource, sql: str, sample_sql: str | None = None, blocking: bool = False
) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        bad = con.execute(sql).fetchall()[0][0]
        sample = con.execute(sample_sql).fetchall() if (bad and sample_sql) else []
    return dg.AssetCheckResult(
        passed=bad == 0,
        # The UI colours by severity: red only for what stops the run (and the snapshot); the rest is reported
        # and published, so it is a warning to look at.
        severity=dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN,
        metadata={"violations": bad, "sample": dg.MetadataValue.json([list(map(str, r)) for r in sample])},
    )


def sql_check(
    asset, name: str, description: str, sql: str, sample_sql: str | None = None, blocking: bool = False
):
    # In the writers' pool too: a check opens the warehouse, which DuckDB refuses while a writer step has it.
    @dg.asset_check(asset=asset, name=name, description=description, blocking=blocking, pool=POOL)
    def _check(warehouse: WarehouseResource) -> dg.AssetCheckResult:
        return _violations(warehouse, sql, sample_sql, blocking)

    return _check


# A real date may arrive at a later fetch than the first (it replaces an inferred one, and that fetch sets
# updated_at): ingestion accepts dates up to that fetch plus a day, and so does the check.
RAW_TITLE_OR_DATE_WRONG = (
    "trim(title) = '' OR published_at > greatest(fetched_at, coalesce(updated_at, fetched_at)) + INTERVAL 1 DAY"
)

# Symbols an article may carry: today's, and the former ones of renamed assets (for articles of their time).
_KNOWN_SYMBOLS = "SELECT symbol FROM crypto_assets UNION ALL SELECT unnest(former_symbols) FROM crypto_assets"

ALL_CHECKS = [
    # raw_articles
    sql_check(
        raw_articles,
        "unique_url",
        "No two articles share a canonical URL.",
        "SELECT count(*) FROM (SELECT url FROM raw_articles WHERE url IS NOT NULL GROUP BY url HAVING count(*) > 1)",
    ),
    sql_check(
        raw_articles,
        "not_empty_title",
        "Every article has a title and a publication time no later than the fetch that gave it (plus a day).",
        f"SELECT count(*) FROM raw_articles WHERE {RAW_TITLE_OR_DATE_WRONG}",
        f"SELECT id, title, published_at FROM raw_articles WHERE {RAW_TITLE_OR_DATE_WRONG} LIMIT 5",
    ),
    # articles
    sql_check(
        articles,
        "sentiment_scored",
        "Every article has a sentiment label, a score in [-1, 1] and probabilities that sum to 1.",
        "SELECT count(*) FROM articles WHERE sentiment NOT IN ('negative', 'neutral', 'positive') "
        "OR sentiment IS NULL OR sentiment_score IS NULL OR sentiment_score < -1 OR sentiment_score > 1 "
        "OR abs(prob_negative + prob_neutral + prob_positive - 1) > 1e-3",
        "SELECT id, sentiment, sentiment_score FROM articles WHERE sentiment IS NULL OR sentiment_score IS NULL "
        "OR sentiment_score < -1 OR sentiment_score > 1 LIMIT 5",
        blocking=True,
    ),
    sql_check(
        articles,
        "tickers_in_registry",
        "Every ticker on an article exists in crypto_assets, as its symbol or a former one (an article from before a "
        "rename has the symbol of its day: MATIC, not POL).",
        f"SELECT count(*) FROM (SELECT unnest(tickers) AS t FROM articles) WHERE t NOT IN ({_KNOWN_SYMBOLS})",
        f"SELECT DISTINCT t FROM (SELECT unnest(tickers) AS t FROM articles) WHERE t NOT IN ({_KNOWN_SYMBOLS}) LIMIT 5",
    ),
    sql_check(
        crypto_assets,
        "symbols_upper",
        "Registry symbols are upper case.",
        "SELECT count(*) FROM crypto_assets WHERE symbol <> upper(symbol)",
    ),
    # asset_sentiment: the incremental table equals a recount from scratch
    sql_check(
        asset_sentiment,
        "matches_recount",
        "Every day bucket of asset_sentiment equals a recount of its articles (dated articles only).",
        RECOUNT_SQL.format(select="count(*)"),
        RECOUNT_SQL.format(select="*") + " LIMIT 5",
    ),
    # prediction_events: the rules live beside the write side (warehouse/events.py)
    *(
        sql_check(
            prediction_events,
            c.name,
            c.description,
            c.sql,
            c.sample_sql,
            blocking=c.name in BLOCKING_EVENT_CHECKS,
        )
        for c in EVENT_CHECKS
    ),
]


@dg.asset_check(  # ERROR when it fails (the default): the API is serving what the warehouse does not hold
    asset=serving_snapshot,
    pool=POOL,
    name="published_matches_warehouse",
    description="CURRENT names a snapshot whose news and events counts equal the warehouse's articles and events, "
    "with unique article ids and event cursors.",
)
def published_matches_warehouse(warehouse: WarehouseResource, snapshots: SnapshotsResource) -> dg.AssetCheckResult:
    from pathlib import Path

    from warehouse.published import current_snapshot

    path = current_snapshot(Path(snapshots.directory))
    if path is None:
        return dg.AssetCheckResult(passed=False, metadata={"problem": "no CURRENT snapshot"})
    with warehouse.connect() as con:
        expected = con.execute(
            "SELECT (SELECT count(*) FROM articles), (SELECT count(*) FROM prediction_events)"
        ).fetchall()[0]
    from warehouse.parts import connect_snapshot

    snap = connect_snapshot(path)
    try:
        got = snap.execute(
            "SELECT (SELECT count(*) FROM news), (SELECT count(*) FROM events), "
            "(SELECT count(*) - count(DISTINCT id) FROM news), (SELECT count(*) - count(DISTINCT created_at) FROM events)"
        ).fetchall()[0]
    finally:
        snap.close()
    passed = tuple(got[:2]) == tuple(expected) and got[2] == 0 and got[3] == 0
    return dg.AssetCheckResult(
        passed=passed,
        metadata={
            "snapshot": path.name,
            "articles": got[0],
            "events": got[1],
            "warehouse_articles": expected[0],
            "warehouse_events": expected[1],
            "duplicate_ids": got[2],
            "duplicate_cursors": got[3],
        },
    )


ALL_CHECKS.append(published_matches_warehouse)
