"""Bringing stories up to date: the new articles (in no story yet) are embedded once and grouped, in publication
order, against the stories with an article in the window around them; nothing older is read."""

from __future__ import annotations

from collections.abc import Callable
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


def refresh_stories(con: duckdb.DuckDBPyConnection, embed_fn: Embed = embed, encoder: str = ENCODER_VERSION,
                    now: datetime | None = None, clusterer: Clusterer | None = None) -> StoriesReport:
    now = now or utcnow()
    c = clusterer or Clusterer()
    new = ws.new_articles(con)
    want = set(ws.missing_embeddings(con, [r[0] for r in new], encoder))
    rows = [r for r in new if r[0] in want]
    if new:  # grouped articles the new ones will meet, stored by an older encoder version: embedded again too
        rows += ws.article_texts(con, ws.missing_embeddings(
            con, ws.window_ids(con, *ws.reach(c.window, new[0][1], new[-1][1])), encoder))
    if rows:  # outside the grouping transaction: computing them is the slow part, and they stay valid
        text = embed_fn([story_text(r[2], r[3]) for r in rows])
        title = embed_fn([r[2] for r in rows])
        sents = embed_sentences([sentences(r[2], r[3]) for r in rows], embed_fn)
        with transaction(con):
            ws.save_embeddings(con, [
                (r[0], [float(x) for x in text[k]], [float(x) for x in title[k]],
                 sorted(numbers(story_text(r[2], r[3]))), sorted(numbers(r[2])),
                 [float(x) for x in np.asarray(sents[k]).reshape(-1)])
                for k, r in enumerate(rows)
            ], encoder, now)
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
