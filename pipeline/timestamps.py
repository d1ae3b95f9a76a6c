"""How the pipeline writes an instant (``cryptowire status``, ``cryptowire keys``, run tags and locks): ISO 8601
in UTC to the second, ``2026-01-31T12:00:00Z``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload

ISO_SECONDS = "%Y-%m-%dT%H:%M:%SZ"


@overload
def iso_utc(value: None) -> None: ...
@overload
def iso_utc(value: datetime | float) -> str: ...
def iso_utc(value: datetime | float | None) -> str | None:
    """Epoch seconds, or a datetime in UTC (the warehouse's TIMESTAMPs are naive UTC), as ``ISO_SECONDS``; None
    stays None."""
    if value is None:
        return None
    at = value.replace(tzinfo=UTC) if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return at.strftime(ISO_SECONDS)
