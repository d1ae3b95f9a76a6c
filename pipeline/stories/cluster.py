"""Grouping articles into stories, one article at a time in publication order.

An article joins the story holding its most likely "same story" article published within ``WINDOW`` of it, when
that probability reaches the pair model's threshold; otherwise it starts a story of its own (its id derives from
that first article's id, so it never changes when others join). The probability comes from a logistic model over
what the two share (``pipeline.stories.pairs``), learned from the dev pairs of ``models/eval/story_pairs.jsonl``
only (docs/stories.md).

Single link against the story's members in the window (not a centroid): a story told by a wire and re-told by
others drifts in wording, and its newest articles are the ones a re-post resembles most. Incremental: only the
stories with an article in the window are candidates, so the cost grows with the new articles.

Bridging: when the new article is also surely the same as an article of another story (a probability of at least
the threshold plus ``MERGE_MARGIN``), the two stories are one news reported twice before anything linked them:
they merge into the one first seen (its stored ``first_seen`` when seeded, else its earliest article), and the
other's id is retired (``retired()``). On the dev pairs (nested cross-validation) this kept precision and raised
recall by 0.04 (docs/stories.md).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from pipeline.stories import pairs
from warehouse.db import naive_utc

WINDOW = timedelta(hours=pairs.WINDOW_HOURS)
MERGE_MARGIN = 0.10  # chosen on the dev pairs among 0.05, 0.10 and 0.15 (docs/stories.md)
# A story spans at most this, first article to last: single link lets look-alike reports (a price bot's daily
# "BTC up 2% as ...") chain one story over weeks, though a story is one news reported within the window.
MAX_SPAN = timedelta(hours=2 * pairs.WINDOW_HOURS)
ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def story_id(first_article_id: str) -> str:
    """``st_`` + 20 characters of [A-Za-z0-9], derived from the story's first article."""
    n = int.from_bytes(hashlib.sha256(f"story:{first_article_id}".encode()).digest(), "big")
    out = []
    for _ in range(20):
        n, r = divmod(n, len(ID_CHARS))
        out.append(ID_CHARS[r])
    return "st_" + "".join(out)


def _seconds(at: datetime) -> float:
    """Seconds since the epoch of a UTC time, naive (the warehouse's) or aware."""
    return (naive_utc(at) - _EPOCH).total_seconds()


_EPOCH = datetime(1970, 1, 1)


@dataclass
class Item:
    id: str
    published_at: datetime
    text_vec: np.ndarray  # L2-normalised embedding of title + lede
    title_vec: np.ndarray  # ... of the title alone
    tickers: frozenset[str] = frozenset()
    numbers: frozenset[str] = frozenset()  # of title + lede
    title_numbers: frozenset[str] = frozenset()
    source: str = ""
    title_words: frozenset[str] = frozenset()
    lede_words: frozenset[str] = frozenset()  # of title + lede
    names: frozenset[str] = frozenset()  # of title + lede
    price_piece: bool = False  # a generic price-analysis or prediction piece (features.price_piece)
    sent_vecs: np.ndarray | None = None  # the title's and the first summary sentences' (features.sentences), a row each


@dataclass
class Clusterer:
    """Stories of the articles added so far; ``seed`` it with the recent stories' articles, then ``add``."""

    window: timedelta = WINDOW
    model: pairs.PairModel = field(default_factory=pairs.load)
    items: list[Item] = field(default_factory=list)
    story_of: list[str] = field(default_factory=list)
    _text: np.ndarray | None = None  # one row per item (capacity doubles): a candidate set is one fancy index
    _title: np.ndarray | None = None
    _secs: np.ndarray | None = None  # publication times as seconds, for the time gap of many candidates at once
    _times: list[datetime] = field(default_factory=list)  # sorted: a late article (re-dated, slow feed) fits in
    _order: list[int] = field(default_factory=list)  # item indices in the order of _times
    merged: dict[str, str] = field(default_factory=dict)  # merged story id -> the story it is part of now
    _first: dict[str, tuple[datetime, str]] = field(default_factory=dict)  # story -> (first seen, id): the order
    _seeded: set[str] = field(default_factory=set)  # stories that existed before this run
    _last: dict[str, datetime] = field(default_factory=dict)  # story -> its latest article (of those seen here)

    def seed(self, items: Iterable[Item], story_ids: Iterable[str],
             first_seen: Iterable[datetime | None] | None = None) -> None:
        """The grouped articles of the window and their stories, with each story's stored first_seen (its first
        article may lie outside the window: a merge keeps the story that began first)."""
        items, story_ids = list(items), list(story_ids)
        firsts = list(first_seen) if first_seen is not None else [None] * len(items)
        for item, sid, first in zip(items, story_ids, firsts, strict=True):
            self._append(item, sid, first)
            self._seeded.add(sid)

    def _append(self, item: Item, sid: str, first_seen: datetime | None = None) -> None:
        self.items.append(item)
        self.story_of.append(sid)
        first = (naive_utc(first_seen or item.published_at), sid)
        self._first[sid] = min(self._first.get(sid, first), first)
        self._last[sid] = max(self._last.get(sid, first[0]), naive_utc(item.published_at))
        n = len(self.items)
        if self._text is None or self._title is None or n > len(self._text):
            cap = max(1024, 2 * n)
            text = np.zeros((cap, len(item.text_vec)), dtype=np.float32)
            title = np.zeros((cap, len(item.title_vec)), dtype=np.float32)
            secs = np.zeros(cap, dtype=np.float64)
            if self._text is not None and self._title is not None and self._secs is not None:
                text[: n - 1], title[: n - 1] = self._text[: n - 1], self._title[: n - 1]
                secs[: n - 1] = self._secs[: n - 1]
            self._text, self._title, self._secs = text, title, secs
        assert self._secs is not None
        self._text[n - 1], self._title[n - 1] = item.text_vec, item.title_vec
        self._secs[n - 1] = _seconds(item.published_at)
        at = bisect.bisect_right(self._times, item.published_at)
        self._times.insert(at, item.published_at)
        self._order.insert(at, len(self.items) - 1)

    def scores(self, item: Item, candidates: Sequence[int]) -> np.ndarray:
        """Logits of "same story" against ``candidates`` (exact for those that can reach the threshold)."""
        assert self._text is not None and self._title is not None and self._secs is not None
        idx = np.asarray(candidates, dtype=np.int64)
        # Articles mostly arrive in time order, so the window is usually one run of rows: a view, not a copy.
        rows: slice | np.ndarray = idx
        if idx[-1] - idx[0] + 1 == len(idx) and (len(idx) < 2 or bool(np.all(np.diff(idx) == 1))):
            rows = slice(int(idx[0]), int(idx[-1]) + 1)
        text = self._text[rows] @ item.text_vec
        title = self._title[rows] @ item.title_vec
        gap = np.abs(self._secs[rows] - _seconds(item.published_at)) / 3600 / pairs.WINDOW_HOURS
        z = self.model.dense_logits(text, title, gap)
        cut = self.model.threshold_logit
        z[text < pairs.MIN_COS_TEXT] = -np.inf
        near = np.flatnonzero(z + self.model.sparse_headroom >= cut)
        if len(near):
            z[near] += self.model.sparse_logits(item, [self.items[idx[k]] for k in near])
        return z

    def add(self, item: Item) -> str:
        """The story ``item`` joins (a new one when nothing in the window is close enough)."""
        lo, hi = item.published_at - self.window, item.published_at + self.window
        candidates = self._order[bisect.bisect_left(self._times, lo):bisect.bisect_right(self._times, hi)]
        sid = None
        at = naive_utc(item.published_at)
        candidates = [c for c in candidates if self._fits(self.story_of[c], at)]
        if candidates:
            s = self.scores(item, candidates)
            best = int(np.argmax(s))
            if s[best] >= self.model.threshold_logit:
                sid = self.story_of[candidates[best]]
                sure = {self.story_of[candidates[k]] for k in np.flatnonzero(s >= self._merge_logit())}
                sure = {o for o in sure if self._fits(o, *self._span(sid), at)}  # the merged story's span too
                if len(sure | {sid}) > 1:
                    sid = self._merge(sure | {sid})
        sid = sid or story_id(item.id)
        self._append(item, sid)
        return sid

    def _span(self, sid: str) -> tuple[datetime, datetime]:
        return self._first[sid][0], self._last[sid]

    def _fits(self, sid: str, *times: datetime) -> bool:
        """Whether story ``sid`` with ``times`` added spans at most ``MAX_SPAN`` (articles may come out of order)."""
        first, last = self._span(sid)
        return max(last, *times) - min(first, *times) <= MAX_SPAN

    def _merge_logit(self) -> float:
        p = min(0.99, self.model.threshold + MERGE_MARGIN)
        return math.log(p / (1 - p))

    def _merge(self, stories: set[str]) -> str:
        """One story of ``stories``: the one first seen keeps its id."""
        keep = min(stories, key=lambda sid: self._first[sid])
        for gone in stories - {keep}:
            self.story_of = [keep if sid == gone else sid for sid in self.story_of]
            self._first[keep] = min(self._first[keep], self._first.pop(gone))
            self._last[keep] = max(self._last[keep], self._last.pop(gone))
            self.merged = {old: (keep if into == gone else into) for old, into in self.merged.items()}
            self.merged[gone] = keep
        return keep

    def resolve(self, sid: str) -> str:
        """The story ``sid`` is part of now (itself unless it was merged)."""
        return self.merged.get(sid, sid)

    def retired(self) -> dict[str, str]:
        """The stories that existed before this run and were merged into another: what the warehouse moves."""
        return {sid: into for sid, into in self.merged.items() if sid in self._seeded}
