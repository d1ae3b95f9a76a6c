"""Periods of a set, relative to the publish time ``now`` (UTC).

A row's period goes by its time (``news``: ``published_at``; ``stories``: ``first_seen``; ``events``:
``created_at``; ``sentiment``: the bucket's last instant, so today's day bucket stays in the head): whole
**months** before the current month, **days** of the current month before today, **hours** of today before the
current hour, and the **head**: the current hour and anything newer. The head is small whatever the history's
length; as time passes, hours close into days and days into months (each closed once: a day or a month of rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

HEAD = "head"
EPOCH = datetime(1970, 1, 1)


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

    def sql_key(self, at: datetime) -> str:
        """The period key of the instant ``at`` (as ``sql`` computes it in a query)."""
        if at >= self.hour:
            return HEAD
        if at >= self.day:
            return "h" + at.strftime("%Y%m%dT%H")
        if at >= self.month:
            return "d" + at.strftime("%Y%m%d")
        return "m" + at.strftime("%Y%m")

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


def range_sql(col: str, lo: datetime | None, hi: datetime | None) -> str:
    """``col`` in ``[lo, hi)`` as SQL (None: unbounded)."""
    conds = []
    if lo is not None:
        conds.append(f"{col} >= TIMESTAMP '{lo}'")
    if hi is not None:
        conds.append(f"{col} < TIMESTAMP '{hi}'")
    return " AND ".join(conds) or "true"
