"""Enrichment of raw_articles into the curated `articles` table: sentiment, tickers, topics.

Pure orchestration (no dagster): the asset passes in the loaded model and tagger. Incremental: an article is
scored when it has no score for the current ``model_version`` (or its content changed), and tagged when it has no
tags for the current ``tagger_version``; each of its tickers then gets its own sentiment (``article_tickers``)
when the article was scored or tagged anew. All of one call is one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import duckdb
import polars as pl

from warehouse.crashpoints import crash_point
from warehouse.db import transaction, utcnow

RAW_COLUMNS = (
    "id, source_name, feed_url, url, title, summary, content_html, authors, categories, image_url, "
    "published_at, date_inferred, published_offset, fetched_at, language, content_hash"
)

# New articles come in; an article whose content changed is refreshed and loses its scores and tags
# (they are recomputed below). A corrected date (a later fetch found the real one) is copied without re-scoring.
# Unchanged articles are left alone.
SYNC_SQL = f"""
INSERT INTO articles ({RAW_COLUMNS})
SELECT {RAW_COLUMNS} FROM raw_articles
ON CONFLICT (id) DO UPDATE SET
    source_name = excluded.source_name, feed_url = excluded.feed_url, url = excluded.url,
    title = excluded.title, summary = excluded.summary, content_html = excluded.content_html,
    authors = excluded.authors, categories = excluded.categories, image_url = excluded.image_url,
    published_at = excluded.published_at, date_inferred = excluded.date_inferred,
    published_offset = excluded.published_offset, language = excluded.language,
    model_version = CASE WHEN articles.content_hash = excluded.content_hash THEN articles.model_version END,
    -- a moved link is tagged again: the tags' stamp (tagged_at) is what makes the next publish serve the new link
    tagger_version = CASE WHEN articles.content_hash = excluded.content_hash
                           AND articles.url IS NOT DISTINCT FROM excluded.url THEN articles.tagger_version END,
    content_hash = excluded.content_hash
WHERE articles.content_hash <> excluded.content_hash
   OR articles.published_at <> excluded.published_at
   OR articles.date_inferred IS DISTINCT FROM excluded.date_inferred
   OR articles.url IS DISTINCT FROM excluded.url
"""

CHUNK = 4096  # rows scored and written per step: bounds memory on a large backfill


class SentimentLike(Protocol):
    version: str

    def predict(self, texts: Sequence[str]) -> list[Any]: ...


class TaggerLike(Protocol):
    version: str

    def tag(self, title: str, summary: str = "", published_at: datetime | None = None) -> Any: ...


@dataclass
class EnrichReport:
    synced: int
    scored: int
    tagged: int
    tickers_scored: int
    model_version: str
    tagger_version: str


def _chunks(rows: list[tuple], size: int = CHUNK) -> Iterator[list[tuple]]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def _update_from(con: duckdb.DuckDBPyConnection, frame: pl.DataFrame, set_sql: str) -> None:
    """One set-based UPDATE from a polars frame (never row by row)."""
    con.register("_updates", frame.to_arrow())
    try:
        con.execute(f"UPDATE articles SET {set_sql} FROM _updates u WHERE articles.id = u.id")
    finally:
        con.unregister("_updates")


def score(
    con: duckdb.DuckDBPyConnection,
    model: SentimentLike,
    text_of: Callable[[str, str], str],
    now: datetime,
) -> int:
    todo = con.execute(
        "SELECT id, title, summary FROM articles WHERE model_version IS DISTINCT FROM ? ORDER BY id",
        [model.version],
    ).fetchall()
    for chunk in _chunks(todo):
        preds = model.predict([text_of(title, summary) for _, title, summary in chunk])
        frame = pl.DataFrame(
            {
                "id": [r[0] for r in chunk],
                "sentiment": [p.label for p in preds],
                "sentiment_score": [float(p.score) for p in preds],
                "prob_negative": [float(p.p_negative) for p in preds],
                "prob_neutral": [float(p.p_neutral) for p in preds],
                "prob_positive": [float(p.p_positive) for p in preds],
            }
        )
        frame = frame.with_columns(
            pl.lit(model.version).alias("model_version"), pl.lit(now).alias("enriched_at")
        )
        _update_from(
            con,
            frame,
            "sentiment = u.sentiment, sentiment_score = u.sentiment_score, prob_negative = u.prob_negative, "
            "prob_neutral = u.prob_neutral, prob_positive = u.prob_positive, model_version = u.model_version, "
            "enriched_at = u.enriched_at",
        )
        _forget_ticker_sentiment(con, [r[0] for r in chunk])
        crash_point("articles:scoring")
    return len(todo)


def tag(con: duckdb.DuckDBPyConnection, tagger: TaggerLike, now: datetime) -> int:
    todo = con.execute(
        "SELECT id, title, summary, published_at FROM articles WHERE tagger_version IS DISTINCT FROM ? ORDER BY id",
        [tagger.version],
    ).fetchall()
    for chunk in _chunks(todo):
        ids, tickers, topics = [], [], []
        long_rows: dict[str, list] = {"article_id": [], "ticker": [], "salience": [], "in_title": []}
        for article_id, title, summary, published_at in chunk:
            tags = tagger.tag(title, summary, published_at)  # the symbols of the article's day (MATIC in 2021)
            ids.append(article_id)
            tickers.append([h.symbol for h in tags.tickers])
            topics.append(list(tags.topics))
            for h in tags.tickers:
                long_rows["article_id"].append(article_id)
                long_rows["ticker"].append(h.symbol)
                long_rows["salience"].append(float(h.salience))
                long_rows["in_title"].append(bool(h.in_title))
        frame = pl.DataFrame(
            {"id": ids, "tickers": tickers, "topics": topics},
            schema={"id": pl.String, "tickers": pl.List(pl.String), "topics": pl.List(pl.String)},
        ).with_columns(pl.lit(tagger.version).alias("tagger_version"), pl.lit(now).alias("tagged_at"))
        _update_from(
            con,
            frame,
            "tickers = u.tickers, topics = u.topics, tagger_version = u.tagger_version, tagged_at = u.tagged_at",
        )
        id_frame = pl.DataFrame({"id": ids}, schema={"id": pl.String})
        con.register("_ids", id_frame.to_arrow())
        try:
            con.execute("DELETE FROM article_tickers WHERE article_id IN (SELECT id FROM _ids)")
        finally:
            con.unregister("_ids")
        if long_rows["article_id"]:
            con.register("_long", pl.DataFrame(long_rows).to_arrow())
            try:
                con.execute("INSERT INTO article_tickers (article_id, ticker, salience, in_title) "
                            "SELECT article_id, ticker, salience, in_title FROM _long")
            finally:
                con.unregister("_long")
    return len(todo)


def _forget_ticker_sentiment(con: duckdb.DuckDBPyConnection, ids: list[str]) -> None:
    """Re-scored articles get their tickers' sentiment again (``score_tickers``)."""
    con.register("_rescored", pl.DataFrame({"id": ids}, schema={"id": pl.String}).to_arrow())
    try:
        con.execute("UPDATE article_tickers SET sentiment = NULL, sentiment_score = NULL "
                    "WHERE article_id IN (SELECT id FROM _rescored)")
    finally:
        con.unregister("_rescored")


def score_tickers(
    con: duckdb.DuckDBPyConnection,
    model: SentimentLike,
    text_of: Callable[[str, str], str],
    name_of: Callable[[str], str],
) -> int:
    """Each ticker's own sentiment, for the tickers that have none. An article naming one asset gives it the
    article's sentiment; an article naming several asks the model about each ("Ethereum: BTC rallies as ETH
    slides")."""
    from models.sentiment.data import asset_text

    todo = con.execute(
        """SELECT t.article_id, t.ticker, a.title, a.summary, a.sentiment, a.sentiment_score,
                  count(*) OVER (PARTITION BY t.article_id) AS n
           FROM article_tickers t JOIN articles a ON a.id = t.article_id
           WHERE t.sentiment IS NULL AND a.sentiment IS NOT NULL
           ORDER BY t.article_id, t.ticker"""
    ).fetchall()
    for chunk in _chunks(todo):
        several = [r for r in chunk if r[6] > 1]
        preds = iter(model.predict([asset_text(name_of(r[1]), text_of(r[2], r[3])) for r in several]))
        labels, scores = [], []
        for r in chunk:
            if r[6] > 1:
                p = next(preds)
                labels.append(p.label)
                scores.append(float(p.score))
            else:
                labels.append(r[4])
                scores.append(float(r[5]))
        frame = pl.DataFrame({"article_id": [r[0] for r in chunk], "ticker": [r[1] for r in chunk],
                              "sentiment": labels, "sentiment_score": scores})
        con.register("_ticker_sentiment", frame.to_arrow())
        try:
            con.execute("UPDATE article_tickers SET sentiment = u.sentiment, sentiment_score = u.sentiment_score "
                        "FROM _ticker_sentiment u WHERE article_tickers.article_id = u.article_id "
                        "AND article_tickers.ticker = u.ticker")
        finally:
            con.unregister("_ticker_sentiment")
    return len(todo)


def enrich_articles(
    con: duckdb.DuckDBPyConnection,
    model: SentimentLike,
    text_of: Callable[[str, str], str],
    tagger: TaggerLike,
    now: datetime | None = None,
) -> EnrichReport:
    now = now or utcnow()
    with transaction(con):
        before = con.execute("SELECT count(*) FROM articles").fetchall()[0][0]
        con.execute(SYNC_SQL)
        after = con.execute("SELECT count(*) FROM articles").fetchall()[0][0]
        scored = score(con, model, text_of, now)
        tagged = tag(con, tagger, now)
        name_of = getattr(tagger, "name_of", str)
        tickers_scored = score_tickers(con, model, text_of, name_of)
    return EnrichReport(
        synced=after - before, scored=scored, tagged=tagged, tickers_scored=tickers_scored,
        model_version=model.version, tagger_version=tagger.version,
    )


def load_crypto_assets(con: duckdb.DuckDBPyConnection, assets: Sequence[Any]) -> int:
    """Replace the `crypto_assets` table with the registry (one transaction)."""
    frame = pl.DataFrame(
        {
            "symbol": [a.symbol for a in assets],
            "name": [a.name for a in assets],
            "aliases": [list(a.aliases) for a in assets],
            "kind": [a.kind for a in assets],
            "ambiguous": [bool(a.ambiguous) for a in assets],
            "former_symbols": [list(a.former_symbols) for a in assets],
            "since": [a.since for a in assets],
            "renamed": [a.renamed for a in assets],
        },
        schema={
            "symbol": pl.String,
            "name": pl.String,
            "aliases": pl.List(pl.String),
            "kind": pl.String,
            "ambiguous": pl.Boolean,
            "former_symbols": pl.List(pl.String),
            "since": pl.Date,
            "renamed": pl.Date,
        },
    )
    with transaction(con):
        con.execute("DELETE FROM crypto_assets")
        con.register("_assets", frame.to_arrow())
        try:
            con.execute("INSERT INTO crypto_assets BY NAME SELECT * FROM _assets")
        finally:
            con.unregister("_assets")
    return frame.height
