"""The write side of ingestion: ``raw_articles``, ``feed_fetches`` and ``feed_state``.

Rows arrive as polars frames and go to DuckDB through Arrow, each table written with one statement per
batch (single-row inserts run at about 300 rows a second; a frame of thousands takes milliseconds).
These functions do not open transactions: the caller wraps a whole run in ``warehouse.db.transaction``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

import duckdb
import polars as pl
import pyarrow as pa

ARTICLE_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.String(),
    "source_name": pl.String(),
    "feed_url": pl.String(),
    "url": pl.String(),
    "guid": pl.String(),
    "title": pl.String(),
    "summary": pl.String(),
    "content_html": pl.String(),
    "authors": pl.List(pl.String()),
    "categories": pl.List(pl.String()),
    "image_url": pl.String(),
    "published_at": pl.Datetime("us"),
    "date_inferred": pl.Boolean(),
    "published_offset": pl.Int16(),  # minutes east of UTC the feed wrote the date in; null: not said, or inferred
    "fetched_at": pl.Datetime("us"),
    "updated_at": pl.Datetime("us"),
    "language": pl.String(),
    "content_hash": pl.String(),
}
ARTICLE_COLUMNS = list(ARTICLE_SCHEMA)

FETCH_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "feed_name": pl.String(),
    "feed_url": pl.String(),
    "started_at": pl.Datetime("us"),
    "duration_ms": pl.Float64(),
    "http_status": pl.Int32(),
    "items_seen": pl.Int32(),
    "items_new": pl.Int32(),
    "items_updated": pl.Int32(),
    "not_modified": pl.Boolean(),
    "bytes": pl.Int64(),
    "error": pl.String(),
    "warning": pl.String(),
}

STATE_SCHEMA: dict[str, pl.DataType] = {
    "feed_url": pl.String(),
    "etag": pl.String(),
    "last_modified": pl.String(),
    "updated_at": pl.Datetime("us"),
}

# Columns an update may change. id, source_name, feed_url and fetched_at stay as first seen; a date we
# inferred (fetch time) never replaces a real one, and a real one replaces an inferred one. A real date alone (the
# text unchanged) is a publisher's correction when it is earlier, or later but still hours before the fetch and
# before the item was first fetched; one within hours of the fetch is not: some feeds stamp every item with the
# time of the request (or of any edit, or of a cache's build), and their old news would come back as new. Only the source that
# first brought an article (its feed URL, or its name when the feed moved) updates it: a syndicated copy in
# another feed, read while the first feed answered 304 or had dropped the item, would put its own date and text on
# the original, and the row would flip between the two with every change of either feed.
def _same_source(stored: str, incoming: str) -> str:
    return f"({stored}.feed_url = {incoming}.feed_url OR {stored}.source_name = {incoming}.source_name)"


STAMP_HOURS = 6  # a later date alone this close to the fetch may be the feed's clock, not a correction
_CORRECTED_DATE = ("(NOT {stored}.date_inferred AND NOT {incoming}.date_inferred "
                      "AND {incoming}.published_at IS DISTINCT FROM {stored}.published_at "
                      "AND ({incoming}.published_at < {stored}.published_at "
                      f"OR ({{incoming}}.published_at < {{incoming}}.fetched_at - INTERVAL {STAMP_HOURS} HOUR "
                      # a real publication time is never after we first saw the item (a cache's build time is)
                      "AND {incoming}.published_at < {stored}.fetched_at)))")

_MERGE_SQL = f"""
INSERT INTO raw_articles ({", ".join(ARTICLE_COLUMNS)})
SELECT {", ".join(ARTICLE_COLUMNS)} FROM incoming_articles
ON CONFLICT (id) DO UPDATE SET
    url = excluded.url,
    guid = excluded.guid,
    title = excluded.title,
    summary = excluded.summary,
    content_html = excluded.content_html,
    authors = excluded.authors,
    categories = excluded.categories,
    image_url = excluded.image_url,
    published_at = CASE WHEN excluded.date_inferred THEN raw_articles.published_at ELSE excluded.published_at END,
    date_inferred = raw_articles.date_inferred AND excluded.date_inferred,
    published_offset = CASE WHEN excluded.date_inferred THEN raw_articles.published_offset
                            ELSE excluded.published_offset END,
    language = excluded.language,
    content_hash = excluded.content_hash,
    updated_at = excluded.updated_at
WHERE {_same_source("raw_articles", "excluded")}
  AND (raw_articles.content_hash <> excluded.content_hash
       OR (raw_articles.date_inferred AND NOT excluded.date_inferred)
       OR {_CORRECTED_DATE.format(stored="raw_articles", incoming="excluded")}
       OR raw_articles.url IS DISTINCT FROM excluded.url)
"""


_ARROW_TYPES = {
    pl.String(): pa.string(),
    pl.List(pl.String()): pa.list_(pa.string()),
    pl.Datetime("us"): pa.timestamp("us"),
    pl.Boolean(): pa.bool_(),
    pl.Int16(): pa.int16(),
}


def article_frame(columns: dict[str, list]) -> pl.DataFrame:
    """A frame in ``raw_articles`` shape from column lists (missing columns are an error).

    Built through Arrow: pyarrow converts Python lists (list columns included) several times faster
    than polars' own constructor, and the frame then shares Arrow's memory.
    """
    arrays = {c: pa.array(columns[c], type=_ARROW_TYPES[t]) for c, t in ARTICLE_SCHEMA.items()}
    return pl.from_arrow(pa.table(arrays))  # type: ignore[return-value]


def stored_sources(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, tuple[str, str]]:
    """``{id: (feed_url, source_name)}`` of the stored articles among ``ids``: the source that first brought each."""
    if not ids:
        return {}
    rows = con.execute("SELECT id, feed_url, source_name FROM raw_articles WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                       [ids]).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


class MovedAsk(NamedTuple):
    """An item new by its link: is it stored under another link by its source (``stored_as``)?"""

    aid: str
    feed_url: str
    source_name: str
    guid: str | None
    by_guid: bool  # false: the guid is not the item's own (the feed gave it to another item too)
    published_at: datetime | None  # None: inferred
    variants: list[str]  # ids of the link's variants


def stored_as(con: duckdb.DuckDBPyConnection, asks: list[MovedAsk]) -> dict[str, str]:
    """``{new id: stored id}``: for each ask, the one row of the same source (feed URL or name) with the guid and
    the same real publication time (a guid alone is not enough: some feeds number their items, and a daily column
    repeats its title), or else the one row under a variant of the link whose guid does not differ (guids that
    are links move with the link); none when several match."""
    if not asks:
        return {}
    frame = pl.DataFrame(
        [tuple(a) for a in asks], orient="row",
        schema={"aid": pl.String(), "feed_url": pl.String(), "source_name": pl.String(), "guid": pl.String(),
                "by_guid": pl.Boolean(), "published_at": pl.Datetime("us"), "variants": pl.List(pl.String())},
    )
    con.register("moved_asks", frame.to_arrow())
    try:
        rows = con.execute(f"""
            WITH by_guid AS (
                SELECT q.aid, r.id FROM moved_asks q JOIN raw_articles r ON r.guid = q.guid
                WHERE q.by_guid AND {_same_source("r", "q")} AND NOT r.date_inferred AND r.published_at = q.published_at
            ), by_link AS (
                SELECT q.aid, r.id
                FROM (SELECT aid, feed_url, source_name, guid, unnest(variants) AS vid FROM moved_asks) q
                JOIN raw_articles r ON r.id = q.vid
                WHERE {_same_source("r", "q")} AND (r.guid IS NULL OR q.guid IS NULL OR r.guid = q.guid
                                                     OR (r.guid ^@ 'http' AND q.guid ^@ 'http'))  -- links: moved too
            ), picked AS (
                SELECT aid, list(DISTINCT id) AS ids, 1 AS rank FROM by_guid GROUP BY aid
                UNION ALL SELECT aid, list(DISTINCT id), 2 FROM by_link GROUP BY aid
            )
            SELECT aid, arg_min(ids, rank) FROM picked GROUP BY aid""").fetchall()
    finally:
        con.unregister("moved_asks")
    return {aid: ids[0] for aid, ids in rows if len(ids) == 1}


def merge_articles(con: duckdb.DuckDBPyConnection, frame: pl.DataFrame) -> tuple[set[str], set[str]]:
    """Upsert a batch (ids must be unique in it); returns ``(new ids, updated ids)``.

    A row is updated only from the source that first brought it, and only when its ``content_hash`` changed or
    a real date arrives for an inferred one or a publisher's correction of a real one (``_CORRECTED_DATE``), so
    re-ingesting the same feed moves nothing.
    """
    if frame.is_empty():
        return set(), set()
    if frame["id"].n_unique() != frame.height:
        raise ValueError("merge_articles: ids in a batch must be unique (deduplicate before merging)")
    con.register("incoming_articles", frame.select(ARTICLE_COLUMNS).to_arrow())
    try:
        changes = con.execute(
            f"""
            SELECT i.id, r.id IS NULL
            FROM incoming_articles i LEFT JOIN raw_articles r ON r.id = i.id
            WHERE r.id IS NULL
               OR ({_same_source("r", "i")} AND (r.content_hash <> i.content_hash OR (r.date_inferred AND NOT i.date_inferred)
                                                  OR {_CORRECTED_DATE.format(stored="r", incoming="i")}
                                                  OR r.url IS DISTINCT FROM i.url))
            """
        ).fetchall()
        con.execute(_MERGE_SQL)
    finally:
        con.unregister("incoming_articles")
    new = {row[0] for row in changes if row[1]}
    updated = {row[0] for row in changes if not row[1]}
    return new, updated


def load_feed_state(
    con: duckdb.DuckDBPyConnection, urls: Iterable[str]
) -> dict[str, tuple[str | None, str | None]]:
    """``{feed_url: (etag, last_modified)}`` remembered from the last good fetch of each URL."""
    urls = list(dict.fromkeys(urls))
    if not urls:
        return {}
    rows = con.execute(
        "SELECT feed_url, etag, last_modified FROM feed_state WHERE feed_url IN (SELECT unnest(?))", [urls]
    ).fetchall()
    return {url: (etag, last_modified) for url, etag, last_modified in rows}


def save_feed_state(con: duckdb.DuckDBPyConnection, frame: pl.DataFrame) -> None:
    """Upsert the validators of feeds fetched and parsed in this run."""
    if frame.is_empty():
        return
    con.register("incoming_state", frame.select(list(STATE_SCHEMA)).to_arrow())
    try:
        con.execute(
            """
            INSERT INTO feed_state (feed_url, etag, last_modified, updated_at)
            SELECT feed_url, etag, last_modified, updated_at FROM incoming_state
            ON CONFLICT (feed_url) DO UPDATE SET
                etag = excluded.etag, last_modified = excluded.last_modified, updated_at = excluded.updated_at
            """
        )
    finally:
        con.unregister("incoming_state")


def record_fetches(con: duckdb.DuckDBPyConnection, frame: pl.DataFrame) -> None:
    """Append one health row per feed of a run."""
    if frame.is_empty():
        return
    cols = list(FETCH_SCHEMA)
    con.register("incoming_fetches", frame.select(cols).to_arrow())
    try:
        con.execute(
            f"INSERT INTO feed_fetches ({', '.join(cols)}) SELECT {', '.join(cols)} FROM incoming_fetches"
        )
    finally:
        con.unregister("incoming_fetches")
