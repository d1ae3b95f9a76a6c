"""`articles` enrichment against a real warehouse file, with the real sentiment model and tagger."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from pipeline.enrich import enrich_articles, load_crypto_assets
from warehouse import db


def _raw(con, rows: list[tuple[str, str, str]]) -> None:
    for article_id, title, summary in rows:
        con.execute(
            "INSERT OR REPLACE INTO raw_articles (id, source_name, feed_url, url, guid, title, summary, content_html,"
            " authors, categories, image_url, published_at, date_inferred, fetched_at, updated_at, language,"
            " content_hash) VALUES (?, 'Test', 'http://127.0.0.1/f', ?, NULL, ?, ?, NULL, [], [],"
            " NULL, TIMESTAMP '2026-11-01 10:00:00', false, TIMESTAMP '2026-11-01 10:05:00',"
            " TIMESTAMP '2026-11-01 10:05:00', 'en', md5(? || ?))",
            [article_id, f"https://news.example/{article_id}", title, summary, title, summary],
        )


@pytest.fixture(scope="module")
def model(sentiment_cache: Path):
    from models.sentiment import load_model

    return load_model(cache_dir=sentiment_cache)


@pytest.fixture(scope="module")
def tagger():
    from models.tagging import get_tagger

    return get_tagger()


@dataclass
class Relabelled:
    """The real model under another version string: what a newly shipped model looks like to the asset."""

    inner: object
    version: str

    def predict(self, texts):
        return self.inner.predict(texts)


def test_articles_incremental_and_rescored_on_new_version(tmp_path: Path, model, tagger) -> None:
    from models.sentiment import article_text
    from models.tagging import load_registry

    con = db.connect(tmp_path / "w.duckdb")
    load_crypto_assets(con, load_registry())
    _raw(
        con,
        [
            ("a1", "Bitcoin soars to record high as ETF inflows surge", "Investors pile in."),
            ("a2", "Hackers drain $200 million from Ethereum bridge in major exploit", "Funds were stolen."),
            ("a3", "Solana developers publish the agenda for next week's call", ""),
        ],
    )
    first = enrich_articles(con, model, article_text, tagger, now=datetime(2026, 11, 1, 11))
    assert (first.synced, first.scored, first.tagged) == (3, 3, 3)
    rows = dict(con.execute("SELECT id, sentiment FROM articles").fetchall())
    assert rows["a1"] == "positive" and rows["a2"] == "negative"
    tickers = dict(con.execute("SELECT id, tickers FROM articles").fetchall())
    assert tickers["a1"] == ["BTC"] and "ETH" in tickers["a2"] and tickers["a3"] == ["SOL"]
    assert con.execute("SELECT count(*) FROM article_tickers").fetchall()[0][0] >= 3

    again = enrich_articles(con, model, article_text, tagger)
    assert (again.synced, again.scored, again.tagged) == (0, 0, 0)

    # A changed title re-scores that article only, and never duplicates it.
    _raw(con, [("a3", "Solana network suffers a five-hour outage, validators scramble", "")])
    changed = enrich_articles(con, model, article_text, tagger)
    assert (changed.synced, changed.scored, changed.tagged) == (0, 1, 1)
    assert con.execute("SELECT count(*), max(sentiment) FILTER (WHERE id = 'a3') FROM articles").fetchall()[0] == (
        3,
        "negative",
    )

    # A new model version re-scores everything as a backfill, without duplicating rows.
    backfill = enrich_articles(con, Relabelled(model, "next-version"), article_text, tagger)
    assert backfill.scored == 3 and backfill.tagged == 0
    assert con.execute("SELECT count(*), count(DISTINCT model_version) FROM articles").fetchall()[0] == (3, 1)
    con.close()


def test_enrichment_is_one_transaction(tmp_path: Path, model) -> None:
    """A tagger that crashes mid-run leaves `articles` as it was (scores included)."""
    from models.sentiment import article_text

    class Broken:
        version = "broken"

        def tag(self, title: str, summary: str = "", published_at=None):
            raise RuntimeError("tagger crashed")

    con = db.connect(tmp_path / "w.duckdb")
    _raw(con, [("a1", "Ether rallies 8% as staking demand grows", "")])
    with pytest.raises(RuntimeError, match="tagger crashed"):
        enrich_articles(con, model, article_text, Broken())
    assert con.execute("SELECT count(*) FROM articles").fetchall()[0][0] == 0
    con.close()


def test_a_corrected_date_reaches_articles_without_rescoring(tmp_path: Path, model, tagger) -> None:
    from models.sentiment import article_text

    con = db.connect(tmp_path / "w.duckdb")
    _raw(con, [("a1", "Bitcoin soars to record high as ETF inflows surge", "")])
    # first seen undated: published_at is the fetch time, flagged as inferred
    con.execute("UPDATE raw_articles SET published_at = fetched_at, date_inferred = true WHERE id = 'a1'")
    enrich_articles(con, model, article_text, tagger)
    assert con.execute("SELECT published_at, date_inferred FROM articles").fetchall() == [
        (datetime(2026, 11, 1, 10, 5), True)
    ]
    # a later fetch carried the real date (same content): the date follows, the scores stay
    con.execute("UPDATE raw_articles SET published_at = TIMESTAMP '2026-11-01 09:30:00', date_inferred = false")
    again = enrich_articles(con, model, article_text, tagger)
    assert (again.scored, again.tagged) == (0, 0)
    assert con.execute("SELECT published_at, date_inferred, sentiment FROM articles").fetchall() == [
        (datetime(2026, 11, 1, 9, 30), False, "positive")
    ]
    con.close()


def test_migration_backfills_date_inferred_on_an_existing_warehouse(tmp_path: Path) -> None:
    import duckdb

    path = tmp_path / "old.duckdb"
    old = duckdb.connect(str(path))  # the schema as it was before migration 0004
    old.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP)")
    for version, name, sql in db.migrations():
        if version < 4:
            old.execute(sql)
            old.execute("INSERT INTO schema_migrations VALUES (?, ?, now()::TIMESTAMP)", [version, name])
    _raw(old, [("a1", "Undated headline", ""), ("a2", "Dated headline", "")])
    old.execute("UPDATE raw_articles SET date_inferred = true WHERE id = 'a1'")
    old.execute(
        "INSERT INTO articles (id, source_name, feed_url, url, title, summary, content_html, authors, categories,"
        " image_url, published_at, fetched_at, language, content_hash) SELECT id, source_name, feed_url, url, title,"
        " summary, content_html, authors, categories, image_url, published_at, fetched_at, language, content_hash"
        " FROM raw_articles"
    )
    old.close()
    con = db.connect(path)
    assert con.execute("SELECT id, date_inferred FROM articles ORDER BY id").fetchall() == [("a1", True), ("a2", False)]
    con.close()


def test_each_ticker_gets_its_own_sentiment_and_keeps_it_until_rescored(tmp_path: Path, model, tagger) -> None:
    from models.sentiment import article_text

    con = db.connect(tmp_path / "w.duckdb")
    _raw(con, [("a1", "Bitcoin soars to record high as ETF inflows surge", ""),
               ("a2", "Bitcoin rallies to a record while Ether slides after a bridge hack", "")])
    report = enrich_articles(con, model, article_text, tagger)
    rows = con.execute("SELECT article_id, ticker, sentiment, sentiment_score FROM article_tickers "
                       "ORDER BY article_id, ticker").fetchall()
    assert [(r[0], r[1]) for r in rows] == [("a1", "BTC"), ("a2", "BTC"), ("a2", "ETH")]
    assert all(r[2] in ("positive", "neutral", "negative") and -1 <= r[3] <= 1 for r in rows)
    # one asset: the article's own sentiment; several: the model asked about each, not the headline's copy
    assert rows[0][2:] == tuple(con.execute("SELECT sentiment, sentiment_score FROM articles WHERE id = 'a1'").fetchone())
    asked = model.predict(["Ethereum: Bitcoin rallies to a record while Ether slides after a bridge hack"])[0]
    assert rows[2][2:] == (asked.label, asked.score)
    assert report.tickers_scored == 3
    assert enrich_articles(con, model, article_text, tagger).tickers_scored == 0
    # a new model re-scores the articles and so their tickers
    assert enrich_articles(con, Relabelled(model, "next-version"), article_text, tagger).tickers_scored == 3
    con.close()


def test_tickers_are_the_symbols_of_the_article_s_day(tmp_path: Path, model, tagger) -> None:
    from models.sentiment import article_text

    con = db.connect(tmp_path / "w.duckdb")
    _raw(con, [("old", "Polygon and Arbitrum One Join Forces on Bridge Security", ""),
               ("new", "Polygon and Arbitrum One Join Forces on Bridge Security Again", "")])
    con.execute("UPDATE raw_articles SET published_at = TIMESTAMP '2021-11-19 09:00:00' WHERE id = 'old'")
    enrich_articles(con, model, article_text, tagger)
    tickers = dict(con.execute("SELECT id, tickers FROM articles").fetchall())
    assert tickers["old"] == ["MATIC"]  # 2021: Polygon's token was MATIC, and ARB did not trade yet
    assert sorted(tickers["new"]) == ["ARB", "POL"]
    con.close()


def test_a_model_built_before_the_weights_changed_is_built_again(built_models: Path) -> None:
    """A long-lived process that built its model before new weights were installed: the first prediction of a
    run builds it again from the files as they are, rather than failing every run until the process restarts."""
    import models.sentiment.model as sentiment

    model = sentiment.load_model(cache_dir=built_models)
    current = model.version
    model.version = "an older delta"  # what the process built before the weights changed on disk
    try:
        lazy = sentiment.OnFirstUse(cache_dir=built_models)
        assert lazy.version == current
        assert len(lazy.predict(["Bitcoin jumps 5% as ETF inflows return"])) == 1
        assert sentiment._cached is not model and sentiment._cached is not None
        assert sentiment._cached.version == current
    finally:
        model.version = current
