"""Bringing stories up to date: the new articles (in no story yet) are embedded once and grouped, in publication
order, against the stories with an article in the window around them; nothing older is read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import numpy as np

from pipeline.stories.cluster import Clusterer, Item
from pipeline.stories.features import ENCODER_VERSION, embed, numbers, story_text
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


def _item(article_id: str, at: datetime, tickers: list[str], vecs: tuple[Any, ...]) -> Item:
    text, title, nums, title_nums = vecs
    return Item(article_id, at, np.asarray(text, dtype=np.float32), np.asarray(title, dtype=np.float32),
                frozenset(tickers), frozenset(nums), frozenset(title_nums))


def refresh_stories(con: duckdb.DuckDBPyConnection, embed_fn: Embed = embed, encoder: str = ENCODER_VERSION,
                    now: datetime | None = None, clusterer: Clusterer | None = None) -> StoriesReport:
    now = now or utcnow()
    new = ws.new_articles(con)
    todo = ws.missing_embeddings(con, [r[0] for r in new], encoder)
    if todo:  # outside the grouping transaction: computing them is the slow part, and they stay valid
        want = set(todo)
        rows = [r for r in new if r[0] in want]
        text = embed_fn([story_text(r[2], r[3]) for r in rows])
        title = embed_fn([r[2] for r in rows])
        with transaction(con):
            ws.save_embeddings(con, [
                (r[0], [float(x) for x in text[k]], [float(x) for x in title[k]],
                 sorted(numbers(story_text(r[2], r[3]))), sorted(numbers(r[2])))
                for k, r in enumerate(rows)
            ], encoder, now)
    c = clusterer or Clusterer()
    seeded = 0
    touched = 0
    with transaction(con):
        if new:
            lo, hi = ws.reach(c.window, new[0][1], new[-1][1])
            seed = ws.recent(con, lo, hi)
            c.seed([_item(r[0], r[1], r[5], r[3:5] + r[6:8]) for r in seed], [r[2] for r in seed])
            seeded = len(seed)
            vecs = ws.embeddings(con, [r[0] for r in new])
            assigned = [(r[0], c.add(_item(r[0], r[1], r[4], vecs[r[0]])), r[1]) for r in new]
            touched = ws.save_assignments(con, assigned, now)
        count = con.execute("SELECT count(*) FROM stories").fetchall()[0][0]
    return StoriesReport(len(new), len(todo), seeded, touched, int(count))
