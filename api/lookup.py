"""Items by id: the ``ids`` argument of ``cryptoNews``, ``stories`` and ``predictionEvents``, checked.

A client that keeps ids (a market builder keeps its events') refreshes those items without paging everything:
``predictionEvents(ids: [...])`` answers the events with any of these ids, in serving order, with the other
filters and the paging of the field applied as usual; an unknown id is simply absent. The rows are read by the
read side (``warehouse.read.SnapshotReader``, filters' ``ids``); this module checks the argument.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from api.errors import ApiError

MAX_IDS = 100

# Each field's id: its form (as the schema documents it), that form in words, and what it names.
ID_FORMS: dict[str, tuple[re.Pattern[str], str, str]] = {
    "cryptoNews": (re.compile(r"a_[0-9a-f]{16}", re.ASCII), "`a_` and 16 lower-case hexadecimal digits", "an article"),
    "stories": (re.compile(r"st_[A-Za-z0-9]{20}", re.ASCII), "`st_` and 20 letters or digits", "a story"),
    "predictionEvents": (re.compile(r"pevt_[A-Za-z0-9]{20}", re.ASCII), "`pevt_` and 20 letters or digits",
                         "an event"),
}


def parse_ids(args: dict[str, Any], field: str) -> tuple[str, ...] | None:
    """The ``ids`` argument of ``field``, checked: None when absent; else its distinct ids, sorted (the order of a
    page is the serving order, and equal requests share a cached page). An empty list matches nothing."""
    ids = args.get("ids")
    if ids is None:
        return None
    if len(ids) > MAX_IDS:
        raise ApiError(400, "BAD_USER_INPUT", f"`ids` lists {len(ids)} ids; at most {MAX_IDS} are allowed: split them "
                       "over several requests (aliases can ask for several in one)")
    pattern, form, what = ID_FORMS[field]
    for value in ids:
        if not pattern.fullmatch(value):
            shown = repr(value[:64]) + ("…" if len(value) > 64 else "")
            raise ApiError(400, "BAD_USER_INPUT", f"`ids` holds {shown}, which is not {what} id: {field} ids are "
                           f"{form}, as the `id` field gives them")
    return tuple(sorted(set(ids)))


def with_ids(filters: Any, ids: tuple[str, ...] | None) -> Any:
    """``filters`` with ``ids`` (None: the filters as they are)."""
    return filters if ids is None else replace(filters, ids=ids)
