"""One ingestion run: fetch every enabled feed, parse, normalise, and merge into the warehouse at once.

Rules a run follows (text rules: ``pipeline/ingest/clean.py``):

* **Identity** — ``id`` is ``a_`` + 16 hex digits of sha256 of the canonical URL; an item without a usable
  link is keyed by its feed URL and guid; one with neither by its feed URL and title. The same article in
  two feeds, or twice in one, is one row: the first occurrence wins (feeds in file order, items in
  document order), and the row keeps the source that first brought it. An item whose link changed keeps the
  id it was stored under (its link is updated in place) when its source stored one item with the same guid, or
  with the same link but for http/https, ``www.`` or a trailing ``/`` (:func:`_moved`): publishers edit slugs
  and move to https, and the one story must not become two articles.
* **Dates** — ``published_at`` is the item's publication date (else its update date) in UTC, to the second.
  When it is missing or unreadable, later than ``fetched_at`` + 1 day, or before 1995, it is replaced by
  ``fetched_at`` (cut to the second) and ``date_inferred`` is true. An inferred date never overwrites a real one; a real date
  that turns up later replaces an inferred one.
* **Updates** — ``content_hash`` covers title, summary and content HTML. A known id whose hash changed is
  updated in place (``updated_at`` moves); an unchanged one is not touched, so a second run with the same
  feeds changes no row. Only the source that first brought an article updates it (same feed URL, or same feed
  name after a move): another feed's copy of it (syndication, an aggregator) never replaces its date or text.
* **One transaction** — articles, per-feed health (``feed_fetches``) and conditional-GET validators
  (``feed_state``) are written together; an error while writing leaves every table as it was.
* **Faults** — a broken feed is recorded with its error and never stops the others. When every feed
  failed, the health rows are still committed and :class:`AllFeedsFailed` is raised.
* **Credentials** — a feed URL's user:password is used for the request only: ``feed_url`` everywhere (rows,
  health, validators, errors, logs) is the URL with them redacted (``***@``). Rows an older version stored under
  the full URL are renamed at the next run (:func:`_forget_credentials`), and link-less items keep the ids they were
  stored under (:func:`_legacy_ids`).
* **Validators** — kept only from a document read whole (or cut at the size cap, which a refetch cuts alike):
  a body the network cut short is fetched in full again next time, not answered 304.
* **Empty feeds** — a document with no items is a warning (:data:`EMPTY_FEED`), not an error: a moved feed
  often leaves an empty channel behind. A 304 (or an unchanged file) keeps the warning while the last document
  read was empty, so the feed stays flagged until it lists items again.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import duckdb
import polars as pl

from pipeline.ingest.feeds import Feed, redact
from pipeline.ingest.fetch import Fetched, fetch_all, run_sync
from pipeline.ingest.parse import Entry, FeedParseError, ParsedFeed, parse_feed
from warehouse import raw
from warehouse.config import Settings
from warehouse.crashpoints import crash_point
from warehouse.db import transaction, utcnow

log = logging.getLogger(__name__)

FUTURE_SLACK = timedelta(days=1)  # a date later than fetched_at + this is not believed
OLDEST_DATE = datetime(1995, 1, 1)  # earlier dates are CMS placeholders (1970-01-01 and friends)
EMPTY_FEED = "feed answered with no items: check that the URL still is the publisher's feed"


@dataclass
class FeedResult:
    feed: Feed
    http_status: int | None
    items_seen: int
    items_new: int
    items_updated: int
    not_modified: bool
    bytes: int | None
    duration_ms: float
    error: str | None
    started_at: datetime | None = None
    warning: str | None = None  # items were read, but something was off (cut body, lenient parse, ...)
    empty: bool = False  # the document read (this time, or last time for a 304) held no items: EMPTY_FEED


@dataclass
class IngestReport:
    run_id: str
    results: list[FeedResult]
    new: int
    updated: int
    unchanged: int
    duration_ms: float = 0.0
    started_at: datetime | None = None
    # Where the time went: fetch (with parsing overlapped), building rows, writing the transaction.
    timings_ms: dict[str, float] = field(default_factory=dict)
    total: int = 0  # articles in raw_articles after the merge
    # raw_articles' contents in a word: its row count and newest updated_at (a merge that changes nothing keeps it)
    version: str = ""
    failed: list[FeedResult] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.failed = [r for r in self.results if r.error is not None]

    @property
    def all_failed(self) -> bool:
        """True when there were feeds to fetch and none of them gave a usable answer."""
        return bool(self.results) and len(self.failed) == len(self.results)


class AllFeedsFailed(RuntimeError):
    """Every feed of a run failed; the message lists each feed and why. Health rows were recorded."""

    def __init__(self, report: IngestReport) -> None:
        lines = [f"all {len(report.results)} feeds failed (run {report.run_id}):"]
        lines += [f"  - {r.feed.name} <{r.feed.url}>: {r.error}" for r in report.results]
        super().__init__("\n".join(lines))
        self.report = report


def new_run_id() -> str:
    return f"ingest-{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def article_id(entry: Entry, feed_url: str) -> str | None:
    """The stable id of an entry, or ``None`` when it has no link, guid or title to be known by."""
    if entry.url:
        return "a_" + _digest(entry.url, 16)
    if entry.guid:
        return "a_" + _digest(f"guid\n{feed_url}\n{entry.guid}", 16)
    if entry.title:
        return "a_" + _digest(f"title\n{feed_url}\n{entry.title}", 16)
    return None


def content_hash(entry: Entry) -> str:
    return _digest(f"{entry.title}\x1f{entry.summary}\x1f{entry.content_html or ''}", 32)


def published_at(published: datetime | None, fetched_at: datetime) -> tuple[datetime, bool]:
    """``(published_at, date_inferred)`` by the missing / far-future / too-old rule."""
    if published is None or published > fetched_at + FUTURE_SLACK or published < OLDEST_DATE:
        return fetched_at.replace(microsecond=0), True
    return published, False


def ingest(
    con: duckdb.DuckDBPyConnection, feeds: list[Feed], settings: Settings, *, run_id: str | None = None
) -> IngestReport:
    """Fetch and merge every enabled feed in one transaction; see the module notes for the rules."""
    active = [f for f in feeds if f.enabled]
    _forget_credentials(con, active)
    got = _download(active, settings, _validators(con, active))
    return _merge(con, active, got, run_id or new_run_id())


def ingest_feeds(
    connect: Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]], feeds: list[Feed], settings: Settings,
    *, run_id: str | None = None,
) -> IngestReport:
    """``ingest``, opening the warehouse (``connect()``) only to read the feeds' validators and then to merge: a
    writer locks every other process out of the file, and the downloads can take up to the fetch deadline."""
    active = [f for f in feeds if f.enabled]
    with connect() as con:
        _forget_credentials(con, active)
        validators = _validators(con, active)
    got = _download(active, settings, validators)
    with connect() as con:
        return _merge(con, active, got, run_id or new_run_id())


def _urls(active: list[Feed]) -> list[str]:
    """What is requested: the URLs with their credentials (results are keyed by these)."""
    return list(dict.fromkeys(f.fetch_url for f in active))


def _validators(con: duckdb.DuckDBPyConnection, active: list[Feed]) -> dict[str, tuple[str | None, str | None]]:
    """The stored validators (under the redacted URL), by the URL requested."""
    state = raw.load_feed_state(con, [f.url for f in active])
    return {f.fetch_url: state[f.url] for f in active if f.url in state}


# Tables whose feed_url an older version wrote with the feed's credentials in it.
_FEED_URL_TABLES = ("raw_articles", "articles", "feed_fetches")
# feed_fetches.error with the credentials of the URLs in it masked (pipeline.ingest.feeds.redact, in SQL)
_REDACTED_ERROR = r"regexp_replace(error, '([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@', '\1***@', 'g')"


def _forget_credentials(con: duckdb.DuckDBPyConnection, active: list[Feed]) -> None:
    """Rename the rows stored under a feed's full URL (credentials included, as older versions stored them) to the
    redacted one: the secret leaves the warehouse, and the feed keeps its validators, health and articles."""
    moved = [(f.fetch_url, f.url) for f in active if f.fetch_url != f.url]
    if not moved:
        return
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    with transaction(con):
        for full, shown in moved:
            for table in (t for t in _FEED_URL_TABLES if t in tables):
                con.execute(f"UPDATE {table} SET feed_url = ? WHERE feed_url = ?", [shown, full])
            con.execute(f"""UPDATE feed_fetches SET error = {_REDACTED_ERROR}
                            WHERE feed_url = ? AND error <> {_REDACTED_ERROR}""", [shown])  # a redirect's url in it
            con.execute("""INSERT INTO feed_state (feed_url, etag, last_modified, updated_at)
                           SELECT ?, etag, last_modified, updated_at FROM feed_state WHERE feed_url = ?
                           ON CONFLICT DO NOTHING""", [shown, full])
            con.execute("DELETE FROM feed_state WHERE feed_url = ?", [full])


@dataclass
class _Downloaded:
    fetched: dict[str, Fetched]
    parsed: dict[str, ParsedFeed | FeedParseError]
    parse_ms: dict[str, float]
    started_at: datetime
    t0: float
    t_fetched: float


def _download(
    active: list[Feed], settings: Settings, validators: dict[str, tuple[str | None, str | None]]
) -> _Downloaded:
    t0 = time.perf_counter()
    run_started = utcnow()
    urls = _urls(active)
    parsed: dict[str, ParsedFeed | FeedParseError] = {}
    parse_ms: dict[str, float] = {}

    def on_done(got: Fetched) -> None:
        # Runs in the event loop as each body arrives, so parsing overlaps the other downloads.
        if got.error is not None or got.body is None:
            return
        p0 = time.perf_counter()
        try:
            parsed[got.url] = parse_feed(
                got.body,
                base_url=got.final_url or redact(got.url, ""),  # relative links get no credentials
                content_type=got.content_type,
                truncated=got.truncated,
            )
            parsed[got.url] = _capped(parsed[got.url], settings.feed_max_items)
        except FeedParseError as exc:
            parsed[got.url] = exc
        except Exception as exc:  # a parser bug on one odd document must not sink the other feeds
            log.exception("parsing %s failed", got.shown_url)
            parsed[got.url] = FeedParseError(f"could not parse the document ({type(exc).__name__}: {exc})")
        parse_ms[got.url] = (time.perf_counter() - p0) * 1000

    fetched = run_sync(fetch_all(urls, settings, validators, on_done)) if urls else {}
    return _Downloaded(fetched, parsed, parse_ms, run_started, t0, time.perf_counter())


def _merge(con: duckdb.DuckDBPyConnection, active: list[Feed], got_all: _Downloaded, run_id: str) -> IngestReport:
    fetched, parsed, parse_ms = got_all.fetched, got_all.parsed, got_all.parse_ms
    t0, t_fetched, run_started = got_all.t0, got_all.t_fetched, got_all.started_at
    copies: dict[str, list[tuple[int, Feed, dict]]] = {}  # article id -> (result index, feed, row) per copy
    results: list[FeedResult] = []
    state_rows: list[dict] = []
    saved_state: set[str] = set()
    dry = _still_empty(con, [f.url for f in active if fetched[f.fetch_url].not_modified])
    legacy: dict[str, str] = {}  # id -> the id an older version gave it (its feed URL with credentials)
    for feed in active:
        got = fetched[feed.fetch_url]
        result = FeedResult(
            feed=feed,
            http_status=got.status,
            items_seen=0,
            items_new=0,
            items_updated=0,
            not_modified=got.not_modified,
            bytes=got.nbytes,
            duration_ms=got.duration_ms + parse_ms.get(feed.fetch_url, 0.0),
            error=got.error,
            started_at=got.started_at,
        )
        results.append(result)
        outcome = parsed.get(feed.fetch_url)
        if isinstance(outcome, FeedParseError):
            result.error = str(outcome)
        if result.error is not None or outcome is None or isinstance(outcome, FeedParseError):
            if result.error is None and not got.not_modified:
                result.error = "no document received"
            elif result.error is None and feed.url in dry:  # unchanged since it answered empty: still empty
                result.empty, result.warning = True, EMPTY_FEED
            continue
        result.warning = outcome.warning
        result.items_seen = len(outcome.entries)
        if not outcome.entries:  # first: the status line cuts long warnings at their end
            result.empty = True
            result.warning = f"{EMPTY_FEED}; {result.warning}" if result.warning else EMPTY_FEED
        if feed.url not in saved_state:  # validators only after a good parse: a bad body is fetched again
            saved_state.add(feed.url)
            # A body cut by the network: its validators would get 304s, and the items after the cut never come.
            cut = outcome.reader == "xml-partial" and not got.truncated
            state_rows.append(
                {
                    "feed_url": feed.url,
                    "etag": None if cut else got.etag,
                    "last_modified": None if cut else got.last_modified,
                    "updated_at": run_started,
                }
            )
        fetched_at = got.started_at
        language = feed.language or outcome.language
        untitled = 0
        for entry in outcome.entries:
            if not entry.title.strip():  # a news item needs a headline: the API and the checks require one
                untitled += 1
                continue
            aid = article_id(entry, feed.url)
            assert aid is not None  # a titled entry is known by its link, guid or title
            if feed.fetch_url != feed.url and not entry.url:
                legacy[aid] = article_id(entry, feed.fetch_url) or aid
            if any(copy[1] is feed for copy in copies.get(aid, ())):
                continue  # twice in one feed: its first
            copies.setdefault(aid, []).append((len(results) - 1, feed, _row(aid, entry, feed, fetched_at, language)))
        if untitled:
            note = f"{untitled} items skipped: no title"
            result.warning = f"{result.warning}; {note}" if result.warning else note

    copies = _moved(con, _legacy_ids(con, copies, legacy))
    articles, owner = _one_row_each(con, copies)
    t_built = time.perf_counter()
    crash_point("ingest:fetched")
    with transaction(con):
        new_ids, updated_ids = raw.merge_articles(con, articles)
        crash_point("ingest:writing")
        raw.save_feed_state(con, pl.DataFrame(state_rows, schema=raw.STATE_SCHEMA))
        for aid, idx in owner.items():
            if aid in new_ids:
                results[idx].items_new += 1
            elif aid in updated_ids:
                results[idx].items_updated += 1
        # Health rows last: a failure anywhere above rolls back the whole run.
        raw.record_fetches(con, _fetch_frame(run_id, results))
    total, newest = con.execute("SELECT count(*), max(updated_at) FROM raw_articles").fetchall()[0]

    report = IngestReport(
        run_id=run_id,
        results=results,
        new=len(new_ids),
        updated=len(updated_ids),
        unchanged=len(owner) - len(new_ids) - len(updated_ids),
        duration_ms=(time.perf_counter() - t0) * 1000,
        started_at=run_started,
        total=total,
        version=f"{total}:{newest.isoformat() if newest else '-'}",
        timings_ms={
            "fetch_and_parse": (t_fetched - t0) * 1000,
            "parse": sum(parse_ms.values()),
            "build_rows": (t_built - t_fetched) * 1000,
            "write": (time.perf_counter() - t_built) * 1000,
        },
    )
    for r in report.failed:
        log.warning("feed %s <%s> failed: %s", r.feed.name, r.feed.url, r.error)
    log.info(
        "ingest %s: %d feeds (%d failed), %d new, %d updated, %d unchanged in %.0f ms",
        run_id, len(results), len(report.failed), report.new, report.updated, report.unchanged, report.duration_ms,
    )  # fmt: skip
    if report.all_failed:
        raise AllFeedsFailed(report)
    return report


def _still_empty(con: duckdb.DuckDBPyConnection, urls: list[str]) -> set[str]:
    """Of feeds that answered 304 (or a file unchanged), those whose last fetch that read a document found no
    items (or was such a 304 itself): their document is still the empty one."""
    if not urls:
        return set()
    rows = con.execute(
        """SELECT feed_url, arg_max((NOT not_modified AND items_seen = 0)
                                    OR coalesce(contains(warning, ?), false), started_at)
           FROM feed_fetches WHERE error IS NULL AND list_contains(?::VARCHAR[], feed_url)
           GROUP BY feed_url""",
        [EMPTY_FEED, urls],
    ).fetchall()
    return {url for url, empty in rows if empty}


def _row(aid: str, entry: Entry, feed: Feed, fetched_at: datetime, language: str | None) -> dict[str, Any]:
    when, inferred = published_at(entry.published, fetched_at)
    return {
        "id": aid, "source_name": feed.name, "feed_url": feed.url, "url": entry.url, "guid": entry.guid,
        "title": entry.title, "summary": entry.summary, "content_html": entry.content_html, "authors": entry.authors,
        "categories": entry.categories, "image_url": entry.image_url, "published_at": when,
        "date_inferred": inferred, "published_offset": None if inferred else entry.published_offset,
        "fetched_at": fetched_at, "updated_at": fetched_at, "language": language,
        "content_hash": content_hash(entry),
    }


def _capped(feed: ParsedFeed | FeedParseError, most: int) -> ParsedFeed | FeedParseError:
    """At most ``most`` items of a document, the newest (an item without a date counts as new; in document order
    among equals), with a warning beyond: one odd feed of thousands of items would hold the run (scoring,
    stories) for hours. Kept in document order."""
    if isinstance(feed, FeedParseError) or len(feed.entries) <= most:
        return feed
    note = (f"{len(feed.entries)} items, more than a feed holds: kept the newest {most} "
            "(CRYPTOWIRE_FEED_MAX_ITEMS raises the limit)")
    def age(k: int) -> tuple[bool, float, int]:
        when = feed.entries[k].published
        return (when is not None, -when.timestamp() if when is not None else 0.0, k)

    newest = sorted(range(len(feed.entries)), key=age)
    keep = set(newest[:most])
    feed.entries = [e for k, e in enumerate(feed.entries) if k in keep]
    feed.warning = f"{feed.warning}; {note}" if feed.warning else note
    return feed


def _legacy_ids(con: duckdb.DuckDBPyConnection, copies: dict[str, list[tuple[int, Feed, dict]]],
                legacy: dict[str, str]) -> dict[str, list[tuple[int, Feed, dict]]]:
    """``copies`` with each link-less item of a feed with credentials moved to the id an older version stored it
    under (keyed by the full URL; ids are now keyed by the redacted one, so that no id depends on a password)."""
    stored = raw.stored_sources(con, list(set(legacy.values())))
    out = dict(copies)
    for aid, old in legacy.items():
        if old in stored and aid in out and old not in out:
            out[old] = [(i, f, {**row, "id": old}) for i, f, row in out.pop(aid)]
    return out


def _link_variants(url: str) -> list[str]:
    """The same link but for the scheme, a leading ``www.`` and a trailing ``/``: what a site move or a template
    change alters while the article stays the same."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("http", "https") or not rest:
        return []
    host, slash, path = rest.partition("/")
    bare = host.removeprefix("www.")
    path = slash + path
    paths = {path, path.rstrip("/") or "/", path if path.endswith("/") or "?" in path else path + "/"}
    return [f"{s}://{h}{p}" for s in ("http", "https") for h in {bare, "www." + bare} for p in paths
            if f"{s}://{h}{p}" != url]


def _moved(con: duckdb.DuckDBPyConnection, copies: dict[str, list[tuple[int, Feed, dict]]],
           ) -> dict[str, list[tuple[int, Feed, dict]]]:
    """``copies`` with each item that is new by its link, but stored by its source under another link (the same
    guid, or a variant of the link: :func:`_link_variants`), moved to the stored id; its link is then updated in
    place. Only a single stored match counts, never an id this run also lists or two items claim (then they are
    distinct items); a guid only when the feed gives it to no other item in this run and the stored item has the
    same real publication time (some feeds reuse guids: one for every item, or the item's position, and a daily
    column repeats its title); a variant of the link only when the two guids do not differ.

    Known limit: the new link's own id is never stored, so the item goes through this lookup at every run while
    the feed lists it (a few ms), and a copy at the new link from another source is not recognised as the same."""
    stored = raw.stored_sources(con, list(copies))
    fresh = {aid: found for aid, found in copies.items() if aid not in stored}
    if not fresh:
        return copies
    guid_uses: dict[tuple[str, str], int] = {}
    for found in copies.values():
        for _, feed, row in found:
            if row["guid"]:
                guid_uses[(feed.url, row["guid"])] = guid_uses.get((feed.url, row["guid"]), 0) + 1
    asks: list[raw.MovedAsk] = []
    for aid, found in fresh.items():
        _, feed, row = found[0]
        when = None if row["date_inferred"] else row["published_at"]
        own_guid = bool(row["guid"]) and guid_uses[(feed.url, row["guid"])] == 1 and when is not None
        variants = [f"a_{_digest(v, 16)}" for v in _link_variants(row["url"])] if row["url"] else []
        if own_guid or variants:
            asks.append(raw.MovedAsk(aid, feed.url, feed.name, row["guid"] or None, own_guid, when, variants))
    found_ids = raw.stored_as(con, asks)
    claims: dict[str, int] = {}
    for old in found_ids.values():
        claims[old] = claims.get(old, 0) + 1
    out = dict(copies)
    for aid, old in found_ids.items():
        if old in copies or claims[old] > 1:  # the old link is in this run too, or two items claim it: distinct
            continue
        moved = [(i, f, {**row, "id": old}) for i, f, row in out.pop(aid)]
        out[old] = moved
        log.debug("article %s: listed under %s now; kept under its id", old, moved[0][2]["url"])
    return out


def _one_row_each(con: duckdb.DuckDBPyConnection, copies: dict[str, list[tuple[int, Feed, dict]]],
                  ) -> tuple[pl.DataFrame, dict[str, int]]:
    """One row per article, and the index of the feed result it counts for: the first copy (feeds in file order),
    unless the article is stored already and another copy comes from the source that first brought it, the only
    one that updates it (warehouse.raw)."""
    cols: dict[str, list] = {c: [] for c in raw.ARTICLE_COLUMNS}
    owner: dict[str, int] = {}
    stored = raw.stored_sources(con, [aid for aid, found in copies.items() if len(found) > 1])
    for aid, found in copies.items():
        index, _, row = found[0]
        if aid in stored:
            first_url, first_name = stored[aid]
            index, _, row = next((c for c in found if c[1].url == first_url or c[1].name == first_name), found[0])
        owner[aid] = index
        for name, value in row.items():
            cols[name].append(value)
    return raw.article_frame(cols), owner


def _fetch_frame(run_id: str, results: list[FeedResult]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": [run_id] * len(results),
            "feed_name": [r.feed.name for r in results],
            "feed_url": [r.feed.url for r in results],
            "started_at": [r.started_at for r in results],
            "duration_ms": [r.duration_ms for r in results],
            "http_status": [r.http_status for r in results],
            "items_seen": [r.items_seen for r in results],
            "items_new": [r.items_new for r in results],
            "items_updated": [r.items_updated for r in results],
            "not_modified": [r.not_modified for r in results],
            "bytes": [r.bytes for r in results],
            "error": [r.error for r in results],
            "warning": [r.warning for r in results],
        },
        schema=raw.FETCH_SCHEMA,
    )
