"""Bringing stories up to date: the new articles (in no story yet) are embedded once and grouped, in publication
order, against the stories with an article in the window around them; nothing older is read."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import numpy as np
import polars as pl

from pipeline.stories.cluster import Clusterer, Item
from pipeline.stories.features import (
    ENCODER_VERSION,
    embed,
    embed_sentences,
    names,
    numbers,
    price_piece,
    sentences,
    story_text,
    words,
)
from warehouse import stories as ws
from warehouse.db import transaction, utcnow

Embed = Callable[[list[str]], Any]


@dataclass
class StoriesReport:
    new: int  # articles grouped by this run
    embedded: int  # embeddings computed (others were stored already)
    seeded: int  # grouped articles of the window compared with
    touched: int  # stories created or grown
    stories: int  # stories afterwards
    resynced: int = 0  # stories recomputed because an article of theirs changed (re-dated, removed, rescored)
    merged: int = 0  # stories merged into another (a new article reports both), their ids retired


def _matrix(frame: pl.DataFrame, column: str) -> np.ndarray:
    if frame.height == 0:
        return np.zeros((0, 0), dtype=np.float32)
    return frame[column].explode().to_numpy().astype(np.float32).reshape(frame.height, -1)


def _items(frame: pl.DataFrame, times: list[datetime], tickers: list[list[str]], titles: list[str],
           summaries: list[str | None], sources: list[str | None]) -> list[Item]:
    text, title = _matrix(frame, "text_vec"), _matrix(frame, "title_vec")
    dim = text.shape[1] if text.size else 0
    sents = [np.asarray(v, dtype=np.float32).reshape(-1, dim) if v and dim else None
             for v in frame["sent_vecs"].to_list()] if frame.height else []
    out = []
    for k, (aid, at, tk, nums, tnums) in enumerate(zip(
            frame["article_id"].to_list(), times, tickers, frame["numbers"].to_list(),
            frame["title_numbers"].to_list(), strict=True)):
        lede = story_text(titles[k], summaries[k])
        out.append(Item(aid, at, text[k], title[k], frozenset(tk), frozenset(nums), frozenset(tnums),
                        sources[k] or "", words(titles[k]), words(lede), names(lede), price_piece(titles[k], lede),
                        sents[k]))
    return out


# Articles embedded between two write sessions by ``refresh_stories_released``: at most this much work is lost to a
# kill, and other processes can open the warehouse between batches (about 3-25 s of encoder time on this machine).
EMBED_BATCH = 256

Session = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]


def _to_embed(con: duckdb.DuckDBPyConnection, c: Clusterer,
              encoder: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The new articles (``ws.new_articles``), and the rows to embed: those of them without a current embedding
    (``ws.stale_embeddings``), then the grouped articles of the window around them stored by another encoder."""
    new = ws.new_articles(con)
    want = set(ws.stale_embeddings(con, [r[0] for r in new], encoder))
    rows = [r for r in new if r[0] in want]
    if new:  # grouped articles the new ones will meet, stored by an older encoder version: embedded again too
        rows += ws.article_texts(con, ws.missing_embeddings(
            con, ws.window_ids(con, *ws.reach(c.window, new[0][1], new[-1][1])), encoder))
    return new, rows


def _embedded(rows: list[tuple[Any, ...]], embed_fn: Embed) -> list[tuple[Any, ...]]:
    """``ws.save_embeddings`` rows for ``rows`` (``new_articles``' columns): compute only, no warehouse."""
    text = embed_fn([story_text(r[2], r[3]) for r in rows])
    title = embed_fn([r[2] for r in rows])
    sents = embed_sentences([sentences(r[2], r[3]) for r in rows], embed_fn)
    return [(r[0], [float(x) for x in text[k]], [float(x) for x in title[k]],
             sorted(numbers(story_text(r[2], r[3]))), sorted(numbers(r[2])),
             [float(x) for x in np.asarray(sents[k]).reshape(-1)])
            for k, r in enumerate(rows)]


def refresh_stories(con: duckdb.DuckDBPyConnection, embed_fn: Embed = embed, encoder: str = ENCODER_VERSION,
                    now: datetime | None = None, clusterer: Clusterer | None = None) -> StoriesReport:
    """Everything on one open connection: what is left to embed is embedded while it is held (the asset embeds
    first without it, ``refresh_stories_released``, and leaves this only what changed meanwhile)."""
    now = now or utcnow()
    c = clusterer or Clusterer()
    new, rows = _to_embed(con, c, encoder)
    if rows:  # outside the grouping transaction: computing them is the slow part, and they stay valid
        vecs = _embedded(rows, embed_fn)
        with transaction(con):
            ws.save_embeddings(con, vecs, encoder, now)
    seeded = touched = merged = 0
    with transaction(con):
        resynced = ws.resync(con, now)  # first: the window below reads the grouped articles' times
        if new:
            lo, hi = ws.reach(c.window, new[0][1], new[-1][1])
            seed = ws.recent(con, lo, hi)
            c.seed(_items(seed, seed["published_at"].to_list(), seed["tickers"].to_list(), seed["title"].to_list(),
                          seed["summary"].to_list(), seed["source_name"].to_list()), seed["story_id"].to_list(),
                   seed["story_first_seen"].to_list())
            seeded = seed.height
            vecs = ws.embeddings(con, [r[0] for r in new])
            assert vecs.height == len(new), "every new article has a stored embedding"
            items = _items(vecs, [r[1] for r in new], [r[4] for r in new], [r[2] for r in new],
                           [r[3] for r in new], [r[5] for r in new])
            assigned = [(it.id, c.add(it), it.published_at) for it in items]
            retired = c.retired()  # a story begun and merged within this run was never stored: nothing to move
            ws.merge_stories(con, retired, now)
            touched = ws.save_assignments(con, [(a, c.resolve(sid), t) for a, sid, t in assigned], now)
            merged = len(retired)
        count = con.execute("SELECT count(*) FROM stories").fetchall()[0][0]
    return StoriesReport(len(new), len(rows), seeded, touched, int(count), resynced, merged)


def refresh_stories_released(session: Session, embed_fn: Embed = embed, encoder: str = ENCODER_VERSION,
                             now: datetime | None = None, clusterer: Clusterer | None = None,
                             batch: int | None = None) -> StoriesReport:
    """``refresh_stories`` without holding the warehouse while the encoder runs. ``session()`` opens it (a context
    manager that closes it, as ``WarehouseResource.connect``): once to read what to embed, then once per batch of
    ``batch`` (default ``EMBED_BATCH``) articles embedded, to store them in a short transaction, and last for the
    grouping. Between sessions the file is closed, so other processes (analysts reading it) can open it; a batch
    stored is kept if the run is then stopped or killed, and the next run embeds only what is left.

    Another pipeline writer cannot run meanwhile (the ``duckdb_writer`` pool holds one asset at a time for the whole
    step). Whatever changed anyway between the sessions stays correct: a vector is stored only when the article
    still has the title and summary it was computed from (checked in the storing transaction, whose time is its
    ``computed_at``), and the grouping session embeds what is still missing or stale, holding the file as
    ``refresh_stories`` does."""
    c = clusterer or Clusterer()
    size = batch or EMBED_BATCH
    with session() as con:
        _, rows = _to_embed(con, c, encoder)
    stored = 0
    for k in range(0, len(rows), size):
        part = rows[k:k + size]
        vecs = _embedded(part, embed_fn)
        with session() as con, transaction(con):
            current = {r[0]: (r[2], r[3]) for r in ws.article_texts(con, [r[0] for r in part])}
            keep = [v for v, r in zip(vecs, part, strict=True) if current.get(r[0]) == (r[2], r[3])]
            ws.save_embeddings(con, keep, encoder, now or utcnow())
        stored += len(keep)
    with session() as con:
        report = refresh_stories(con, embed_fn, encoder, now, c)
    report.embedded += stored
    return report
