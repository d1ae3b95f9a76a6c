"""Partitioned serving snapshots: a *set* of immutable part files, published atomically as one.

A full-copy snapshot (``warehouse.publish.publish_snapshot``) rewrites every curated row on each publish, so its
cost grows with the whole history. A set splits what the API serves by time into parts:

- ``periods``: months, days and hours closed before the publish time, and the small **head** (the current hour).
- ``build`` and ``contents``: one immutable **part file** per period, with a JSON sidecar; the head part also
  holds the set-wide tables.
- ``changes``: which periods changed since the previous set (only those get new parts; the rest are reused).
- ``publish``: a **manifest** lists the parts; ``snapshots/CURRENT`` names it. Crash safety and the lock.
- ``read``: a set opened as one connection with the same tables as a single file, and its ``Layout`` for paging.

Every public name is importable from here. The names load with their module on first use, so a reader that
imports ``warehouse.parts.read`` alone (the API) does not load the write side (build, changes, contents, publish).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "build": ("TIME_COLUMN", "Part", "build_part", "sidecar_name"),
    "changes": ("CHECKED", "SOURCES", "changed_periods", "period_aggregates", "periods_from",
                "periods_of_changed_stories", "periods_of_stories_in", "range_aggregates", "totals"),
    "contents": ("INDEXES", "PART_EVENTS_SQL", "PART_NEWS_SQL", "PART_SENTIMENT_SQL", "PART_STORIES_SQL", "STAGE_SQL",
                 "VALUES_SQL", "stage", "unstage"),
    "periods": ("EPOCH", "HEAD", "Cuts", "period_range", "serving_order"),
    "publish": ("LOCK", "Previous", "publish_lock", "publish_set"),
    "read": ("PAGED", "SET_FORMAT", "TABLES", "Layout", "NewerFormat", "Segment", "connect_snapshot", "is_set",
             "open_set", "open_snapshot", "read_manifest", "set_parts"),
}
_HOME = {name: module for module, names in _NAMES.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _NAMES:  # a submodule not imported yet (``warehouse.parts.publish``)
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
