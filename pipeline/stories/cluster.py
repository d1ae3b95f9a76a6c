"""Grouping articles into stories, one article at a time in publication order.

An article joins the story holding its most similar article published within ``WINDOW`` of it, when that
similarity reaches ``THRESHOLD``; otherwise it starts a story of its own (its id derives from that first article's
id, so it never changes when others join). Similarity of two articles (weights tuned on the dev pairs of
``models/eval/story_pairs.jsonl`` only, see docs/stories.md)::

    0.7 x cos(title + lede) + 0.3 x cos(title)
      + 0.10 when they state a common number (amount, percentage, price)
      - 0.10 when both titles state numbers and none is common ("falls 5 %" vs "falls 12 %")
      - 0.05 when both name tickers and none is common

Single link against the story's members in the window (not a centroid): a story told by a wire and re-told by
others drifts in wording, and its newest articles are the ones a re-post resembles most. Incremental: only the
stories with an article in the window are candidates, so the cost grows with the new articles.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

WINDOW = timedelta(hours=48)
THRESHOLD = 0.70
W_TEXT, W_TITLE = 0.7, 0.3
NUMBER_BONUS, NUMBER_CONFLICT, TICKER_CONFLICT = 0.10, 0.10, 0.05
ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def story_id(first_article_id: str) -> str:
    """``st_`` + 20 characters of [A-Za-z0-9], derived from the story's first article."""
    n = int.from_bytes(hashlib.sha256(f"story:{first_article_id}".encode()).digest(), "big")
    out = []
    for _ in range(20):
        n, r = divmod(n, len(ID_CHARS))
        out.append(ID_CHARS[r])
    return "st_" + "".join(out)


@dataclass
class Item:
    id: str
    published_at: datetime
    text_vec: np.ndarray  # L2-normalised embedding of title + lede
    title_vec: np.ndarray  # ... of the title alone
    tickers: frozenset[str] = frozenset()
    numbers: frozenset[str] = frozenset()  # of title + lede
    title_numbers: frozenset[str] = frozenset()


@dataclass
class Clusterer:
    """Stories of the articles added so far; ``seed`` it with the recent stories' articles, then ``add``."""

    window: timedelta = WINDOW
    threshold: float = THRESHOLD
    items: list[Item] = field(default_factory=list)
    story_of: list[str] = field(default_factory=list)
    _text: np.ndarray | None = None  # one row per item (capacity doubles): a candidate set is one fancy index
    _title: np.ndarray | None = None
    _times: list[datetime] = field(default_factory=list)  # sorted: a late article (re-dated, slow feed) fits in
    _order: list[int] = field(default_factory=list)  # item indices in the order of _times

    def seed(self, items: Iterable[Item], story_ids: Iterable[str]) -> None:
        for item, sid in zip(items, story_ids, strict=True):
            self._append(item, sid)

    def _append(self, item: Item, sid: str) -> None:
        self.items.append(item)
        self.story_of.append(sid)
        n = len(self.items)
        if self._text is None or self._title is None or n > len(self._text):
            cap = max(1024, 2 * n)
            text = np.zeros((cap, len(item.text_vec)), dtype=np.float32)
            title = np.zeros((cap, len(item.title_vec)), dtype=np.float32)
            if self._text is not None and self._title is not None:
                text[: n - 1], title[: n - 1] = self._text[: n - 1], self._title[: n - 1]
            self._text, self._title = text, title
        self._text[n - 1], self._title[n - 1] = item.text_vec, item.title_vec
        at = bisect.bisect_right(self._times, item.published_at)
        self._times.insert(at, item.published_at)
        self._order.insert(at, len(self.items) - 1)

    def scores(self, item: Item, candidates: Sequence[int]) -> np.ndarray:
        """Similarities to ``candidates`` (exact for those that can reach the threshold)."""
        assert self._text is not None and self._title is not None
        idx = np.asarray(candidates, dtype=np.int64)
        text = self._text[idx] @ item.text_vec
        title = self._title[idx] @ item.title_vec
        s = W_TEXT * text + W_TITLE * title
        # the rules move a score by at most NUMBER_BONUS up: candidates further below cannot reach the threshold
        for k in np.flatnonzero(s >= self.threshold - NUMBER_BONUS):
            other = self.items[idx[k]]
            if item.numbers & other.numbers:
                s[k] += NUMBER_BONUS
            elif item.title_numbers and other.title_numbers and not item.title_numbers & other.title_numbers:
                s[k] -= NUMBER_CONFLICT
            if item.tickers and other.tickers and not item.tickers & other.tickers:
                s[k] -= TICKER_CONFLICT
        return s

    def add(self, item: Item) -> str:
        """The story ``item`` joins (a new one when nothing in the window is close enough)."""
        lo, hi = item.published_at - self.window, item.published_at + self.window
        candidates = self._order[bisect.bisect_left(self._times, lo):bisect.bisect_right(self._times, hi)]
        sid = None
        if candidates:
            s = self.scores(item, candidates)
            best = int(np.argmax(s))
            if s[best] >= self.threshold:
                sid = self.story_of[candidates[best]]
        sid = sid or story_id(item.id)
        self._append(item, sid)
        return sid
