"""The write side of stories (tables in ``migrations/0009_stories.sql``); the grouping itself is
``pipeline.stories`` (it needs the encoder and numpy, which the warehouse package does not import)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb

NEW_SQL = """
SELECT a.id, a.published_at, a.title, a.summary, coalesce(a.tickers, []::VARCHAR[])
FROM articles a ANTI JOIN story_articles s ON s.article_id = a.id
ORDER BY a.published_at, a.id
"""

# The grouped articles whose publication time is within reach of the new ones, with what the grouping compares.
RECENT_SQL = """
SELECT s.article_id, s.published_at, s.story_id, e.text_vec, e.title_vec, coalesce(a.tickers, []::VARCHAR[]),
       e.numbers, e.title_numbers
FROM story_articles s JOIN article_embeddings e ON e.article_id = s.article_id JOIN articles a ON a.id = s.article_id
WHERE s.published_at >= ? AND s.published_at <= ?
ORDER BY s.published_at, s.article_id
"""

STORIES_SQL = """
INSERT OR REPLACE INTO stories
SELECT s.story_id, arg_min(a.title, (a.published_at, a.id)), min(a.published_at), max(a.published_at), count(*),
       count(DISTINCT a.source_name), avg(a.sentiment_score),
       coalesce(list_sort(list_distinct(flatten(list(coalesce(a.tickers, []::VARCHAR[]))))), []::VARCHAR[]),
       coalesce(list_sort(list_distinct(flatten(list(coalesce(a.topics, []::VARCHAR[]))))), []::VARCHAR[]),
       ?
FROM story_articles s JOIN articles a ON a.id = s.article_id
WHERE s.story_id IN (SELECT story_id FROM _touched)
GROUP BY s.story_id
"""


def new_articles(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    """Articles in no story yet, oldest first: ``(id, published_at, title, summary, tickers)``."""
    return con.execute(NEW_SQL).fetchall()


def missing_embeddings(con: duckdb.DuckDBPyConnection, ids: list[str], encoder: str) -> list[str]:
    if not ids:
        return []
    rows = con.execute(
        "SELECT unnest(?::VARCHAR[]) AS id EXCEPT SELECT article_id FROM article_embeddings WHERE encoder = ?",
        [ids, encoder],
    ).fetchall()
    return sorted(r[0] for r in rows)


def save_embeddings(con: duckdb.DuckDBPyConnection, rows: list[tuple[Any, ...]], encoder: str, now: datetime) -> None:
    """``rows``: ``(article_id, text_vec, title_vec, numbers, title_numbers)``."""
    con.executemany(
        "INSERT OR REPLACE INTO article_embeddings VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(r[0], encoder, r[1], r[2], r[3], r[4], now) for r in rows],
    )


def recent(con: duckdb.DuckDBPyConnection, lo: datetime, hi: datetime) -> list[tuple[Any, ...]]:
    return con.execute(RECENT_SQL, [lo, hi]).fetchall()


def embeddings(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, tuple[Any, ...]]:
    rows = con.execute(
        "SELECT article_id, text_vec, title_vec, numbers, title_numbers FROM article_embeddings "
        "WHERE article_id IN (SELECT unnest(?::VARCHAR[]))", [ids],
    ).fetchall()
    return {r[0]: r[1:] for r in rows}


def save_assignments(con: duckdb.DuckDBPyConnection, rows: list[tuple[str, str, datetime]], now: datetime) -> int:
    """Insert ``(article_id, story_id, published_at)`` and recompute the stories they touched; returns how many."""
    if not rows:
        return 0
    con.executemany("INSERT INTO story_articles VALUES (?, ?, ?, ?)", [(*r, now) for r in rows])
    con.execute("CREATE OR REPLACE TEMP TABLE _touched AS SELECT DISTINCT unnest(?::VARCHAR[]) AS story_id",
                [[r[1] for r in rows]])
    con.execute(STORIES_SQL, [now])
    touched = con.execute("SELECT count(*) FROM _touched").fetchall()[0][0]
    con.execute("DROP TABLE _touched")
    return int(touched)


def reach(window: timedelta, first: datetime, last: datetime) -> tuple[datetime, datetime]:
    """The publication times of grouped articles a batch of new articles spanning ``[first, last]`` can meet."""
    return first - window, last + window
