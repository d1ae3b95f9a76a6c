"""Read-side queries over a serving snapshot (see ``warehouse.publish``): keyset pages of news and events.

Serving order is newest first; ``pos`` numbers the rows in that order. A request is turned into a window of
positions ``[lo, hi)`` (from the cursors, and for news from ``since``/``until``, which are monotonic in ``pos``),
then the page is the first or last ``n`` rows of that window that pass the remaining filters. Without such
filters a page is a plain range of ``pos``; with them it is ``ORDER BY pos LIMIT n + 1``, which DuckDB answers
with a top-N whose dynamic filter on ``pos`` skips row groups by their zone maps. No OFFSET anywhere: a page deep
in the set costs what the first page costs.

Cursors and the time values of arguments: ``warehouse.cursors``.

Row dicts use the API's field names (``sourceName``, ``createdAt``...), so the API serves them as they are.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from threading import Lock
from typing import Any

import duckdb

from warehouse.cursors import Instant, NewsKey, encode_news_cursor, iso_ms, to_us

_HIGH = "\U0010ffff"  # above every id: (t, _HIGH) bounds "at or before t"
DEFAULT_PAGE = 10  # items of a page without `first` or `last` (what api.cost charges for it too)


def _below(at: datetime, ident: str = "") -> tuple[int, str]:
    """A serving key bound (µs, id) for partitioned snapshots: rows whose key is below it are older. ``""`` sorts
    below every id: ``_below(t)`` means strictly older than ``t``."""
    return to_us(at), ident


# --------------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class PageRequest:
    first: int | None = None
    last: int | None = None
    after: Any = None  # NewsKey / Instant
    before: Any = None


@dataclass(frozen=True)
class NewsFilters:
    tickers: tuple[str, ...] | None = None
    topics: tuple[str, ...] | None = None
    sentiment: str | None = None  # Positive | Negative | Neutral
    sources: tuple[str, ...] | None = None
    since: Instant | None = None
    until: Instant | None = None
    search: str | None = None
    collapse_stories: bool = False  # one article per story: its earliest
    ids: tuple[str, ...] | None = None  # these articles only (``_page_by_ids``)


@dataclass(frozen=True)
class _Collapse:
    """collapseStories with other filters: the rows' conditions (``r``) and those of an earlier article (``o``)."""

    where: str
    params: list[Any]
    older: str
    older_params: list[Any]


@dataclass(frozen=True)
class StoryFilters:
    tickers: tuple[str, ...] | None = None
    topics: tuple[str, ...] | None = None
    since: Instant | None = None  # first_seen at or after
    until: Instant | None = None
    min_sources: int | None = None
    ids: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EventFilters:
    tickers: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    status: str | None = None  # OPEN | CLOSED | WITHDRAWN
    date_from: Instant | None = None
    date_to: Instant | None = None
    updated_since: Instant | None = None  # changed (text, source, withdrawn or restored) at or after
    ids: tuple[str, ...] | None = None


@dataclass
class Page:
    rows: list[dict[str, Any]]
    has_next: bool | None  # None: not computed (not asked for)
    has_previous: bool | None
    positions: list[int] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- reader

NEWS_COLUMNS = (
    "pos, published_at AS date, id, title, text, sentiment, sentiment_score AS \"sentimentScore\", tickers, topics, "
    "source_name AS \"sourceName\", news_url AS \"newsUrl\", image_url AS \"imageUrl\""
)
EVENT_COLUMNS = (
    "pos, id, event_title AS \"eventTitle\", event_description AS \"eventDescription\", "
    "source_url AS \"sourceUrl\", image_url AS \"imageUrl\", created_at AS \"createdAt\", date, "
    "options, tags, asset, kind, subject, comparator, threshold, currency, "
    "resolution_criteria AS \"resolutionCriteria\", resolution_source AS \"resolutionSource\""
)
STORY_COLUMNS = (
    "pos, id, title, first_seen AS \"firstSeen\", last_seen AS \"lastSeen\", articles AS \"articleCount\", "
    "sources AS \"sourceCount\", mean_sentiment AS \"meanSentiment\", tickers, topics, article_ids AS \"articleIds\""
)
NEWS_STORY_COLUMNS = (
    ", story_id, story_title, story_articles, story_sources, story_first_seen"
)
NO_STORY_COLUMNS = (
    ", NULL::VARCHAR AS story_id, NULL::VARCHAR AS story_title, NULL::INTEGER AS story_articles, "
    "NULL::INTEGER AS story_sources, NULL::TIMESTAMP AS story_first_seen"
)
DATE_INFERRED = ', date_inferred AS "dateInferred"'
# Timestamps are formatted in Python, once per page: measured cheaper than strftime() in the query.


def snapshot_fact(facts: dict[str, Any] | None, key: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, kept in ``facts`` when given: a snapshot never changes, so what its schema holds and its
    newest article are asked once per snapshot, not per request (a scan of every part at 1M articles)."""
    if facts is None:
        return compute()
    if key not in facts:
        facts[key] = compute()
    return facts[key]


def has_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    """Whether the open database's ``table`` has ``column`` (older snapshots lack the newer ones)."""
    return bool(con.execute(
        "SELECT 1 FROM duckdb_columns() WHERE table_name = ? AND column_name = ? AND database_name = current_database()",
        [table, column],
    ).fetchall())


def _news_conditions(filters: NewsFilters, alias: str = "") -> tuple[list[str], list[Any]]:
    """SQL conditions (and their parameters) of the news filters other than the date range, on ``alias``'s columns."""
    a = alias
    where: list[str] = []
    params: list[Any] = []
    if filters.tickers:
        where.append(f"list_has_any({a}tickers, ?)")
        params.append([t.upper() for t in filters.tickers])
    if filters.topics:  # topic slugs are lower case; "ETF" means etf
        where.append(f"list_has_any({a}topics, ?)")
        params.append([t.lower() for t in filters.topics])
    if filters.sources:  # as typed by people: "coindesk" means CoinDesk
        where.append(f"list_contains(?, lower({a}source_name))")
        params.append([s.lower() for s in filters.sources])
    if filters.sentiment:
        where.append(f"{a}sentiment = ?")
        params.append(filters.sentiment)
    if filters.search:
        where.append(f"({a}title ILIKE ? ESCAPE '\\' OR {a}text ILIKE ? ESCAPE '\\')")
        pattern = f"%{_escape_like(filters.search)}%"
        params += [pattern, pattern]
    return where, params


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class CacheMiss(Exception):
    """Raised by a cache-only reader: the answer needs a query (the API then runs it off the event loop)."""


class PageCache:
    """An LRU of pages for one snapshot. A snapshot never changes, so a page computed once stays right until the
    API switches to a newer snapshot (which comes with a new cache). Thread-safe; cached rows are shared, never
    mutated."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, compute: Callable[[], Any], cache_only: bool = False) -> Any:
        if self.size <= 0:
            if cache_only:
                raise CacheMiss(key)
            return compute()
        with self._lock:
            page = self._items.get(key)
            if page is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return page
        if cache_only:
            raise CacheMiss(key)
        self.misses += 1
        page = compute()
        with self._lock:
            self._items[key] = page
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return page


class SnapshotReader:
    """Queries over one open snapshot; ``con`` is a cursor used by one thread at a time."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, tag: str, articles: int, events: int, cache: PageCache | None = None,
        layout: dict[str, list[Any]] | None = None, facts: dict[str, Any] | None = None,
    ) -> None:
        self.con = con
        self.tag = tag
        self.facts = {} if facts is None else facts  # what never changes in a snapshot, asked once (snapshot_fact)
        self.counts = {"news": articles, "events": events}
        self.cache = cache or PageCache(0)
        self.cache_only = False  # when set, a page that is not cached raises CacheMiss instead of querying
        # A partitioned snapshot (warehouse.parts): per paged table, its parts in serving order (``Segment``s).
        # Pages go to the parts directly; every other query reads the views over all parts.
        self.layout = layout
        if layout is not None:  # a set's parts: every column but the change times, which came with format 3
            self._withdrawn = "withdrawn_reason"
            self._updated = self._events_updated_at(con)
            self._event_columns = f'{EVENT_COLUMNS}, withdrawn_reason AS "withdrawnReason", {self._change_columns()}'
            self._news_columns = (NEWS_COLUMNS + ', ticker_sentiments AS "tickerSentiments"' + NEWS_STORY_COLUMNS
                                  + DATE_INFERRED)
            self._has_stories = True
            self.counts["stories"] = sum(seg.count for seg in layout.get("stories", []))
            return
        # Snapshots published before events could be withdrawn have no such column: none of theirs is.
        self._withdrawn = "withdrawn_reason" if has_column(con, "events", "withdrawn_reason") else "NULL::VARCHAR"
        # ... nor, before format 3 of sets (2026-11-26), the times of an event's last change and withdrawal.
        self._updated = self._events_updated_at(con)
        self._event_columns = f'{EVENT_COLUMNS}, {self._withdrawn} AS "withdrawnReason", {self._change_columns()}'
        # ... and those published before tickers had their own sentiment have no ticker_sentiments.
        self._news_columns = NEWS_COLUMNS + (', ticker_sentiments AS "tickerSentiments"'
                                             if has_column(con, "news", "ticker_sentiments")
                                             else ', []::STRUCT(ticker VARCHAR, label VARCHAR, score DOUBLE)[] AS "tickerSentiments"')
        # ... and those published before stories have neither story columns nor a stories table: every article
        # stands for itself there, and the list of stories is empty.
        self._has_stories = has_column(con, "news", "story_id")
        self._news_columns += NEWS_STORY_COLUMNS if self._has_stories else NO_STORY_COLUMNS
        self.counts["stories"] = (
            int(con.execute("SELECT count(*) FROM stories").fetchall()[0][0]) if self._has_stories else 0
        )
        # ... and the oldest ones do not say which dates were the fetch time.
        self._news_columns += DATE_INFERRED if has_column(con, "news", "date_inferred") else ', false AS "dateInferred"'

    @classmethod
    def info(cls, con: duckdb.DuckDBPyConnection) -> tuple[str, int, int]:
        rows = con.execute("SELECT tag, articles, events FROM snapshot_info").fetchall()
        if not rows:
            raise ValueError("the snapshot has no snapshot_info row: it was not written by publish_snapshot")
        tag, articles, events = rows[0]
        return str(tag), int(articles), int(events)

    # ----------------------------------------------------------------------------------------- helpers

    def _segments(self, table: str) -> list[Any] | None:
        return None if self.layout is None else self.layout.get(table, [])

    def _first_pos(self, table: str, where: str, params: list[Any], bound: tuple[int, str] | None = None) -> int:
        """The first position whose row satisfies ``where`` (a condition monotonic in pos), else the row count.

        In a partitioned snapshot ``bound`` says the same as ``where`` on serving keys: ``where`` holds for a row
        when its key (µs, id) is below ``bound``. The first part whose oldest key is below it holds the answer."""
        segments = self._segments(table)
        if segments is None:
            rows = self.con.execute(f"SELECT pos FROM {table} WHERE {where} ORDER BY pos LIMIT 1", params).fetchall()
            return int(rows[0][0]) if rows else self.counts[table]
        assert bound is not None
        for seg in segments:
            if seg.oldest >= bound:
                continue
            if seg.newest < bound:
                return seg.offset
            rows = self.con.execute(f"SELECT pos FROM {seg.rel} WHERE {where} ORDER BY pos LIMIT 1", params).fetchall()
            if rows:
                return seg.offset + int(rows[0][0])
        return self.counts[table]

    def _spans(self, table: str, lo: int, hi: int, backwards: bool = False) -> list[tuple[Any, int, int]]:
        """``(segment, local lo, local hi)`` of the parts holding global positions ``[lo, hi)``, in reading order."""
        out = []
        for seg in self._segments(table) or []:
            a, b = max(lo, seg.offset), min(hi, seg.offset + seg.count)
            if a < b:
                out.append((seg, a - seg.offset, b - seg.offset))
        return out[::-1] if backwards else out

    def _exists(self, table: str, lo: int, hi: int, where: str, params: list[Any]) -> bool:
        if hi <= lo:
            return False
        if not where:
            return True
        if self.layout is None:
            sql = f"SELECT 1 FROM {table} AS r WHERE pos >= ? AND pos < ? AND {where} LIMIT 1"
            return bool(self.con.execute(sql, [lo, hi, *params]).fetchall())
        for seg, a, b in self._spans(table, lo, hi):
            sql = f"SELECT 1 FROM {seg.rel} AS r WHERE pos >= ? AND pos < ? AND {where} LIMIT 1"
            if self.con.execute(sql, [a, b, *params]).fetchall():
                return True
        return False

    def _fetch(
        self, table: str, columns: str, col_params: list[Any], lo_w: int, hi_w: int, n: int, backwards: bool,
        where: str, params: list[Any],
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Up to ``n`` rows of ``[lo_w, hi_w)`` passing ``where``, nearest the window's start (its end when
        ``backwards``), in that reading order; ``pos`` (the first column) global."""
        if self.layout is None:
            select = f"SELECT {columns} FROM {table}"
            if not where:
                # Dense positions: the page is a plain range (sorted here: cheaper than ORDER BY for a few rows).
                a, b = (max(lo_w, hi_w - n), hi_w) if backwards else (lo_w, min(hi_w, lo_w + n))
                cur = self.con.execute(f"{select} WHERE pos >= ? AND pos < ?", [*col_params, a, b])
                fetched, names = cur.fetchall(), [d[0] for d in cur.description]
                fetched.sort(key=lambda r: r[0], reverse=backwards)
                return fetched, names
            return self._filtered(table, columns, col_params, lo_w, hi_w, n, backwards, where, params)
        out: list[tuple[Any, ...]] = []
        names: list[str] = []
        for seg, a, b in self._spans(table, lo_w, hi_w, backwards):
            need = n - len(out)
            if need <= 0:
                break
            select = f"SELECT {columns} FROM {seg.rel}"
            if not where:
                a, b = (max(a, b - need), b) if backwards else (a, min(b, a + need))
                cur = self.con.execute(f"{select} WHERE pos >= ? AND pos < ?", [*col_params, a, b])
                rows = cur.fetchall()
                rows.sort(key=lambda r: r[0], reverse=backwards)
                names = [d[0] for d in cur.description]
            else:
                rows, names = self._filtered(seg.rel, columns, col_params, a, b, need, backwards, where, params)
            out += [(r[0] + seg.offset, *r[1:]) for r in rows]
        return out, names

    def _filtered(
        self, rel: str, columns: str, col_params: list[Any], a: int, b: int, n: int, backwards: bool, where: str,
        params: list[Any],
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """Up to ``n`` rows of ``rel`` in ``[a, b)`` passing ``where``, in reading order. The positions are found
        first, the page's columns then read for those alone: a top-n over every column of the window read the
        text of every passing row (3x the time of a plain page under collapseStories). ``where`` may name the row
        ``r`` (a correlated subquery must, to tell its own columns from the row's)."""
        order = "DESC" if backwards else ""
        found = self.con.execute(
            f"SELECT pos FROM {rel} AS r WHERE pos >= ? AND pos < ? AND {where} ORDER BY pos {order} LIMIT ?",
            [a, b, *params, n],
        ).fetchall()
        ends = sorted((found[0][0], found[-1][0])) if found else (a, a - 1)  # none: an empty range, for the names
        lo, hi = ends
        # The rows passing `where` between the first and the last found are exactly the found ones.
        cur = self.con.execute(f"SELECT {columns} FROM {rel} AS r WHERE pos >= ? AND pos <= ? AND {where}",
                               [*col_params, lo, hi, *params])
        rows = cur.fetchall()
        rows.sort(key=lambda r: r[0], reverse=backwards)
        return rows, [d[0] for d in cur.description]

    def _page(
        self, table: str, columns: list[str] | str, col_params: list[Any], req: PageRequest, lo_w: int, hi_w: int,
        flo: int, fhi: int, where: str, params: list[Any], need_next: bool, need_previous: bool,
        ids: tuple[str, ...] | None = None,
    ) -> Page:
        """Rows of ``[lo_w, hi_w)`` passing ``where`` (and with one of ``ids``, when given); ``[flo, fhi)`` is the
        whole filtered list (for pageInfo)."""
        if req.first is not None and req.last is not None:
            raise ValueError("first and last together")
        backwards = req.last is not None
        n = req.last if backwards else (req.first if req.first is not None else DEFAULT_PAGE)
        if ids is not None:
            return self._page_by_ids(table, str(columns), col_params, req, n, lo_w, hi_w, flo, fhi, where, params, ids)
        if hi_w <= lo_w:
            fetched: list[tuple[Any, ...]] = []
            names: list[str] = []
        else:
            fetched, names = self._fetch(table, str(columns), col_params, lo_w, hi_w, n + 1, backwards, where, params)
        more = len(fetched) > n
        fetched = fetched[:n]
        if backwards:
            fetched.reverse()
        rows = [dict(zip(names, r, strict=True)) for r in fetched]
        positions = [r["pos"] for r in rows]
        if backwards:
            has_previous: bool | None = more
            has_next = self._exists(table, hi_w, fhi, where, params) if (need_next and req.before is not None) else (
                False if req.before is None else None
            )
        else:
            has_next = more
            has_previous = (
                self._exists(table, flo, lo_w, where, params) if (need_previous and req.after is not None)
                else (False if req.after is None else None)
            )
        return Page(rows, has_next, has_previous, positions)

    def _page_by_ids(
        self, table: str, columns: str, col_params: list[Any], req: PageRequest, n: int, lo_w: int, hi_w: int,
        flo: int, fhi: int, where: str, params: list[Any], ids: tuple[str, ...],
    ) -> Page:
        """A page of the rows with one of ``ids`` (at most a hundred, the API's bound): they are read whole, by id,
        in the filtered list, so the page and both ``hasNextPage`` / ``hasPreviousPage`` are exact, and the cost
        does not depend on where in the list they lie (a window read in serving order would go to its end)."""
        rows = self._rows_by_ids(table, columns, col_params, ids, flo, fhi, where, params)
        inside = [r for r in rows if lo_w <= r["pos"] < hi_w]
        if req.last is not None:
            page = inside[-n:] if n else []
            has_previous: bool = len(inside) > n
            has_next = req.before is not None and any(r["pos"] >= hi_w for r in rows)
        else:
            page = inside[:n]
            has_next = len(inside) > n
            has_previous = req.after is not None and any(r["pos"] < lo_w for r in rows)
        return Page(page, has_next, has_previous, [r["pos"] for r in page])

    def _rows_by_ids(
        self, table: str, columns: str, col_params: list[Any], ids: tuple[str, ...], flo: int, fhi: int, where: str,
        params: list[Any],
    ) -> list[dict[str, Any]]:
        """The rows of global positions ``[flo, fhi)`` with one of ``ids`` that pass ``where``, in serving order.

        A single file: one query, whose filter on ``id`` DuckDB applies in the scan. A set: the ids' positions first
        (``id`` and ``pos`` only), then the columns for those positions from the parts holding them, in one
        statement: a query per part costs about 1 ms whatever it reads (docs/api.md)."""
        if not ids or fhi <= flo:
            return []
        extra = f" AND ({where})" if where else ""
        segments = self._segments(table)
        if segments is None:
            cur = self.con.execute(
                f"SELECT {columns} FROM {table} AS r WHERE list_contains(?, r.id) AND r.pos >= ? AND r.pos < ?{extra} "
                "ORDER BY r.pos", [*col_params, list(ids), flo, fhi, *params],
            )
        else:
            found = self.con.execute(f"SELECT pos FROM {table} WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                                     [list(ids)]).fetchall()
            positions = sorted(p for (p,) in found if flo <= p < fhi)
            branches, values = [], []
            for seg in segments:
                local = [p - seg.offset for p in positions if seg.offset <= p < seg.offset + seg.count]
                if local:
                    branches.append(f"SELECT pos + {int(seg.offset)} AS pos, * EXCLUDE (pos) FROM (SELECT {columns} "
                                    f"FROM {seg.rel} AS r WHERE r.pos IN (SELECT unnest(?::BIGINT[])){extra})")
                    values += [*col_params, local, *params]
            if not branches:
                return []
            cur = self.con.execute(f"SELECT * FROM ({' UNION ALL '.join(branches)}) ORDER BY pos", values)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    # ----------------------------------------------------------------------------------------- news

    def _news_older_from(self, key: NewsKey, table: str = "news", col: str = "published_at") -> int:
        """First position strictly older than ``key``."""
        if key.id is None:
            return self._first_pos(table, f"{col} < ?", [key.at], _below(key.at))
        p = self._news_pos(key, table, col)
        if p is not None:
            return p + 1
        return self._first_pos(table, f"{col} <= ? AND ({col} < ? OR id < ?)", [key.at, key.at, key.id],
                               _below(key.at, key.id))

    def _news_newer_until(self, key: NewsKey, table: str = "news", col: str = "published_at") -> int:
        """End (exclusive) of the rows strictly newer than ``key``."""
        if key.id is None:
            return self._first_pos(table, f"{col} <= ?", [key.at], _below(key.at, _HIGH))
        p = self._news_pos(key, table, col)
        if p is not None:
            return p
        return self._first_pos(table, f"{col} <= ? AND ({col} < ? OR id < ?)", [key.at, key.at, key.id],
                               _below(key.at, key.id))

    def _cursor_tag(self, table: str, us: int, ident: str, pos: int) -> str:
        """A checksum of the snapshot's tag, the row's key and its position: what makes a cursor's position usable as
        is. Every API process serving the snapshot computes the same; a cursor edited by hand, or from another
        snapshot, fails it and means its key (time, id). Not a secret: an edit only changes what its maker reads."""
        return hashlib.sha256(f"{table}:{self.tag}:{us}:{ident}:{pos}".encode()).hexdigest()[:16]

    def _news_pos(self, key: NewsKey, table: str = "news", col: str = "published_at") -> int | None:
        """The cursor row's position in this snapshot, if the row is here with the same time."""
        if (key.pos is not None and key.id is not None and key.tag is not None and 0 <= key.pos < self.counts[table]
                and key.tag == self._cursor_tag(table, to_us(key.at), key.id, key.pos)):
            return key.pos  # a cursor this process issued for this snapshot, unedited
        segments = self._segments(table)
        if segments is None:
            rel, offset = table, 0
        else:  # only the part whose key range holds the key can hold the row with that time
            k = _below(key.at, key.id or "")
            seg = next((g for g in segments if g.oldest <= k <= g.newest), None)
            if seg is None:
                return None
            rel, offset = seg.rel, seg.offset
        rows = self.con.execute(f"SELECT pos, {col} FROM {rel} WHERE id = ?", [key.id]).fetchall()
        if rows and rows[0][1] == key.at:
            return offset + int(rows[0][0])
        return None

    def news_page(
        self, req: PageRequest, filters: NewsFilters = NewsFilters(), *, need_next: bool = True,
        need_previous: bool = True,
    ) -> Page:
        """A page of news; rows carry ``pos`` and ``_cursor`` besides the API fields (see ``news_cursor``)."""
        key = ("news", req, filters, need_next, need_previous)
        return self.cache.get(key, lambda: self._news_page(req, filters, need_next, need_previous), self.cache_only)

    def _news_page(self, req: PageRequest, filters: NewsFilters, need_next: bool, need_previous: bool) -> Page:
        flo, fhi = 0, self.counts["news"]
        if filters.since is not None:  # published_at >= since: a prefix of the serving order
            fhi = self._first_pos("news", "published_at < ?", [filters.since.at], _below(filters.since.at))
        if filters.until is not None:  # published_at <= until (a plain date: that whole day)
            upper = filters.until.upper_exclusive()
            flo = self._first_pos("news", "published_at < ?", [upper], _below(upper))
        lo, hi = flo, fhi
        if req.after is not None:
            lo = max(lo, self._news_older_from(req.after))
        if req.before is not None:
            hi = min(hi, self._news_newer_until(req.before))
        where, params = _news_conditions(filters)
        where_sql = " AND ".join(where)
        prior = self._prior_condition(filters) if filters.collapse_stories and self._has_stories else None
        if prior is not None:  # one article per story by a row condition: pages and cursors work as without
            where_sql = " AND ".join([*where, prior[0]])
            page = self._page(
                "news", self._news_columns, [], req, lo, hi, flo, fhi, where_sql, [*params, *prior[1]], need_next,
                need_previous, filters.ids,
            )
        elif filters.collapse_stories and self._has_stories and (where or filters.since or filters.until):
            # One article per story among those the filters let through: its earliest such article, so that a
            # story whose first report does not match (another outlet, before `since`) is still listed.
            older, older_params = _news_conditions(filters, "o.")
            if filters.since is not None:
                older.append("o.published_at >= ?")
                older_params.append(filters.since.at)
            if filters.until is not None:
                older.append("o.published_at < ?")
                older_params.append(filters.until.upper_exclusive())
            stand = _Collapse(where_sql, params, " AND ".join(["TRUE", *older]), older_params)
            page = self._collapse_page(req, lo, hi, flo, fhi, stand, need_next, need_previous)
        else:
            if filters.collapse_stories and self._has_stories:  # a row filter: pages and cursors work as without
                where_sql = "story_first"
            page = self._page(
                "news", self._news_columns, [], req, lo, hi, flo, fhi, where_sql, params, need_next, need_previous,
                filters.ids,
            )
        for row in page.rows:  # formatted once per page (pages are cached), not once per request
            at = row["date"]
            us = to_us(at)
            row["_cursor"] = encode_news_cursor(us, row["id"], self._cursor_tag("news", us, row["id"], row["pos"]), row["pos"])
            row["date"] = iso_ms(at)
            sid, first = row.pop("story_id"), row.pop("story_first_seen")
            title, count, sources = row.pop("story_title"), row.pop("story_articles"), row.pop("story_sources")
            row["story"] = None if sid is None or first is None else {
                "id": sid, "title": title, "articleCount": count, "sourceCount": sources, "firstSeen": iso_ms(first),
            }
        return page

    def _prior_condition(self, filters: NewsFilters) -> tuple[str, list[Any]] | None:
        """collapseStories as a row condition on the ``story_prior_*`` columns (``warehouse.parts.contents.PRIOR_SQL``):
        no earlier article of the row's story passes the filters. Exact for one of tickers, topics, sources or
        sentiment (an earlier article is also before ``until``), or ``since`` alone; else None (``_standing``)."""
        if not snapshot_fact(self.facts, "news_prior", lambda: has_column(self.con, "news", "story_prior_tickers")):
            return None
        kinds = [k for k in ("tickers", "topics", "sources", "sentiment") if getattr(filters, k)]
        if filters.search or len(kinds) + (filters.since is not None) != 1:
            return None
        if filters.since is not None:  # the story's earliest article at or after since
            return "(story_prev_at IS NULL OR story_prev_at < ?)", [filters.since.at]
        if filters.sentiment:
            return "NOT coalesce(list_contains(story_prior_sentiments, ?), false)", [filters.sentiment]
        values = {"tickers": [t.upper() for t in filters.tickers or ()], "topics": [t.lower() for t in filters.topics or ()],
                  "sources": [s.lower() for s in filters.sources or ()]}[kinds[0]]
        return f"NOT coalesce(list_has_any(story_prior_{kinds[0]}, ?), false)", [values]

    def _standing(self, lo: int, hi: int, n: int, backwards: bool, c: _Collapse,
                  columns: str = "pos, id, story_id, story_first_seen, published_at AS date") -> list[dict[str, Any]]:
        """Up to ``n`` rows (``columns``, which must name pos, id, story_id, story_first_seen and date) of ``[lo, hi)``
        in reading order that pass the filters and stand for their story: no earlier article of it passes them.
        Taken in chunks, each checked with one grouped query over the chunk's stories only, bounded in time by their
        first reports, so a page reads about what it lists (an anti-join read every passing row)."""
        out: list[dict[str, Any]] = []
        chunk = n + n // 2 + 8  # most passing rows stand for their story
        while lo < hi and len(out) < n:
            fetched, names = self._fetch("news", columns, [], lo, hi, chunk, backwards, c.where, c.params)
            if not fetched:
                break
            rows = [dict(zip(names, r, strict=True)) for r in fetched]
            grouped = [r for r in rows if r["story_id"] is not None and r["story_first_seen"] is not None]
            first: dict[str, str] = {}
            if grouped:
                since, until = min(r["story_first_seen"] for r in grouped), max(r["date"] for r in grouped)
                first = dict(self.con.execute(
                    f"SELECT o.story_id, first(o.id ORDER BY o.published_at, o.id) FROM {self._news_between(since, until)} o "
                    f"WHERE o.published_at >= ? AND o.published_at <= ? AND o.story_id IN (SELECT unnest(?)) "
                    f"AND {c.older} GROUP BY o.story_id",
                    [since, until, sorted({r["story_id"] for r in grouped}), *c.older_params],
                ).fetchall())
            for row in rows:  # a row in no story (or in an older snapshot) stands for itself
                if row["story_first_seen"] is None or row["story_id"] is None or first.get(row["story_id"]) == row["id"]:
                    out.append(row)
                    if len(out) == n:
                        break
            if len(fetched) < chunk:
                break
            if backwards:
                hi = rows[-1]["pos"]
            else:
                lo = rows[-1]["pos"] + 1
        return out

    def _news_between(self, since: datetime, until: datetime) -> str:
        """``news``, or in a partitioned snapshot the union of only the parts holding times in [since, until]."""
        segments = self._segments("news")
        if segments is None:
            return "news"
        lo, hi = _below(since), _below(until, _HIGH)
        rels = [seg.rel for seg in segments if seg.newest >= lo and seg.oldest <= hi]
        if not rels:
            return "(SELECT * FROM news LIMIT 0)"
        return "(" + " UNION ALL ".join(f"SELECT * FROM {rel}" for rel in rels) + ")"

    def _collapse_page(
        self, req: PageRequest, lo_w: int, hi_w: int, flo: int, fhi: int, c: _Collapse, need_next: bool,
        need_previous: bool,
    ) -> Page:
        """``_page`` for collapseStories with other filters (see ``_standing``)."""
        if req.first is not None and req.last is not None:
            raise ValueError("first and last together")
        backwards = req.last is not None
        n = req.last if backwards else (req.first if req.first is not None else DEFAULT_PAGE)
        rows = self._standing(lo_w, hi_w, n + 1, backwards, c, self._news_columns)
        more = len(rows) > n
        rows = rows[:n]
        if backwards:
            rows.reverse()  # the serving order
            has_previous: bool | None = more
            has_next = (bool(self._standing(hi_w, fhi, 1, False, c)) if need_next and req.before is not None
                        else (False if req.before is None else None))
        else:
            has_next = more
            has_previous = (bool(self._standing(flo, lo_w, 1, True, c)) if need_previous and req.after is not None
                            else (False if req.after is None else None))
        return Page(rows, has_next, has_previous, [r["pos"] for r in rows])

    # ----------------------------------------------------------------------------------------- stories

    def stories_page(
        self, req: PageRequest, filters: StoryFilters = StoryFilters(), *, need_next: bool = True,
        need_previous: bool = True,
    ) -> Page:
        """A page of stories, newest (first_seen) first; rows carry ``pos`` and ``_cursor``."""
        key = ("stories", req, filters, need_next, need_previous)
        return self.cache.get(key, lambda: self._stories_page(req, filters, need_next, need_previous), self.cache_only)

    def _stories_page(self, req: PageRequest, filters: StoryFilters, need_next: bool, need_previous: bool) -> Page:
        if not self._has_stories:
            return Page([], False, False, [])
        flo, fhi = 0, self.counts["stories"]
        if filters.since is not None:
            fhi = self._first_pos("stories", "first_seen < ?", [filters.since.at], _below(filters.since.at))
        if filters.until is not None:
            upper = filters.until.upper_exclusive()
            flo = self._first_pos("stories", "first_seen < ?", [upper], _below(upper))
        lo, hi = flo, fhi
        if req.after is not None:
            lo = max(lo, self._news_older_from(req.after, "stories", "first_seen"))
        if req.before is not None:
            hi = min(hi, self._news_newer_until(req.before, "stories", "first_seen"))
        where, params = [], []
        if filters.tickers:
            where.append("list_has_any(tickers, ?)")
            params.append([t.upper() for t in filters.tickers])
        if filters.topics:
            where.append("list_has_any(topics, ?)")
            params.append([t.lower() for t in filters.topics])
        if filters.min_sources:
            where.append("sources >= ?")
            params.append(int(filters.min_sources))
        page = self._page(
            "stories", STORY_COLUMNS, [], req, lo, hi, flo, fhi, " AND ".join(where), params, need_next, need_previous,
            filters.ids,
        )
        for row in page.rows:
            at = row["firstSeen"]
            us = to_us(at)
            row["_cursor"] = encode_news_cursor(
                us, row["id"], self._cursor_tag("stories", us, row["id"], row["pos"]), row["pos"], "s1"
            )
            row["firstSeen"] = iso_ms(at)
            row["lastSeen"] = iso_ms(row["lastSeen"])
        return page

    @staticmethod
    def news_cursor(row: dict[str, Any]) -> str:
        return row["_cursor"]

    # ----------------------------------------------------------------------------------------- events

    def events_page(
        self, req: PageRequest, filters: EventFilters = EventFilters(), *, now: datetime | None = None,
        need_next: bool = True, need_previous: bool = True,
    ) -> Page:
        """A page of events; ``status`` (OPEN/CLOSED) is computed against ``now`` (default: the current time)."""
        now = now or datetime.now(UTC).replace(tzinfo=None)
        if filters.status is not None:  # which rows match depends on the time: not cacheable
            if self.cache_only:
                raise CacheMiss("events by status")
            page = self._events_page(req, filters, now, need_next, need_previous)
        else:
            key = ("events", req, filters, need_next, need_previous)
            page = self.cache.get(
                key, lambda: self._events_page(req, filters, now, need_next, need_previous), self.cache_only
            )
        now_iso = iso_ms(now)
        rows = [
            {**r, "status": "WITHDRAWN" if r["withdrawnReason"] is not None else "CLOSED" if r["date"] <= now_iso else "OPEN"}
            for r in page.rows
        ]
        return Page(rows, page.has_next, page.has_previous, page.positions)

    def _events_updated_at(self, con: duckdb.DuckDBPyConnection) -> str | None:
        """``updated_at`` when the snapshot's events have it; asked once per snapshot (a reader is made per request,
        and the catalog query costs milliseconds over a set's attached parts)."""
        has = snapshot_fact(self.facts, "events_updated_at", lambda: has_column(con, "events", "updated_at"))
        return "updated_at" if has else None

    def _change_columns(self) -> str:
        if self._updated is None:  # an older snapshot: its events' change times are unknown
            return 'NULL::TIMESTAMP AS "updatedAt", NULL::TIMESTAMP AS "withdrawnAt"'
        return 'updated_at AS "updatedAt", withdrawn_at AS "withdrawnAt"'

    def _events_page(
        self, req: PageRequest, filters: EventFilters, now: datetime, need_next: bool, need_previous: bool
    ) -> Page:
        flo, fhi = 0, self.counts["events"]
        lo, hi = flo, fhi
        if req.after is not None:  # strictly older than the instant (createdAt is unique)
            lo = self._first_pos("events", "created_at < ?", [req.after.at], _below(req.after.at))
        if req.before is not None:  # strictly newer than the instant
            hi = self._first_pos("events", "created_at <= ?", [req.before.at], _below(req.before.at, _HIGH))
        where, params = [], []
        if filters.tickers:
            upper = [t.upper() for t in filters.tickers]
            where.append("(list_contains(?, asset) OR list_has_any(tags, ?))")
            params += [upper, upper]
        if filters.tags:  # tags are tickers (BTC) and topic slugs (priceforecast): "btc" and "PriceForecast" match
            where.append("list_has_any(tags, ?)")
            params.append(sorted({v for t in filters.tags for v in (t, t.upper(), t.lower())}))
        if filters.status == "OPEN":
            where.append(f"date > ? AND {self._withdrawn} IS NULL")
            params.append(now)
        elif filters.status == "CLOSED":
            where.append(f"date <= ? AND {self._withdrawn} IS NULL")
            params.append(now)
        elif filters.status == "WITHDRAWN":
            where.append(f"{self._withdrawn} IS NOT NULL")
        if filters.date_from is not None:
            where.append("date >= ?")
            params.append(filters.date_from.at)
        if filters.date_to is not None:
            where.append("date < ?")
            params.append(filters.date_to.upper_exclusive())
        if filters.updated_since is not None:  # an older snapshot knows only when each event was created
            where.append(f"{self._updated or 'created_at'} >= ?")
            params.append(filters.updated_since.at)
        page = self._page(
            "events", self._event_columns, [], req, lo, hi, flo, fhi, " AND ".join(where), params, need_next,
            need_previous, filters.ids,
        )
        for row in page.rows:
            for name in ("createdAt", "date", "updatedAt", "withdrawnAt"):
                row[name] = None if row[name] is None else iso_ms(row[name])
        return page

    # ----------------------------------------------------------------------------------------- lists

    def filter_values(self, kind: str) -> list[str]:
        """``newsSources``, ``newsTopics`` or ``tickers``."""
        def query() -> list[str]:
            rows = self.con.execute("SELECT value FROM filter_values WHERE kind = ? ORDER BY value", [kind]).fetchall()
            return [r[0] for r in rows]

        return list(self.cache.get(("filter_values", kind), query, self.cache_only))
