"""Partitioned serving snapshots: a *set* of immutable part files, published atomically as one.

A full-copy snapshot (``warehouse.publish.publish_snapshot``) rewrites every curated row on each publish, so its
cost grows with the whole history. A set splits what the API serves by time into parts:

- **periods** of each row's time (``news``: ``published_at``; ``stories``: ``first_seen``; ``events``:
  ``created_at``; ``sentiment``: ``bucket_start``), relative to the publish time ``now`` (UTC): whole **months**
  before the current month, **days** of the current month before today, **hours** of today before the current
  hour, and the **head**: the current hour and anything newer. The head is small whatever the history's length;
  as time passes, hours close into days and days into months (each closed once: a day or a month of rows).
- one **part file** per period (``part-<period>-<UTC time>-<random>.duckdb``), holding that period's rows of the
  four tables in serving order with a *local* ``pos`` (0, 1, ... newest first), the same columns and indexes as a
  full snapshot. A part is never rewritten: it is reused by later sets as long as its period's **fingerprint**
  (per table: row count, sum of the time column, the newest change stamps — ``enriched_at``, ``tagged_at``,
  ``fetched_at``, ``updated_at``, ``withdrawn_at`` —, and an XOR of row hashes over the served values, computed
  for all periods in one grouped query per table) is unchanged and none of its articles belongs to a story that
  changed since the previous set (``stories.updated_at`` after the previous set's watermark: the story summary is
  part of each news row). Otherwise the period gets a new part file under a new name.
- a sidecar ``part-....json`` per part: period, fingerprint, row counts, the newest and oldest serving keys of each
  table, and the part's filter values (sources, topics, tickers), so a publish never opens reused parts.
- the head part also holds the set-wide tables: ``filter_values`` (the union of every part's values) and
  ``snapshot_info`` (tag, creation time, ``format`` = 2, total articles and events).
- a **manifest** ``set-<UTC time>-<random>.json`` lists the parts in serving order (newest period first) with
  their counts and boundary keys; ``snapshots/CURRENT`` names it, replaced atomically as for a single file.

Readers (``open_set``) use one in-memory DuckDB connection that ATTACHes every part READ_ONLY and defines views
``news``, ``stories``, ``events`` (the parts' rows with ``pos`` shifted by the rows of the newer parts, so ``pos``
is dense and global as in a single file), ``sentiment``, ``filter_values`` and ``snapshot_info``: every query
written for a single file runs unchanged. The API's pages go to the parts directly (``Layout``: per table, each
part's relation, offset, row count and boundary keys), so a page reads one part (two when it straddles periods).

Crash safety: parts are written as ``.partial``, checkpointed, fsynced and renamed; sidecars and the manifest are
written to a temp file, fsynced and renamed; ``CURRENT`` switches last. A crash leaves at worst partial files and
complete parts or a manifest that ``CURRENT`` does not name: ``repair_snapshots`` removes the first, pruning the
rest (parts no kept set references and no process holds open). A publish holds ``snapshots/.publish.lock``
(flock) so that pruning elsewhere never takes the parts of a set being written for orphans.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from warehouse.crashpoints import crash_point
from warehouse.publish import (
    PART_PREFIX,
    PART_SUFFIX,
    PARTIAL,
    ROW_GROUP_SIZE,
    SET_PREFIX,
    SET_SUFFIX,
    _fsync,
    _unlink,
    current_snapshot,
    point_to,
    prune_snapshots,
)

SET_FORMAT = 2
HEAD = "head"
LOCK = ".publish.lock"
EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)
TABLES = ("news", "stories", "events", "sentiment")
PAGED = ("news", "stories", "events")  # tables with pos, read page by page
TIME_COLUMN = {"news": "published_at", "stories": "first_seen", "events": "created_at"}


# --------------------------------------------------------------------------------------------- periods


@dataclass(frozen=True)
class Cuts:
    """Period boundaries for a publish at ``now``: months before ``month``, days before ``day``, hours before
    ``hour``, the head from ``hour`` on."""

    hour: datetime
    day: datetime
    month: datetime

    @classmethod
    def at(cls, now: datetime) -> Cuts:
        hour = now.replace(minute=0, second=0, microsecond=0)
        day = hour.replace(hour=0)
        return cls(hour, day, day.replace(day=1))

    def sql(self, col: str) -> str:
        """The period key of ``col`` (a TIMESTAMP expression)."""
        return (
            f"CASE WHEN {col} >= TIMESTAMP '{self.hour}' THEN '{HEAD}' "
            f"WHEN {col} >= TIMESTAMP '{self.day}' THEN 'h' || strftime({col}, '%Y%m%dT%H') "
            f"WHEN {col} >= TIMESTAMP '{self.month}' THEN 'd' || strftime({col}, '%Y%m%d') "
            f"ELSE 'm' || strftime({col}, '%Y%m') END"
        )


def period_range(period: str, cuts: Cuts) -> tuple[datetime | None, datetime | None]:
    """``[lo, hi)`` of a period key (None: unbounded)."""
    if period == HEAD:
        return cuts.hour, None
    kind, text = period[0], period[1:]
    if kind == "h":
        lo = datetime.strptime(text, "%Y%m%dT%H")
        return lo, lo + timedelta(hours=1)
    if kind == "d":
        lo = datetime.strptime(text, "%Y%m%d")
        return lo, lo + timedelta(days=1)
    if kind == "m":
        lo = datetime.strptime(text, "%Y%m")
        return lo, (lo.replace(year=lo.year + 1, month=1) if lo.month == 12 else lo.replace(month=lo.month + 1))
    raise ValueError(f"not a period: {period!r}")


def serving_order(periods: list[str], cuts: Cuts) -> list[str]:
    """Newest period first: the head, then by start time descending (periods never overlap)."""
    return sorted(periods, key=lambda p: (p != HEAD, -((period_range(p, cuts)[0] or EPOCH) - EPOCH).total_seconds()))


# --------------------------------------------------------------------------------------------- fingerprints

# One grouped query per table: per hour first (cheap), then per period. Decomposable aggregates only.
FINGERPRINT_SQL = {
    "news": """
        SELECT date_trunc('hour', published_at) AS h, count(*) AS n, sum(epoch_us(published_at))::HUGEINT AS s,
               bit_xor(hash(id, title, content_hash, date_inferred, sentiment, sentiment_score, tickers, topics,
                            source_name, url, image_url)) AS x,
               max(enriched_at) AS m1, max(tagged_at) AS m2, max(fetched_at) AS m3
        FROM articles GROUP BY 1""",
    "stories": """
        SELECT date_trunc('hour', first_seen) AS h, count(*) AS n, sum(epoch_us(first_seen))::HUGEINT AS s,
               bit_xor(hash(id, title, articles, sources, last_seen)) AS x,
               max(updated_at) AS m1, NULL::TIMESTAMP AS m2, NULL::TIMESTAMP AS m3
        FROM stories GROUP BY 1""",
    "events": """
        SELECT date_trunc('hour', created_at) AS h, count(*) AS n, sum(epoch_us(created_at))::HUGEINT AS s,
               bit_xor(hash(id, withdrawn_reason, date)) AS x,
               max(updated_at) AS m1, max(withdrawn_at) AS m2, NULL::TIMESTAMP AS m3
        FROM prediction_events GROUP BY 1""",
    "sentiment": """
        SELECT date_trunc('hour', bucket_start) AS h, count(*) AS n, 0::HUGEINT AS s,
               bit_xor(hash(ticker, grain, bucket_start, articles, scored, mean_score)) AS x,
               max(updated_at) AS m1, NULL::TIMESTAMP AS m2, NULL::TIMESTAMP AS m3
        FROM asset_sentiment GROUP BY 1""",
}


def fingerprints(con: duckdb.DuckDBPyConnection, cuts: Cuts) -> dict[str, str]:
    """Per period with any row: a short hash of every table's aggregates over that period."""
    figures: dict[str, dict[str, list[str]]] = {}
    for table, inner in FINGERPRINT_SQL.items():
        rows = con.execute(
            f"""SELECT {cuts.sql('h')} AS period, sum(n)::VARCHAR, sum(s)::VARCHAR, bit_xor(x)::VARCHAR,
                       max(m1)::VARCHAR, max(m2)::VARCHAR, max(m3)::VARCHAR
                FROM ({inner}) g GROUP BY 1"""
        ).fetchall()
        for period, *values in rows:
            figures.setdefault(period, {})[table] = [str(v) for v in values]
    return {
        p: hashlib.sha256(json.dumps(f, sort_keys=True).encode()).hexdigest()[:20] for p, f in figures.items()
    }


def story_watermark(con: duckdb.DuckDBPyConnection) -> str | None:
    value = con.execute("SELECT max(updated_at) FROM stories").fetchall()[0][0]
    return None if value is None else value.isoformat()


def periods_of_changed_stories(con: duckdb.DuckDBPyConnection, cuts: Cuts, since: str) -> set[str]:
    """Periods holding an article of a story updated after ``since`` (its summary in those news rows changed)."""
    rows = con.execute(
        f"""SELECT DISTINCT {cuts.sql('h')} FROM (
                SELECT DISTINCT date_trunc('hour', published_at) AS h FROM story_articles
                WHERE story_id IN (SELECT id FROM stories WHERE updated_at > ?::TIMESTAMP))""",
        [since],
    ).fetchall()
    return {r[0] for r in rows}


# --------------------------------------------------------------------------------------------- part contents


def _range_sql(col: str, lo: datetime | None, hi: datetime | None) -> str:
    conds = []
    if lo is not None:
        conds.append(f"{col} >= TIMESTAMP '{lo}'")
    if hi is not None:
        conds.append(f"{col} < TIMESTAMP '{hi}'")
    return " AND ".join(conds) or "true"


# As warehouse.publish.NEWS_SQL, for one period. story_first: the earliest article (published_at, id) of the
# story among all its articles, in any period.
PART_NEWS_SQL = """
CREATE TABLE {db}.news AS
WITH a AS (SELECT * FROM articles WHERE {where}),
sa AS (SELECT article_id, story_id FROM story_articles WHERE article_id IN (SELECT id FROM a)),
firsts AS (
    SELECT s.story_id, arg_min(s.article_id, (ar.published_at, ar.id)) AS first_id
    FROM story_articles s JOIN articles ar ON ar.id = s.article_id
    WHERE s.story_id IN (SELECT story_id FROM sa) GROUP BY s.story_id
)
SELECT
    (row_number() OVER (ORDER BY a.published_at DESC, a.id DESC) - 1)::BIGINT AS pos,
    a.id,
    a.published_at,
    coalesce(a.date_inferred, false) AS date_inferred,
    a.title,
    a.summary AS text,
    CASE lower(a.sentiment)
        WHEN 'positive' THEN 'Positive' WHEN 'negative' THEN 'Negative' WHEN 'neutral' THEN 'Neutral'
    END AS sentiment,
    a.sentiment_score,
    coalesce(a.tickers, []::VARCHAR[]) AS tickers,
    coalesce(a.topics, []::VARCHAR[]) AS topics,
    a.source_name,
    a.url AS news_url,
    a.image_url,
    coalesce(ts.ticker_sentiments, []) AS ticker_sentiments,
    sa.story_id,
    st.title AS story_title,
    st.articles AS story_articles,
    st.sources AS story_sources,
    st.first_seen AS story_first_seen,
    sa.story_id IS NULL OR f.first_id = a.id AS story_first
FROM a
LEFT JOIN sa ON sa.article_id = a.id
LEFT JOIN stories st ON st.id = sa.story_id
LEFT JOIN firsts f ON f.story_id = sa.story_id
LEFT JOIN (
    SELECT t.article_id, list(struct_pack(ticker := t.ticker, label := CASE lower(t.sentiment) WHEN 'positive' THEN 'Positive'
                                          WHEN 'negative' THEN 'Negative' WHEN 'neutral' THEN 'Neutral' END,
                                          score := t.sentiment_score)
                ORDER BY list_position(a2.tickers, t.ticker)) AS ticker_sentiments
    FROM article_tickers t JOIN a a2 ON a2.id = t.article_id
    WHERE t.sentiment IS NOT NULL GROUP BY t.article_id
) ts ON ts.article_id = a.id
ORDER BY pos
"""

PART_STORIES_SQL = """
CREATE TABLE {db}.stories AS
WITH s AS (SELECT * FROM stories WHERE {where})
SELECT
    (row_number() OVER (ORDER BY s.first_seen DESC, s.id DESC) - 1)::BIGINT AS pos,
    s.id, s.title, s.first_seen, s.last_seen, s.articles, s.sources, s.mean_sentiment, s.tickers, s.topics,
    m.article_ids
FROM s
JOIN (SELECT story_id, list(article_id ORDER BY published_at, article_id) AS article_ids
      FROM story_articles WHERE story_id IN (SELECT id FROM s) GROUP BY story_id) m ON m.story_id = s.id
ORDER BY pos
"""

PART_EVENTS_SQL = """
CREATE TABLE {db}.events AS
SELECT
    (row_number() OVER (ORDER BY created_at DESC, id DESC) - 1)::BIGINT AS pos,
    id, date_trunc('millisecond', created_at) AS created_at, date, event_title, event_description, source_url,
    image_url, options, tags, asset, kind, subject, comparator, threshold, currency, resolution_criteria,
    resolution_source, withdrawn_reason
FROM prediction_events WHERE {where}
ORDER BY pos
"""

PART_SENTIMENT_SQL = """
CREATE TABLE {db}.sentiment AS
SELECT ticker, grain, bucket_start, articles, positive, neutral, negative, scored, mean_score
FROM asset_sentiment WHERE {where}
ORDER BY ticker, grain, bucket_start
"""

PART_SQL = {
    "news": (PART_NEWS_SQL, "published_at"),
    "stories": (PART_STORIES_SQL, "first_seen"),
    "events": (PART_EVENTS_SQL, "created_at"),
    "sentiment": (PART_SENTIMENT_SQL, "bucket_start"),
}
INDEXES = {"news": "id", "events": "created_at", "stories": "id"}

VALUES_SQL = """
SELECT 'newsSources' AS kind, source_name AS value FROM (SELECT DISTINCT source_name FROM {db}.news)
UNION ALL
SELECT 'newsTopics', t FROM (SELECT DISTINCT unnest(topics) AS t FROM {db}.news)
UNION ALL
SELECT 'tickers', t FROM (SELECT unnest(tickers) AS t FROM {db}.news UNION SELECT asset FROM {db}.events)
"""


def _us(dt: datetime) -> int:
    return (dt - EPOCH) // _US


@dataclass
class Part:
    """A part as the manifest and its sidecar describe it."""

    name: str
    period: str
    fingerprint: str
    counts: dict[str, int]
    keys: dict[str, list[Any]]  # table -> [newest µs, newest id, oldest µs, oldest id] (ids "" for events)
    values: dict[str, list[str]]

    def entry(self) -> dict[str, Any]:
        return {"name": self.name, "period": self.period, "fingerprint": self.fingerprint, "counts": self.counts,
                "keys": self.keys}

    @classmethod
    def load(cls, snapshots_dir: Path, name: str) -> Part:
        data = json.loads((snapshots_dir / sidecar_name(name)).read_text())
        return cls(name, data["period"], data["fingerprint"], data["counts"], data["keys"], data["values"])


def sidecar_name(part_name: str) -> str:
    return part_name.removesuffix(PART_SUFFIX) + ".json"


def _stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%f") + "Z-" + secrets.token_hex(3)


def _write_json(path: Path, data: Any) -> None:
    """Atomically: a temp file, fsynced, renamed (the caller fsyncs the directory)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def build_part(
    con: duckdb.DuckDBPyConnection, snapshots_dir: Path, period: str, cuts: Cuts, fingerprint: str,
    head: dict[str, Any] | None = None,
) -> Part:
    """Write one period's rows into a new part file; ``head`` (tag, created_at, values, totals) makes it the head."""
    name = f"{PART_PREFIX}{period}-{_stamp()}{PART_SUFFIX}"
    path = snapshots_dir / name
    partial = path.with_name(name + PARTIAL)
    alias = f"cw_part_{secrets.token_hex(4)}"
    literal = str(partial.resolve()).replace("'", "''")
    lo, hi = period_range(period, cuts)
    con.execute(f"ATTACH '{literal}' AS {alias} (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
    try:
        for table in TABLES:
            sql, col = PART_SQL[table]
            con.execute(sql.format(db=alias, where=_range_sql(col, lo, hi)))
            if table in INDEXES:
                con.execute(f"CREATE UNIQUE INDEX {table}_{INDEXES[table]} ON {alias}.{table} ({INDEXES[table]})")
            crash_point("snapshot:writing" if head is not None else "parts:writing")
        counts = {t: int(con.execute(f"SELECT count(*) FROM {alias}.{t}").fetchall()[0][0]) for t in TABLES}
        keys: dict[str, list[Any]] = {}
        for table in PAGED:
            col = TIME_COLUMN[table]
            rows = con.execute(
                f"SELECT pos, {col}, id FROM {alias}.{table} WHERE pos = 0 OR pos = ? ORDER BY pos",
                [counts[table] - 1],
            ).fetchall()
            if rows:
                newest, oldest = rows[0], rows[-1]
                events = table == "events"  # created_at alone is the events' key
                keys[table] = [_us(newest[1]), "" if events else newest[2], _us(oldest[1]), "" if events else oldest[2]]
        values: dict[str, list[str]] = {"newsSources": [], "newsTopics": [], "tickers": []}
        for kind, value in con.execute(VALUES_SQL.format(db=alias)).fetchall():
            if value is not None:
                values[kind].append(value)
        for v in values.values():
            v.sort()
        if head is not None:
            merged = {k: sorted(set(v) | set(head["values"].get(k, []))) for k, v in values.items()}
            con.execute(f"CREATE TABLE {alias}.filter_values (kind VARCHAR, value VARCHAR)")
            rows_in = [(k, v) for k in sorted(merged) for v in merged[k]]
            if rows_in:
                con.executemany(f"INSERT INTO {alias}.filter_values VALUES (?, ?)", rows_in)
            con.execute(
                f"""CREATE TABLE {alias}.snapshot_info AS SELECT ?::VARCHAR AS tag, ?::TIMESTAMP AS created_at,
                    ?::INTEGER AS format, ?::BIGINT AS articles, ?::BIGINT AS events""",
                [head["tag"], head["created_at"], SET_FORMAT, head["articles"] + counts["news"],
                 head["events"] + counts["events"]],
            )
        con.execute(
            f"""CREATE TABLE {alias}.part_info AS SELECT ?::VARCHAR AS period, ?::TIMESTAMP AS lo, ?::TIMESTAMP AS hi,
                ?::VARCHAR AS fingerprint""",
            [period, lo, hi, fingerprint],
        )
        con.execute(f"CHECKPOINT {alias}")
    except BaseException:
        con.execute(f"DETACH {alias}")
        _unlink(partial)
        raise
    con.execute(f"DETACH {alias}")
    _fsync(partial)
    part = Part(name, period, fingerprint, counts, keys, values)
    _write_json(snapshots_dir / sidecar_name(name), {
        "period": period, "fingerprint": fingerprint, "counts": counts, "keys": keys, "values": values,
    })
    os.replace(partial, path)
    return part


# --------------------------------------------------------------------------------------------- publishing


@contextmanager
def publish_lock(snapshots_dir: Path, wait: bool = True) -> Iterator[bool]:
    """Held by a publish (flock on ``.publish.lock``); with ``wait=False`` yields False when another holds it."""
    fd = os.open(snapshots_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def read_manifest(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if data.get("format") != SET_FORMAT or not isinstance(data.get("parts"), list) or not data["parts"]:
        raise ValueError(f"{path.name} is not a snapshot set manifest")
    return data


def is_set(path: Path) -> bool:
    return path.name.startswith(SET_PREFIX) and path.name.endswith(SET_SUFFIX)


def publish_set(
    con: duckdb.DuckDBPyConnection, snapshots_dir: Path, keep: int = 3, now: datetime | None = None,
) -> Path:
    """Publish the curated tables of the warehouse connection ``con`` as a new set, reusing every part of the
    current set whose period did not change; prune; return the manifest's path. ``now`` (naive UTC, default the
    clock) places the period boundaries."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the set just published); got {keep}")
    snapshots_dir = Path(snapshots_dir)
    snapshots_dir.mkdir(parents=True, exist_ok=True)
    now = now or datetime.now(UTC).replace(tzinfo=None)
    cuts = Cuts.at(now)
    with publish_lock(snapshots_dir):
        previous: dict[str, Part] = {}
        watermark_before = None
        try:
            current = current_snapshot(snapshots_dir)
        except ValueError:
            current = None
        if current is not None and is_set(current) and current.exists():
            try:
                manifest = read_manifest(current)
                watermark_before = manifest.get("watermark")
                for entry in manifest["parts"]:
                    if entry["period"] != HEAD and (snapshots_dir / entry["name"]).exists():
                        previous[entry["period"]] = Part.load(snapshots_dir, entry["name"])
            except (OSError, ValueError, KeyError):
                previous = {}  # unreadable: build every part anew
        fps = fingerprints(con, cuts)
        watermark = story_watermark(con)
        dirty: set[str] = set()
        if previous and watermark_before is not None and watermark != watermark_before:
            dirty = periods_of_changed_stories(con, cuts, watermark_before)
        elif previous and watermark_before is None and watermark is not None:
            dirty = set(previous)  # stories appeared since: every story summary may have changed
        closed = [p for p in serving_order([p for p in fps if p != HEAD], cuts)]
        parts: list[Part] = []
        built = 0
        for period in closed:
            old = previous.get(period)
            if old is not None and old.fingerprint == fps[period] and period not in dirty:
                parts.append(old)
            else:
                parts.append(build_part(con, snapshots_dir, period, cuts, fps[period]))
                built += 1
        if built:
            _fsync(snapshots_dir)
        crash_point("parts:written")
        union: dict[str, set[str]] = {"newsSources": set(), "newsTopics": set(), "tickers": set()}
        for part in parts:
            for k, v in part.values.items():
                union.setdefault(k, set()).update(v)
        tag = secrets.token_hex(4)
        created_at = datetime.now(UTC).replace(tzinfo=None)
        head = build_part(con, snapshots_dir, HEAD, cuts, fps.get(HEAD, ""), head={
            "tag": tag, "created_at": created_at, "values": {k: sorted(v) for k, v in union.items()},
            "articles": sum(p.counts["news"] for p in parts), "events": sum(p.counts["events"] for p in parts),
        })
        parts.insert(0, head)
        manifest_path = snapshots_dir / f"{SET_PREFIX}{_stamp()}{SET_SUFFIX}"
        _write_json(manifest_path, {
            "format": SET_FORMAT, "tag": tag, "created_at": created_at.isoformat(), "now": now.isoformat(),
            "watermark": watermark, "articles": sum(p.counts["news"] for p in parts),
            "events": sum(p.counts["events"] for p in parts), "parts": [p.entry() for p in parts],
        })
        _fsync(snapshots_dir)
        crash_point("snapshot:written")
        point_to(snapshots_dir, manifest_path.name)
        crash_point("snapshot:published")
        prune_snapshots(snapshots_dir, keep, holding_lock=True)
    return manifest_path


# --------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Segment:
    """One part's rows of a paged table: ``rel`` (``p3.news``) holds global positions ``[offset, offset+count)``;
    ``newest`` / ``oldest`` are its first and last serving keys (µs, id)."""

    rel: str
    offset: int
    count: int
    newest: tuple[int, str]
    oldest: tuple[int, str]


Layout = dict[str, list[Segment]]


def open_set(manifest_path: Path) -> tuple[duckdb.DuckDBPyConnection, Layout]:
    """An in-memory connection with every part of the set attached read-only and the serving views defined, and
    the layout of its paged tables."""
    manifest = read_manifest(manifest_path)
    directory = manifest_path.parent
    con = duckdb.connect(":memory:")
    try:
        entries = manifest["parts"]
        for i, entry in enumerate(entries):
            literal = str((directory / entry["name"]).resolve()).replace("'", "''")
            con.execute(f"ATTACH '{literal}' AS p{i} (READ_ONLY)")
        layout: Layout = {}
        for table in TABLES:
            branches, offset, segments = [], 0, []
            for i, entry in enumerate(entries):
                n = int(entry["counts"].get(table, 0))
                if n == 0:
                    continue
                if table in PAGED:
                    k = entry["keys"][table]
                    segments.append(Segment(f"p{i}.{table}", offset, n, (k[0], k[1]), (k[2], k[3])))
                    branches.append(f"SELECT pos + {offset} AS pos, * EXCLUDE (pos) FROM p{i}.{table}")
                else:
                    branches.append(f"SELECT * FROM p{i}.{table}")
                offset += n
            if not branches:
                branches = [f"SELECT * FROM p0.{table}"]  # the head's, empty
            con.execute(f"CREATE VIEW {table} AS " + " UNION ALL ".join(branches))
            if table in PAGED:
                layout[table] = segments
        con.execute("CREATE VIEW filter_values AS SELECT * FROM p0.filter_values")
        con.execute("CREATE VIEW snapshot_info AS SELECT * FROM p0.snapshot_info")
    except BaseException:
        con.close()
        raise
    return con, layout


def open_snapshot(path: Path) -> tuple[duckdb.DuckDBPyConnection, Layout | None]:
    """A read-only connection to a published snapshot and its layout: a set (by its manifest), or a single file
    (layout None)."""
    if is_set(path):
        return open_set(path)
    return duckdb.connect(str(path), read_only=True), None


def connect_snapshot(path: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a published snapshot: a single file, or a set (by its manifest)."""
    return open_snapshot(path)[0]


def set_parts(manifest_path: Path) -> list[str]:
    """Part file names a manifest references."""
    return [e["name"] for e in read_manifest(manifest_path)["parts"]]
