"""How the pipeline writes an instant (``cryptowire status``, ``cryptowire keys``, run tags and locks): ISO 8601
in UTC to the second, ``2026-01-31T12:00:00Z``. An instant past what a datetime holds (a stored expiry years past
9999, or an infinite one) is written as the last second of 9999, ``LATEST``: still a valid instant for a script
to read, and plainly "never" to a person; one before year 1 as ``EARLIEST``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload

ISO_SECONDS = "%Y-%m-%dT%H:%M:%SZ"
LATEST = "9999-12-31T23:59:59Z"
EARLIEST = "0001-01-01T00:00:00Z"


@overload
def iso_utc(value: None) -> None: ...
@overload
def iso_utc(value: datetime | float) -> str: ...
def iso_utc(value: datetime | float | None) -> str | None:
    """Epoch seconds, or a datetime in UTC (the warehouse's TIMESTAMPs are naive UTC), as ``ISO_SECONDS``; None
    stays None. Seconds out of a datetime's range never raise: ``LATEST`` past it (and for NaN, which a store
    compares as later than any time), ``EARLIEST`` before it."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC).strftime(ISO_SECONDS)
    try:
        return datetime.fromtimestamp(value, UTC).strftime(ISO_SECONDS)
    except (OverflowError, OSError, ValueError):  # year out of range, infinite, NaN
        return EARLIEST if value < 0 else LATEST
