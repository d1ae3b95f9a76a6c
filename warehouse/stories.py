"""The write side of stories (tables in ``migrations/0009_stories.sql``); the grouping itself is
``pipeline.stories`` (it needs the encoder and numpy, which the warehouse package does not import)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb
import polars as pl

# What the grouping needs of an article before it is embedded: (id, published_at, title, summary, tickers, source)
ARTICLE_COLUMNS = "a.id, a.published_at, a.title, a.summary, coalesce(a.tickers, []::VARCHAR[]), a.source_name"
NEW_SQL = f"""
SELECT {ARTICLE_COLUMNS}
FROM articles a ANTI JOIN story_articles s ON s.article_id = a.id
ORDER BY a.published_at, a.id
"""

# The grouped articles whose publication time is within reach of the new ones (story_articles has the time: the
# window is found without touching the vectors), with their story's first_seen (a merge keeps the story that
# began first, maybe before the window).
WINDOW_SQL = """
SELECT s.article_id, s.published_at, s.story_id, st.first_seen AS story_first_seen
FROM story_articles s LEFT JOIN stories st ON st.id = s.story_id
WHERE s.published_at >= ? AND s.published_at <= ?
ORDER BY s.published_at, s.article_id
"""

# What the grouping compares, for a list of ids. Looked up by key with literal ids (``_by_ids``): DuckDB answers an
# IN list of constants from the primary-key index, whereas a join with a list or a subquery reads every stored
# vector (0.25 s cold at 100,000 articles, against 0.04 s).
COMPARED_SQL = """
SELECT e.article_id, e.text_vec, e.title_vec, e.numbers, e.title_numbers, coalesce(e.sent_vecs, []) AS sent_vecs,
       coalesce(a.tickers, []::VARCHAR[]) AS tickers, a.title, a.summary, a.source_name
FROM article_embeddings e JOIN articles a ON a.id = e.article_id
WHERE e.article_id IN ({ids}) AND a.id IN ({ids})
"""
BY_IDS_CHUNK = 1000

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
    """Articles in no story yet, oldest first: ``(id, published_at, title, summary, tickers, source_name)``."""
    return con.execute(NEW_SQL).fetchall()


def window_ids(con: duckdb.DuckDBPyConnection, lo: datetime, hi: datetime) -> list[str]:
    """The grouped articles published in ``[lo, hi]``."""
    return [r[0] for r in con.execute(WINDOW_SQL, [lo, hi]).fetchall()]


def article_texts(con: duckdb.DuckDBPyConnection, ids: list[str]) -> list[tuple[Any, ...]]:
    """``new_articles``' columns for ``ids``: ``(id, published_at, title, summary, tickers, source_name)``."""
    if not ids:
        return []
    return con.execute(f"SELECT {ARTICLE_COLUMNS} FROM articles a WHERE a.id IN (SELECT unnest(?::VARCHAR[])) "
                       "ORDER BY a.published_at, a.id", [ids]).fetchall()


def missing_embeddings(con: duckdb.DuckDBPyConnection, ids: list[str], encoder: str) -> list[str]:
    if not ids:
        return []
    rows = con.execute(
        "SELECT unnest(?::VARCHAR[]) AS id EXCEPT SELECT article_id FROM article_embeddings WHERE encoder = ?",
        [ids, encoder],
    ).fetchall()
    return sorted(r[0] for r in rows)


def stale_embeddings(con: duckdb.DuckDBPyConnection, ids: list[str], encoder: str) -> list[str]:
    """Of ``ids`` (articles in no story yet), those to embed: no row by ``encoder``, or a row computed before the
    article last changed. A new title or summary is re-scored in the transaction that stores it (``enrich``), so
    ``enriched_at`` after ``computed_at`` may mean other text: a run stopped after embedding an article must not
    group it later by its old text. (Re-scored without an edit, it is embedded again: a few seconds, rarely.)"""
    if not ids:
        return []
    rows = con.execute(
        "SELECT i.id FROM (SELECT unnest(?::VARCHAR[]) AS id) i "
        "LEFT JOIN article_embeddings e ON e.article_id = i.id AND e.encoder = ? LEFT JOIN articles a ON a.id = i.id "
        "WHERE e.article_id IS NULL OR e.computed_at < a.enriched_at",
        [ids, encoder],
    ).fetchall()
    return sorted(r[0] for r in rows)


def save_embeddings(con: duckdb.DuckDBPyConnection, rows: list[tuple[Any, ...]], encoder: str, now: datetime) -> None:
    """``rows``: ``(article_id, text_vec, title_vec, numbers, title_numbers, sent_vecs)`` (sent_vecs flat)."""
    con.executemany(
        "INSERT OR REPLACE INTO article_embeddings (article_id, encoder, text_vec, title_vec, numbers, title_numbers, "
        "computed_at, sent_vecs) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(r[0], encoder, r[1], r[2], r[3], r[4], now, r[5]) for r in rows],
    )


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> pl.DataFrame:
    frame = pl.from_arrow(con.sql(sql, params=params).to_arrow_table())
    assert isinstance(frame, pl.DataFrame)
    return frame


def _by_ids(con: duckdb.DuckDBPyConnection, ids: list[str]) -> pl.DataFrame:
    """``COMPARED_SQL`` for ``ids`` (any order), in chunks of literal lists."""
    frames = []
    for k in range(0, len(ids), BY_IDS_CHUNK):
        lits = ",".join("'" + i.replace("'", "''") + "'" for i in ids[k:k + BY_IDS_CHUNK])
        frames.append(_frame(con, COMPARED_SQL.format(ids=lits), []))
    return pl.concat(frames) if frames else _frame(con, COMPARED_SQL.format(ids="NULL"), [])


# Frames, not tuples: a thousand vectors come out of DuckDB as Arrow columns far faster than as Python lists.
def recent(con: duckdb.DuckDBPyConnection, lo: datetime, hi: datetime) -> pl.DataFrame:
    """The grouped articles published in ``[lo, hi]``, oldest first. Columns: article_id, published_at, story_id,
    story_first_seen, text_vec, title_vec, numbers, title_numbers, sent_vecs, tickers, title, summary,
    source_name."""
    window = _frame(con, WINDOW_SQL, [lo, hi])
    found = _by_ids(con, window["article_id"].to_list())
    return window.join(found, on="article_id", how="inner", maintain_order="left")


def embeddings(con: duckdb.DuckDBPyConnection, ids: list[str]) -> pl.DataFrame:
    """The stored embeddings of ``ids`` (with what else the grouping compares), in the order of ``ids``."""
    order = pl.DataFrame({"article_id": ids}, schema={"article_id": pl.String})
    return order.join(_by_ids(con, ids), on="article_id", how="inner", maintain_order="left")


def merge_stories(con: duckdb.DuckDBPyConnection, merged: dict[str, str], now: datetime) -> None:
    """Move the articles of each retired story (a key of ``merged``) to the story it is part of now, remove the
    retired story and list it in ``story_merges``. The stories that grew are recomputed by ``save_assignments``
    (the article that bridged them joins each)."""
    if not merged:
        return
    pairs = list(merged.items())
    con.executemany("UPDATE story_articles SET story_id = ? WHERE story_id = ?", [(into, gone) for gone, into in pairs])
    con.executemany("UPDATE story_merges SET merged_into = ? WHERE merged_into = ?", [(into, gone) for gone, into in pairs])
    con.execute("DELETE FROM stories WHERE id IN (SELECT unnest(?::VARCHAR[]))", [[gone for gone, _ in pairs]])
    con.executemany("INSERT OR REPLACE INTO story_merges VALUES (?, ?, ?)", [(gone, into, now) for gone, into in pairs])


def save_assignments(con: duckdb.DuckDBPyConnection, rows: list[tuple[str, str, datetime]], now: datetime) -> int:
    """Insert ``(article_id, story_id, published_at)`` and recompute the stories they touched; returns how many."""
    if not rows:
        return 0
    frame = pl.DataFrame(rows, schema={"article_id": pl.String, "story_id": pl.String, "published_at": pl.Datetime("us")},
                         orient="row")
    con.register("_assigned", frame.to_arrow())
    try:
        con.execute("INSERT INTO story_articles SELECT article_id, story_id, published_at, ? FROM _assigned", [now])
    finally:
        con.unregister("_assigned")
    con.execute("CREATE OR REPLACE TEMP TABLE _touched AS SELECT DISTINCT unnest(?::VARCHAR[]) AS story_id",
                [[r[1] for r in rows]])
    con.execute(STORIES_SQL, [now])
    touched = con.execute("SELECT count(*) FROM _touched").fetchall()[0][0]
    con.execute("DROP TABLE _touched")
    return int(touched)


# Grouped articles that changed after their story was last computed: removed, re-dated (an inferred date replaced
# by the real one), or scored or tagged again. Their stories' times, title, counts and sentiment are recomputed.
CHANGED_SQL = """
SELECT s.article_id, a.published_at, s.story_id
FROM story_articles s JOIN stories st ON st.id = s.story_id LEFT JOIN articles a ON a.id = s.article_id
WHERE a.id IS NULL OR a.published_at <> s.published_at OR a.enriched_at > st.updated_at OR a.tagged_at > st.updated_at
"""


def resync(con: duckdb.DuckDBPyConnection, now: datetime) -> int:
    """Bring stories in step with their articles as they are now (``CHANGED_SQL``); returns how many changed.
    Articles keep their story; a story left with no article is removed."""
    changed = con.execute(CHANGED_SQL).fetchall()
    if not changed:
        return 0
    gone = [r[0] for r in changed if r[1] is None]
    if gone:
        con.execute("DELETE FROM story_articles WHERE article_id IN (SELECT unnest(?::VARCHAR[]))", [gone])
    redated = [(r[1], r[0]) for r in changed if r[1] is not None]
    if redated:
        con.executemany("UPDATE story_articles SET published_at = ? WHERE article_id = ?", redated)
    con.execute("CREATE OR REPLACE TEMP TABLE _touched AS SELECT DISTINCT unnest(?::VARCHAR[]) AS story_id",
                [[r[2] for r in changed]])
    con.execute(STORIES_SQL, [now])
    con.execute("DELETE FROM stories WHERE id IN (SELECT story_id FROM _touched) "
                "AND id NOT IN (SELECT story_id FROM story_articles)")
    touched = con.execute("SELECT count(*) FROM _touched").fetchall()[0][0]
    con.execute("DROP TABLE _touched")
    return int(touched)


def reach(window: timedelta, first: datetime, last: datetime) -> tuple[datetime, datetime]:
    """The publication times of grouped articles a batch of new articles spanning ``[first, last]`` can meet."""
    return first - window, last + window
