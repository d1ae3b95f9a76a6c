"""Write side of ``prediction_events``: merging derived events in, and the SQL checks that guard the table.

``merge_events`` is one transaction of set-based statements over the candidates (registered as an Arrow
table). Events are never deleted: once listed, a question keeps its id and its ``created_at`` (the API's
pagination cursor), even if a later derivation no longer produces it.

``created_at`` of new events: the run's ``now`` truncated to milliseconds, plus ``i`` ms for the i-th new event
in order of its source article's publication (oldest first, so the newest news has the newest events), and
never earlier than the latest existing ``created_at`` + 1 ms. So it is unique, and grows with every run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import duckdb

from warehouse.crashpoints import crash_point
from warehouse.db import naive_utc, transaction

ID_PATTERN = r"^pevt_[A-Za-z0-9]{20}$"
_ID_RE = re.compile(ID_PATTERN)


class EventLike(Protocol):
    """What ``merge_events`` reads from a candidate (``pipeline.events.EventCandidate`` has it)."""

    id: str
    event_title: str
    event_description: str
    source_url: str | None
    image_url: str | None
    source_article_id: str
    source_published_at: datetime
    date: datetime
    options: tuple[str, ...]
    tags: tuple[str, ...]
    asset: str
    kind: str
    comparator: str | None
    threshold: float | None
    currency: str | None
    resolution_criteria: str
    resolution_source: str


@dataclass(frozen=True)
class MergeReport:
    candidates: int  # distinct event ids passed in
    inserted: int  # new events (they got a created_at)
    updated: int  # existing events whose text or source changed
    unchanged: int  # existing events left as they were
    sources_added: int  # new (event, article) pairs in prediction_event_sources
    not_derived: int  # stored events this derivation did not produce (kept, never deleted)
    events: int  # rows in prediction_events after the merge
    open: int  # of which open (date after now, not withdrawn)
    withdrawn: int = 0  # events marked withdrawn by this merge (``complete=True`` only)
    stands: int = 0  # not derived, yet not withdrawn: closed, or their source now reports rather than asks
    restored: int = 0  # withdrawn events derived again, so listed as open or closed again


_COLUMNS = [
    ("id", "string"), ("event_title", "string"), ("event_description", "string"), ("source_url", "string"),
    ("image_url", "string"), ("source_article_id", "string"), ("source_published_at", "timestamp"),
    ("date", "timestamp"), ("options", "list"), ("tags", "list"), ("asset", "string"), ("kind", "string"),
    ("subject", "string"), ("comparator", "string"), ("threshold", "float"), ("currency", "string"),
    ("resolution_criteria", "string"), ("resolution_source", "string"),
]
_NAMES = [name for name, _ in _COLUMNS]


def _arrow_tables(rows: list[dict[str, Any]], sources: list[dict[str, str]]) -> tuple[Any, Any]:
    import pyarrow as pa  # only merging needs it; readers of this module (checks, iso_ms) stay light

    types = {"string": pa.string(), "timestamp": pa.timestamp("us"), "list": pa.list_(pa.string()),
             "float": pa.float64()}
    schema = pa.schema([(name, types[kind]) for name, kind in _COLUMNS])
    sources_schema = pa.schema([("event_id", pa.string()), ("article_id", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema), pa.Table.from_pylist(sources, schema=sources_schema)


# Columns an existing event takes from a candidate whose source is the same article or an earlier one.
_CONTENT = [
    "event_title", "event_description", "source_url", "image_url", "source_article_id", "source_published_at",
    "options", "tags", "asset", "kind", "subject", "comparator", "threshold", "currency", "resolution_criteria",
    "resolution_source",
]
_SOURCE_NOT_LATER = (
    "(c.source_published_at < p.source_published_at OR (c.source_published_at = p.source_published_at "
    "AND c.source_article_id <= p.source_article_id))"
)
_DIFFERS = " OR ".join(f"p.{col} IS DISTINCT FROM c.{col}" for col in _CONTENT)


# The kinds the derivation writes (pipeline.events.templates.KINDS; a test keeps the two equal).
EVENT_KINDS = ("price_threshold", "etf_decision", "listing", "upgrade_or_launch", "token_unlock")

WITHDRAWN_DEFAULT = ("no article derives this question any more: the event rules, or what they read (the asset "
                     "registry, the reference prices), changed")
WITHDRAWN_MOVED = (
    "its source article now gives another question, {id} ({title}): the article was edited or re-dated, the "
    "reference price its direction was judged by changed, or the event rules changed"
)
_STATUS = "CASE WHEN withdrawn_reason IS NOT NULL THEN 'withdrawn' WHEN date > $now THEN 'open' ELSE 'closed' END"


def merge_events(
    con: duckdb.DuckDBPyConnection, candidates: Sequence[EventLike], now: datetime, *,
    complete: bool = False, refused: Mapping[str, str] | None = None,
) -> MergeReport:
    """Insert new events, refresh existing ones, record every source article; one transaction.

    An existing event keeps its id and ``created_at``; it takes the candidate's text and source when the
    candidate's source article is the same one or an earlier one, and, when ``complete``, always (the candidate's
    source is then the earliest article that asks the question now). ``status`` of every event is recomputed from ``date`` against ``now``.

    ``complete`` says the candidates are a derivation over every article: then a stored event that is not among
    them is withdrawn (kept, with ``status`` 'withdrawn' and the reason: ``refused[id]`` when a check refused
    it, else ``WITHDRAWN_DEFAULT``), and a withdrawn event derived again is restored. Two stand instead
    (``_standing``): a closed event, and an open one whose source article was edited since the event last
    changed and now asks no question (it reports the outcome, "Kraken lists TON, trading now live")."""
    now = naive_utc(now)
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # every stored time is whole milliseconds
    rows, sources = _prepare(candidates)
    cand, cand_sources = _arrow_tables(rows, sources)
    name, sources_name = "_pevt_candidates", "_pevt_candidate_sources"
    con.register(name, cand)
    con.register(sources_name, cand_sources)
    try:
        with transaction(con):
            # A change is stamped after every change stamped before, even if the clock stepped back since: a client
            # polling `updatedSince` the newest `updatedAt` it saw would otherwise miss it.
            stamp = con.execute(
                "SELECT greatest($now::TIMESTAMP, coalesce(max(updated_at) + INTERVAL 1 MILLISECOND, $now::TIMESTAMP)) "
                "FROM prediction_events", {"now": now},
            ).fetchall()[0][0]
            existing = _one(con, f"SELECT count(*) FROM {name} c JOIN prediction_events p USING (id)")
            # Over every article (complete), the candidate's source is the earliest article asking the question now:
            # it replaces a stored source that was edited into another question or re-dated after it.
            takes = "TRUE" if complete else f"(c.source_article_id = p.source_article_id OR {_SOURCE_NOT_LATER})"
            updated = _one(
                con,
                f"SELECT count(*) FROM {name} c JOIN prediction_events p USING (id) WHERE {takes} AND ({_DIFFERS})",
            )
            if updated:
                assignments = ", ".join(f"{col} = c.{col}" for col in _CONTENT)
                con.execute(
                    f"UPDATE prediction_events AS p SET {assignments}, updated_at = $stamp FROM {name} c "
                    f"WHERE p.id = c.id AND {takes} AND ({_DIFFERS})",
                    {"stamp": stamp},
                )
            inserted = len(rows) - existing
            if inserted:
                _insert_new(con, name, now, stamp)
            con.execute(f"UPDATE prediction_events SET derived_at = $now WHERE id IN (SELECT id FROM {name})",
                        {"now": now})
            restored = withdrawn = stands = 0
            if complete:
                restored, withdrawn, stands = _withdraw_and_restore(con, name, sources_name, now, stamp, refused)
            con.execute(
                f"UPDATE prediction_events SET status = {_STATUS} WHERE status IS DISTINCT FROM ({_STATUS})",
                {"now": now},
            )
            # created_at runs ahead of the clock to stay unique: a change is never dated before the event existed
            con.execute("UPDATE prediction_events SET updated_at = created_at WHERE updated_at < created_at")
            sources_added = _add_sources(con, sources_name, now)
            crash_point("events:merging")
            not_derived = _one(
                con, f"SELECT count(*) FROM prediction_events WHERE id NOT IN (SELECT id FROM {name})"
            )
            total, open_ = con.execute(
                "SELECT count(*), count(*) FILTER (WHERE status = 'open') FROM prediction_events"
            ).fetchall()[0]
    finally:
        con.unregister(name)
        con.unregister(sources_name)
    return MergeReport(
        candidates=len(rows),
        inserted=inserted,
        updated=updated,
        unchanged=existing - updated,
        sources_added=sources_added,
        not_derived=not_derived,
        events=total,
        open=open_,
        withdrawn=withdrawn,
        restored=restored,
        stands=stands,
    )


def _insert_new(con: duckdb.DuckDBPyConnection, name: str, now: datetime, stamp: datetime) -> None:
    """Insert the candidates not stored yet; ``created_at`` runs ahead of the clock to stay unique and ordered."""
    columns = ", ".join(_CONTENT)
    con.execute(
        f"""
        INSERT INTO prediction_events (id, {columns}, date, created_at, updated_at, status)
        SELECT c.id, {", ".join(f"c.{col}" for col in _CONTENT)}, c.date,
               b.base + to_milliseconds(
                   row_number() OVER (ORDER BY c.source_published_at, c.source_article_id, c.id) - 1),
               $stamp,
               CASE WHEN c.date > $now THEN 'open' ELSE 'closed' END
        FROM {name} c
        CROSS JOIN (
            SELECT greatest(date_trunc('millisecond', $now::TIMESTAMP),
                            coalesce(date_trunc('millisecond', max(created_at)) + INTERVAL 1 MILLISECOND,
                                     date_trunc('millisecond', $now::TIMESTAMP))) AS base
            FROM prediction_events
        ) b
        WHERE c.id NOT IN (SELECT id FROM prediction_events)
        """,
        {"now": now, "stamp": stamp},
    )


def _withdraw_and_restore(con: duckdb.DuckDBPyConnection, name: str, sources_name: str, now: datetime,
                          stamp: datetime, refused: Mapping[str, str] | None) -> tuple[int, int, int]:
    """Over a complete derivation: restore withdrawn events derived again, withdraw stored ones not derived (with
    the reason) unless they stand (``_standing``). Returns (restored, withdrawn, standing)."""
    restored = _one(
        con, f"SELECT count(*) FROM prediction_events WHERE withdrawn_reason IS NOT NULL "
        f"AND id IN (SELECT id FROM {name})",
    )
    con.execute(
        f"UPDATE prediction_events SET withdrawn_reason = NULL, withdrawn_at = NULL, updated_at = $stamp "
        f"WHERE withdrawn_reason IS NOT NULL AND id IN (SELECT id FROM {name})",
        {"stamp": stamp},
    )
    gone = [r[0] for r in con.execute(
        f"SELECT id FROM prediction_events WHERE withdrawn_reason IS NULL AND id NOT IN (SELECT id FROM {name})"
    ).fetchall()]
    if not gone:
        return restored, 0, 0
    moved = {}  # a withdrawn event whose source article now gives another question
    for event_id, other, title in con.execute(
        f"SELECT p.id, min(c.id), arg_min(c.event_title, c.id) FROM prediction_events p "
        f"JOIN {sources_name} cs ON cs.article_id = p.source_article_id JOIN {name} c "
        f"ON c.id = cs.event_id WHERE list_contains($gone, p.id) AND c.id <> p.id GROUP BY p.id",
        {"gone": gone},
    ).fetchall():
        moved[event_id] = WITHDRAWN_MOVED.format(id=other, title=title)
    standing = _standing(con, gone, now, set(refused or {}) | set(moved))
    reasons = {i: (refused or {}).get(i) or moved.get(i) or WITHDRAWN_DEFAULT for i in gone if i not in standing}
    if reasons:
        con.executemany(
            "UPDATE prediction_events SET withdrawn_reason = ?, withdrawn_at = ?, updated_at = ? WHERE id = ?",
            [(reason, now, stamp, i) for i, reason in reasons.items()],
        )
    return restored, len(reasons), len(standing)


def _standing(con: duckdb.DuckDBPyConnection, gone: list[str], now: datetime, explained: set[str]) -> set[str]:
    """Of the events no article derives now, those that stay as they are. A closed event: its market has closed,
    and what the news says since is its outcome. An open one whose source article changed (``raw_articles``'
    ``updated_at``: its text, date or link) after a derivation last produced the event (``derived_at``), and that
    neither a check refused nor another question replaced (``explained``): the article now reports rather than asks
    ("Solana tops $220", "... unlocks 40 million SUI ahead of schedule"); a question asked in good faith stands
    until it resolves. An edit the event was derived again after (a fix to the body) does not count."""
    has_raw = _one(con, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'raw_articles'")
    edited = """
        OR (NOT list_contains($explained::VARCHAR[], p.id) AND EXISTS (
            SELECT 1 FROM raw_articles r WHERE r.id = p.source_article_id
            AND r.updated_at > coalesce(p.derived_at, p.updated_at)))
    """ if has_raw else ""
    return {r[0] for r in con.execute(
        f"SELECT p.id FROM prediction_events p WHERE list_contains($gone::VARCHAR[], p.id) AND (p.date <= $now {edited})",
        {"gone": gone, "now": now, **({"explained": sorted(explained)} if has_raw else {})},
    ).fetchall()}


def _add_sources(con: duckdb.DuckDBPyConnection, sources_name: str, now: datetime) -> int:
    """Record every (event, article) pair not recorded yet; how many were new."""
    sources_added = _one(
        con,
        f"SELECT count(*) FROM (SELECT DISTINCT event_id, article_id FROM {sources_name}) s "
        "WHERE NOT EXISTS (SELECT 1 FROM prediction_event_sources e "
        "WHERE e.event_id = s.event_id AND e.article_id = s.article_id)",
    )
    if sources_added:
        con.execute(
            f"INSERT INTO prediction_event_sources (event_id, article_id, added_at) "
            f"SELECT DISTINCT s.event_id, s.article_id, $now FROM {sources_name} s "
            "WHERE NOT EXISTS (SELECT 1 FROM prediction_event_sources e "
            "WHERE e.event_id = s.event_id AND e.article_id = s.article_id)",
            {"now": now},
        )
    return sources_added


def _prepare(candidates: Sequence[EventLike]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Validate candidates and fold duplicates of one id (the earliest source wins; all sources are kept)."""
    problems: list[str] = []
    by_id: dict[str, dict[str, Any]] = {}
    sources: dict[tuple[str, str], None] = {}
    for c in candidates:
        problem = _problem(c)
        if problem:
            problems.append(f"{getattr(c, 'id', '?')}: {problem}")
            continue
        row = {col: getattr(c, col, None) for col in _NAMES}
        row["source_published_at"] = naive_utc(c.source_published_at)
        row["date"] = naive_utc(c.date)
        row["options"] = list(c.options)
        row["tags"] = list(c.tags)
        row["threshold"] = None if c.threshold is None else float(c.threshold)
        current = by_id.get(c.id)
        if current is None or (row["source_published_at"], row["source_article_id"]) < (
            current["source_published_at"], current["source_article_id"]
        ):
            by_id[c.id] = row
        for article_id in (*(getattr(c, "source_article_ids", ()) or ()), c.source_article_id):
            sources[(c.id, article_id)] = None
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ValueError(f"merge_events: {len(problems)} malformed candidate(s), nothing written: {shown}")
    return list(by_id.values()), [{"event_id": e, "article_id": a} for e, a in sources]


def _problem(c: EventLike) -> str | None:
    if not isinstance(getattr(c, "id", None), str) or not _ID_RE.match(c.id):
        return f"id must match {ID_PATTERN}"
    if tuple(c.options) != ("Yes", "No"):
        return f"options must be ('Yes', 'No'), got {tuple(c.options)!r}"
    if not c.tags or not all(isinstance(t, str) and t for t in c.tags):
        return "tags must be a non-empty list of strings"
    if not c.event_title.strip().endswith("?"):
        return f"event_title must be a question ending in '?', got {c.event_title!r}"
    if not c.source_article_id:
        return "source_article_id is empty"
    if naive_utc(c.date) <= naive_utc(c.source_published_at):
        return f"date {c.date.isoformat()} is not after the source's publication {c.source_published_at.isoformat()}"
    return None


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(con.execute(sql).fetchall()[0][0])


def iso_ms(value: datetime) -> str:
    """``2026-12-31T00:00:00.000Z``: how the API writes event timestamps."""
    value = naive_utc(value)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


# --- checks --------------------------------------------------------------------------------------------------
# Each check is one query counting violations (0 passes) and one listing a few offenders.


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    sql: str
    sample_sql: str


def _check(name: str, description: str, where: str, joins: str = "", columns: str = "e.id") -> Check:
    base = f"FROM prediction_events e {joins} WHERE {where}"
    return Check(name, description, f"SELECT count(*) {base}", f"SELECT {columns} {base} LIMIT 5")


CHECKS: list[Check] = [
    _check(
        "id_format", f"Every id matches {ID_PATTERN}.",
        f"NOT regexp_full_match(e.id, '{ID_PATTERN[1:-1]}')",
    ),
    Check(
        "id_unique", "No two events share an id.",
        "SELECT count(*) - count(DISTINCT id) FROM prediction_events",
        "SELECT id, count(*) FROM prediction_events GROUP BY id HAVING count(*) > 1 LIMIT 5",
    ),
    Check(
        "created_at_unique", "created_at (the API cursor) is unique across events.",
        "SELECT count(*) - count(DISTINCT created_at) FROM prediction_events",
        "SELECT created_at, count(*) FROM prediction_events GROUP BY created_at HAVING count(*) > 1 LIMIT 5",
    ),
    _check(
        "timestamps_iso_ms",
        "created_at, updated_at and date are set and whole milliseconds, so they print as ISO 8601 "
        "'YYYY-MM-DDTHH:MM:SS.mmmZ' without loss.",
        "e.created_at IS NULL OR e.date IS NULL OR e.updated_at IS NULL "
        "OR e.created_at <> date_trunc('millisecond', e.created_at) OR e.date <> date_trunc('millisecond', e.date) "
        "OR NOT regexp_full_match(strftime(e.created_at, '%Y-%m-%dT%H:%M:%S.%gZ'), "
        "'\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z')",
        columns="e.id, e.created_at, e.date",
    ),
    _check(
        "date_after_source", "The resolution date is after the source article's publication.",
        "e.date <= e.source_published_at OR (a.id IS NOT NULL AND e.date <= a.published_at)",
        joins="LEFT JOIN articles a ON a.id = e.source_article_id",
        columns="e.id, e.date, a.published_at",
    ),
    _check("options_yes_no", "Options are exactly ['Yes', 'No'].", "e.options <> ['Yes', 'No']",
           columns="e.id, e.options"),
    _check("tags_not_empty", "Every event has at least one tag (its asset first).",
           "e.tags IS NULL OR len(e.tags) = 0 OR e.tags[1] <> e.asset", columns="e.id, e.tags, e.asset"),
    _check(
        "source_article_exists", "The source article exists in articles.",
        "a.id IS NULL", joins="LEFT JOIN articles a ON a.id = e.source_article_id",
        columns="e.id, e.source_article_id",
    ),
    _check(
        "source_recorded", "The source article is among the event's prediction_event_sources.",
        "s.event_id IS NULL",
        joins="LEFT JOIN prediction_event_sources s ON s.event_id = e.id AND s.article_id = e.source_article_id",
    ),
    _check(
        "title_is_question", "The title is a question: 'Will ... ?'.",
        "NOT (e.event_title LIKE 'Will %' AND e.event_title LIKE '%?')", columns="e.id, e.event_title",
    ),
    _check(
        "resolvable", "Kind is known; price events have comparator, threshold and currency; others have none.",
        f"e.kind NOT IN ({', '.join(repr(k) for k in EVENT_KINDS)}) "
        "OR (e.kind = 'price_threshold' AND (e.comparator NOT IN ('above', 'below') OR e.comparator IS NULL "
        "OR e.threshold IS NULL OR e.threshold <= 0 OR e.currency IS NULL)) "
        "OR (e.kind <> 'price_threshold' AND (e.comparator IS NOT NULL OR e.threshold IS NOT NULL)) "
        "OR trim(e.resolution_criteria) = '' OR trim(e.resolution_source) = '' "
        "OR e.status NOT IN ('open', 'closed', 'withdrawn')",
        columns="e.id, e.kind, e.comparator, e.threshold",
    ),
    _check(
        "withdrawn_has_reason", "An event is withdrawn exactly when it has a withdrawal reason and time.",
        "(e.status = 'withdrawn') IS DISTINCT FROM (e.withdrawn_reason IS NOT NULL) "
        "OR (e.withdrawn_reason IS NULL) IS DISTINCT FROM (e.withdrawn_at IS NULL) OR trim(e.withdrawn_reason) = ''",
        columns="e.id, e.status, e.withdrawn_reason",
    ),
]


def _runner(check: Check) -> Callable[[duckdb.DuckDBPyConnection], int]:
    def run(con: duckdb.DuckDBPyConnection) -> int:
        return _one(con, check.sql)

    run.__name__ = f"check_{check.name}"
    run.__doc__ = f"{check.description} Returns the number of violating rows (0 passes)."
    return run


check_id_format = _runner(CHECKS[0])
check_id_unique = _runner(CHECKS[1])
check_created_at_unique = _runner(CHECKS[2])
check_timestamps_iso_ms = _runner(CHECKS[3])
check_date_after_source = _runner(CHECKS[4])
check_options_yes_no = _runner(CHECKS[5])
check_tags_not_empty = _runner(CHECKS[6])
check_source_article_exists = _runner(CHECKS[7])
check_source_recorded = _runner(CHECKS[8])
check_title_is_question = _runner(CHECKS[9])
check_resolvable = _runner(CHECKS[10])
check_withdrawn_has_reason = _runner(CHECKS[11])


def run_checks(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Every check's violation count, by name."""
    return {check.name: _one(con, check.sql) for check in CHECKS}
