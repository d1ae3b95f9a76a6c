"""Partitioned serving snapshots: a *set* of immutable part files, published atomically as one.

A full-copy snapshot (``warehouse.publish.publish_snapshot``) rewrites every curated row on each publish, so its
cost grows with the whole history. A set splits what the API serves by time into parts:

- ``periods``: months, days and hours closed before the publish time, and the small **head** (the current hour).
- ``build`` and ``contents``: one immutable **part file** per period, with a JSON sidecar; the head part also
  holds the set-wide tables.
- ``changes``: which periods changed since the previous set (only those get new parts; the rest are reused).
- ``publish``: a **manifest** lists the parts; ``snapshots/CURRENT`` names it. Crash safety and the lock.
- ``read``: a set opened as one connection with the same tables as a single file, and its ``Layout`` for paging.

Every public name is importable from here.
"""

from warehouse.parts.build import TIME_COLUMN, Part, build_part, sidecar_name
from warehouse.parts.changes import (
    CHECKED,
    SOURCES,
    changed_periods,
    period_aggregates,
    periods_from,
    periods_of_changed_stories,
    range_aggregates,
    totals,
)
from warehouse.parts.contents import (
    INDEXES,
    PART_EVENTS_SQL,
    PART_NEWS_SQL,
    PART_SENTIMENT_SQL,
    PART_STORIES_SQL,
    STAGE_SQL,
    VALUES_SQL,
    stage,
    unstage,
)
from warehouse.parts.periods import EPOCH, HEAD, Cuts, period_range, serving_order
from warehouse.parts.publish import LOCK, Previous, publish_lock, publish_set
from warehouse.parts.read import (
    PAGED,
    SET_FORMAT,
    TABLES,
    Layout,
    Segment,
    connect_snapshot,
    is_set,
    open_set,
    open_snapshot,
    read_manifest,
    set_parts,
)

__all__ = [
    "CHECKED", "EPOCH", "HEAD", "INDEXES", "LOCK", "PAGED", "PART_EVENTS_SQL", "PART_NEWS_SQL", "PART_SENTIMENT_SQL",
    "PART_STORIES_SQL", "SET_FORMAT", "SOURCES", "STAGE_SQL", "TABLES", "TIME_COLUMN", "VALUES_SQL", "Cuts",
    "Layout", "Part", "Previous", "Segment", "build_part", "changed_periods", "connect_snapshot", "is_set",
    "open_set", "open_snapshot", "period_aggregates", "period_range", "periods_from", "periods_of_changed_stories",
    "publish_lock", "publish_set", "range_aggregates", "read_manifest", "serving_order", "set_parts",
    "sidecar_name", "stage", "totals", "unstage",
]
