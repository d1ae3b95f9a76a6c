"""Cursors and the time values of the API's arguments: what a client sends as ``after`` / ``before`` / ``since``,
and what the read side gives back.

- news: opaque, ``base64url("n1:<published_at µs>:<id>:<tag>:<pos>")``, the tag a checksum of the snapshot's
  tag, the key and ``pos`` (``SnapshotReader._cursor_tag``). In the snapshot that issued it, ``pos`` is used
  directly; otherwise (another snapshot, an edited cursor) the cursor means its key ``(published_at, id)``: the
  id's position if the article is still there with that time, else the first row strictly older than the key. Stories: the same with ``s1`` and ``first_seen``.
- events: the node's ``createdAt`` (ISO 8601 UTC with milliseconds, unique).
- ``after``/``before`` also accept a plain ISO date or timestamp (no offset means UTC): "strictly older than" /
  "strictly newer than" that instant.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

EPOCH = datetime(1970, 1, 1)
_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


MIN_YEAR, MAX_YEAR = 2, 9998  # as assetSentiment's range (warehouse.trends)


class CursorError(ValueError):
    """A cursor or a date bound that cannot be read."""


class DateOutOfRange(CursorError):
    """A well-formed date too near the ends of the calendar to compute with."""


# --------------------------------------------------------------------------------------------- time values


@dataclass(frozen=True)
class Instant:
    """A point in time from the API (naive UTC), remembering whether only a date was given."""

    at: datetime
    date_only: bool = False

    def upper_exclusive(self) -> datetime:
        """As an inclusive upper bound (``until``, ``dateTo``): a plain date covers its whole day."""
        return self.at + timedelta(days=1) if self.date_only else self.at + timedelta(microseconds=1)


def echo(text: str, limit: int = 64) -> str:
    """The start of a bad value, for an error message; the ellipsis says it was cut."""
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


# The forms the docs name: a date, or a date and time (seconds and a fraction of any length optional: .NET writes 7
# digits, Java and Go up to 9), with Z, an offset or none.
_ISO_FORM = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}(?::?\d{2}){0,2})?)?\Z", re.ASCII)


def parse_instant(text: str) -> Instant:
    """``2024-12-01``, ``2024-12-01T10:00:00Z``, ``2024-12-01T12:00:00+02:00`` or naive (taken as UTC)."""
    if not isinstance(text, str) or not text.strip():
        raise CursorError("expected an ISO 8601 date or timestamp, e.g. 2024-12-01 or 2024-12-01T10:00:00.000Z")
    s = text.strip()
    try:
        if not _ISO_FORM.match(s):  # fromisoformat also takes basic (20241201) and week (2024-W48-7) forms
            raise ValueError
        if len(s) == 10:
            d = date.fromisoformat(s)
            dt, date_only = datetime(d.year, d.month, d.day), True
        else:
            dt, date_only = datetime.fromisoformat(s), False
    except ValueError:
        raise CursorError(
            f"{echo(text)} is not a date or timestamp of the form 2024-12-01 or 2024-12-01T10:00:00.000Z (an offset "
            "such as +02:00 in place of Z is fine)"
        ) from None
    if not MIN_YEAR <= dt.year <= MAX_YEAR:  # the ends of the calendar overflow as bounds or in UTC
        raise DateOutOfRange(f"{echo(text)} is out of range: dates must lie between the years {MIN_YEAR} and {MAX_YEAR}")
    if dt.tzinfo is not None:
        dt = dt.astimezone(UTC).replace(tzinfo=None)
    return Instant(dt, date_only)


def iso_ms(dt: datetime) -> str:
    """``2024-12-01T10:00:00.123Z``."""
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def to_us(at: datetime) -> int:
    """Microseconds since the epoch, as cursors and serving keys carry times."""
    return (at - EPOCH) // timedelta(microseconds=1)


# --------------------------------------------------------------------------------------------- cursors


@dataclass(frozen=True)
class NewsKey:
    """A news bound: a full key (time + id, from a cursor) or just a time (from a plain date/timestamp)."""

    at: datetime
    id: str | None = None
    tag: str | None = None
    pos: int | None = None


def encode_news_cursor(published_us: int, article_id: str, tag: str, pos: int, version: str = "n1") -> str:
    raw = f"{version}:{published_us}:{article_id}:{tag}:{pos}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_news_cursor(text: str, version: str = "n1", what: str = "news") -> NewsKey:
    """A news cursor, or a plain ISO date/timestamp meaning "strictly older/newer than"."""
    if not isinstance(text, str) or not text or len(text) > 512:
        raise CursorError(f"a {what} cursor is an endCursor/startCursor from a previous page, or an ISO date")
    if text[:1].isdigit() and ("-" in text[:5]):
        inst = parse_instant(text)
        return NewsKey(inst.at)
    try:
        expected = version
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        version, us, article_id, tag, pos = raw.split(":", 4) if raw.count(":") == 4 else ("",) * 5
        if version != expected or not _ID_RE.match(article_id) or not re.fullmatch(r"[0-9a-f]{1,16}", tag):
            raise ValueError
        return NewsKey(from_us(int(us)), article_id, tag, int(pos))
    except (ValueError, binascii.Error, UnicodeDecodeError, OverflowError):
        raise CursorError(
            f"{echo(text)} is not a valid {what} cursor: pass an endCursor/startCursor from a previous page "
            "or an ISO date such as 2024-12-01"
        ) from None


def decode_story_cursor(text: str) -> NewsKey:
    """A stories cursor (``s1:<first_seen µs>:<id>:<tag>:<pos>``, as news cursors) or a plain ISO date."""
    return decode_news_cursor(text, "s1", "story")


def decode_event_cursor(text: str) -> Instant:
    """An event cursor is the node's ``createdAt``; any ISO date or timestamp works the same way."""
    try:
        return parse_instant(text)
    except DateOutOfRange:
        raise
    except CursorError as exc:
        raise CursorError(
            f"{echo(str(text))} is not a valid prediction-event cursor: pass an endCursor/startCursor (a createdAt "
            "timestamp such as 2024-12-01T10:00:00.000Z) or an ISO date such as 2024-12-01"
        ) from exc
