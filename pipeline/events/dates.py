"""Resolution dates from date phrases, relative to the article's publication time.

A phrase resolves to one day (00:00 UTC; the question covers that whole UTC day), or to an exact time when
the article gives one in UTC ("March 15, 2026 at 14:00 UTC"). A phrase that names a period resolves to its
last day: "in December" -> December 31, "Q1" -> March 31, "by year-end" -> December 31, "next week" -> the
Sunday of next week, "early 2026" -> March 31 (end of Q1), "mid-2026" -> June 30. A date without a year is its
next occurrence after publication, except that a day up to 60 days *before* publication is taken as a past
reference and not resolved (a March 10 article saying "on March 2" means the March 2 that just passed).
Holidays: Christmas, US Thanksgiving (the fourth Thursday of November), New Year's Eve / Day. "within 48 hours"
is the day those hours end on. "tomorrow" or a weekday with a local time ("tomorrow at 4 PM ET") counts from the
publication's date in that zone. Whatever is not strictly after the publication time resolves to ``None`` ("by end
of day" included): the article gave a date, but not one a question can be asked about.
"""

from __future__ import annotations

import calendar
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

PAST_WINDOW_DAYS = 60  # a yearless day this close before publication is a past reference, not next year's

_MONTHS = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
    "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
}
# Month names are matched capitalised only: "may" and "mar" are also ordinary words.
_MON = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
    r"|Jan\.?|Feb\.?|Mar\.?|Apr\.?|Jun\.?|Jul\.?|Aug\.?|Sept\.?|Sep\.?|Oct\.?|Nov\.?|Dec\.?)"
)
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirty": 30, "ninety": 90,
}
_ORDINAL_WORDS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4}
_YEAR = r"(?P<year>20\d{2})(?!\d|,\d)"
# A time of day with its zone: "14:00 UTC", "9:00 a.m. ET", "11:30 p.m. PT", "8 PM EST" (a local time becomes UTC).
_TIME = (r"(?P<hh>[01]?\d|2[0-3])(?::(?P<mi>[0-5]\d)\s*(?P<ap>[aApP]\.?[mM]\.?)?|\s*(?P<ap2>[aApP]\.?[mM]\.?))\s*"
         r"(?P<tz>UTC|GMT|ET|EST|EDT|PT|PST|PDT|CT|CST|CDT|MT|MST|MDT|CET|CEST|BST|JST|KST|SGT|HKT)"
         r"(?:(?<=UTC|GMT)\s?(?P<off>[+-]\d{1,2})(?::?(?P<offm>[0-5]\d))?)?(?![\w+-])")
_ZONES = {"ET": "America/New_York", "PT": "America/Los_Angeles", "CT": "America/Chicago", "MT": "America/Denver",
          "CET": "Europe/Berlin", "CEST": "Europe/Berlin", "BST": "Europe/London", "JST": "Asia/Tokyo",
          "KST": "Asia/Seoul", "SGT": "Asia/Singapore", "HKT": "Asia/Hong_Kong"}
_OFFSETS = {"UTC": 0, "GMT": 0, "EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8, "PDT": -7}


class LocalTime(datetime):
    """A publication time as its publisher's clock read it (the fields), with the UTC offset it was written in:
    "tomorrow" or "by year-end" count from the publisher's calendar ("by year-end" in an article of Thu 31 Dec
    2025 20:00 -0500 is that December 31, not the end of 2026). ``local_time`` makes one."""

    offset_minutes: int = 0

    # Arithmetic and replace() on a datetime subclass return the subclass without its attributes: carry the offset.
    def __add__(self, other: timedelta) -> LocalTime:  # type: ignore[override]
        return _with_offset(super().__add__(other), self.offset_minutes)

    def __sub__(self, other: Any) -> Any:
        out = super().__sub__(other)
        return _with_offset(out, self.offset_minutes) if isinstance(out, datetime) else out

    def replace(self, *args: Any, **kwargs: Any) -> LocalTime:  # type: ignore[override]
        return _with_offset(super().replace(*args, **kwargs), self.offset_minutes)


def _with_offset(value: datetime, minutes: int) -> LocalTime:
    out = LocalTime(value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond)
    out.offset_minutes = minutes
    return out


def local_time(utc: datetime, offset_minutes: int | None) -> datetime:
    """``utc`` (naive) as the publisher's clock read it, when the feed said its offset; else ``utc`` itself."""
    if not offset_minutes:
        return utc
    return _with_offset(utc + timedelta(minutes=offset_minutes), offset_minutes)


def instant(published_at: datetime) -> datetime:
    """The naive UTC time of a publication time (a ``LocalTime`` or already UTC)."""
    if isinstance(published_at, LocalTime):
        plain = datetime(*published_at.timetuple()[:6], published_at.microsecond)
        return plain - timedelta(minutes=published_at.offset_minutes)
    return published_at


@dataclass(frozen=True)
class DateHit:
    """A date phrase found in a text; ``when`` is None if it does not resolve to a time after publication."""

    start: int
    end: int
    text: str
    when: datetime | None
    rule: str
    precise: bool = False


def find_dates(text: str, published_at: datetime) -> list[DateHit]:
    """Every date phrase in ``text``, left to right; longer, more specific phrases win over overlapping ones.
    ``published_at``: naive UTC, or a ``LocalTime`` (relative phrases then count from the publisher's calendar)."""
    after = instant(published_at)
    taken: list[tuple[int, int]] = []
    hits: list[DateHit] = []
    for pattern, rule, resolver in _RULES:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in taken):
                continue
            when, precise = resolver(m, published_at)
            if when is not None and when <= after:
                when = None
            taken.append((m.start(), m.end()))
            hits.append(DateHit(m.start(), m.end(), m.group(0), when, rule, precise))
    return sorted(hits, key=lambda h: h.start)


def resolve_phrase(text: str, published_at: datetime) -> datetime | None:
    """The resolution time of the first date phrase in ``text`` (None when there is none or it is not later)."""
    hits = find_dates(text, published_at)
    return hits[0].when if hits else None


def default_price_date(published_at: datetime) -> datetime:
    """The resolution day of a price level cited without a date: the last day of the publication month, or of
    the next month when fewer than 7 days of this one remain (so every question runs at least a week)."""
    end = _month_end(published_at.year, published_at.month)
    if (end.date() - published_at.date()).days < 7:  # whole days after the publication day, as a reader counts
        year, month = _add_months(published_at.year, published_at.month, 1)
        end = _month_end(year, month)
    return end


# --- resolvers -------------------------------------------------------------------------------------------


def _day(year: int, month: int, day: int) -> datetime | None:
    try:
        return datetime(year, month, day)
    except ValueError:
        return None  # "February 30"


def _month_end(year: int, month: int) -> datetime:
    return datetime(year, month, calendar.monthrange(year, month)[1])


def _add_months(year: int, month: int, n: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + n
    return index // 12, index % 12 + 1


def _month_number(token: str) -> int:
    return _MONTHS[token.strip(".").lower()[:3]]


def _next_occurrence(month: int, day: int, published_at: datetime) -> datetime | None:
    """This year's day if it is still ahead, None if it just passed (a past reference), else next year's."""
    this_year = _day(published_at.year, month, day)
    if this_year is None:
        return _day(published_at.year + 1, month, day)
    if this_year > published_at:
        return this_year
    if published_at - this_year <= timedelta(days=PAST_WINDOW_DAYS):
        return None
    return _day(published_at.year + 1, month, day)


@lru_cache(maxsize=1)
def zone_rules() -> str:
    """The UTC offsets of every named zone above, twice a day over 2015-2035: a digest that changes when the time
    zone database this process reads (the system's or the tzdata package) moves a transition the derivation uses."""
    start = datetime(2015, 1, 1, tzinfo=UTC)
    rows = []
    for key in sorted(set(_ZONES.values())):
        zone = ZoneInfo(key)
        offsets = ((start + timedelta(hours=12 * i)).astimezone(zone).utcoffset() for i in range(2 * 366 * 21))
        rows.append(key + ":" + ",".join(str(int(o.total_seconds())) for o in offsets if o is not None))
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def _zone(m: re.Match[str]) -> tzinfo | None:
    """The time zone a phrase's time of day is written in ("PT", "UTC+05:30"); None without one, or a bad offset."""
    g = m.groupdict()
    if not g.get("hh"):
        return None
    if g.get("off"):  # "8:00 AM UTC-5"
        hours = int(g["off"])
        if abs(hours) > 14:
            return None
        offset = timedelta(hours=abs(hours), minutes=int(g.get("offm") or 0))
        return timezone(-offset if g["off"].startswith("-") else offset)
    if g["tz"] in _OFFSETS:
        return timezone(timedelta(hours=_OFFSETS[g["tz"]]))
    return ZoneInfo(_ZONES[g["tz"]])


def _local_day(pub: datetime, m: re.Match[str]) -> datetime:
    """The publication day where the phrase's time of day is written ("tomorrow at 4 PM ET" counts from New
    York's date), else the publisher's day (``LocalTime``), else the UTC day."""
    zone = _zone(m)
    local = instant(pub).replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None) if zone else pub
    return datetime.combine(local.date(), datetime.min.time())


def _with_time(day: datetime | None, m: re.Match[str]) -> tuple[datetime | None, bool]:
    """The day at the phrase's time of day, in UTC ("December 3 at 11:30 p.m. PT" is 07:30 UTC on December 4)."""
    g = m.groupdict()
    zone = _zone(m)
    if day is None or zone is None:
        return day, False
    hour, ap = int(g["hh"]), (g.get("ap") or g.get("ap2") or "").lower()
    if ap and not 1 <= hour <= 12:
        return day, False  # "14:00 p.m." says nothing sure
    if ap:
        hour = hour % 12 + (12 if ap.startswith("p") else 0)
    local = day.replace(hour=hour, minute=int(g.get("mi") or 0), tzinfo=zone)
    return local.astimezone(UTC).replace(tzinfo=None), True


def _explicit(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    g = m.groupdict()
    month, day = _month_number(g["mon"]), int(g["day"])
    if g.get("year"):
        return _with_time(_day(int(g["year"]), month, day), m)
    return _with_time(_next_occurrence(month, day, pub), m)


def _iso(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    return _with_time(_day(int(m["year"]), int(m["mo"]), int(m["d"])), m)


def _us_numeric(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    return _day(int(m["year"]), int(m["mo"]), int(m["d"])), False


def _month(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    month = _month_number(m["mon"])
    if m["year"]:
        return _month_end(int(m["year"]), month), False
    if month == pub.month:
        return _month_end(pub.year, month), False
    last = _month_end(pub.year if month < pub.month else pub.year - 1, month)
    if (pub - last).days <= PAST_WINDOW_DAYS:  # "initially scheduled for July", written in August: the past
        return None, False
    return _month_end(pub.year if month > pub.month else pub.year + 1, month), False


def _quarter(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    q = int(m["q"]) if m["q"] else _ORDINAL_WORDS[m["qw"].lower()]
    if m["year"] or m["yy"]:
        year = int(m["year"]) if m["year"] else 2000 + int(m["yy"])
    else:
        year = pub.year if q >= (pub.month - 1) // 3 + 1 else pub.year + 1
    return _month_end(year, q * 3), False


def _relative_quarter(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    q = (pub.month - 1) // 3 + (1 if (m.groupdict().get("which") or "").lower() == "next" else 0)
    year, month = _add_months(pub.year, 1, q * 3 + 2)
    return _month_end(year, month), False


def _half(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    h = int(m["h"]) if m["h"] else (1 if m["hw"].lower() == "first" else 2)
    if m["year"]:
        year = int(m["year"])
    else:
        year = pub.year if h >= (1 if pub.month <= 6 else 2) else pub.year + 1
    return _month_end(year, 6 * h), False


def _year_end(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    offset = 1 if (m["which"] or m["which2"] or "").lower() == "next" else 0
    return datetime(pub.year + offset, 12, 31), False


def _named_year(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    return datetime(int(m["year"]), 12, 31), False


def _year_before(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    """"before 2030": the end of 2029; "before 2026 ends": the end of 2026."""
    return datetime(int(m["year"]) - (0 if m["ends"] else 1), 12, 31), False


def _part_of_year(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    if m["year"]:
        year = int(m["year"])
    else:
        year = pub.year + (1 if m["which"].lower() == "next" else 0)
    month = {"early": 3, "mid": 6, "late": 12}[m["part"].lower()]
    return _month_end(year, month), False


def _this_or_next_year(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    return datetime(pub.year + (1 if m["which"].lower() == "next" else 0), 12, 31), False


def _week(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    sunday = datetime.combine(pub.date(), datetime.min.time()) + timedelta(days=6 - pub.weekday())
    if (m["which"] or "this").lower() == "next":
        sunday += timedelta(days=7)
    return sunday, False


def _month_relative(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    n = 1 if (m["which"] or "this").lower() == "next" else 0
    year, month = _add_months(pub.year, pub.month, n)
    return _month_end(year, month), False


def _offset(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    raw = m["n"].lower()
    n = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
    unit = m["unit"].lower().rstrip("s")
    if unit == "hour":  # "within 48 hours": the (UTC) day those hours end on
        return datetime.combine((instant(pub) + timedelta(hours=n)).date(), datetime.min.time()), False
    start = datetime.combine(pub.date(), datetime.min.time())
    if unit == "day":
        return start + timedelta(days=n), False
    if unit == "week":
        return start + timedelta(days=7 * n), False
    year, month = _add_months(pub.year, pub.month, n)
    return _day(year, month, min(pub.day, calendar.monthrange(year, month)[1])), False


def _tomorrow(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    return _with_time(_local_day(pub, m) + timedelta(days=1), m)


def _weekday(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    today = _local_day(pub, m)
    target = _WEEKDAYS.index(m["wd"].lower())
    ahead = (target - today.weekday()) % 7
    if ahead == 0:
        return None, False  # "on Wednesday" written on a Wednesday: today or a week on, not knowable
    if m["which"] and m["which"].lower() == "next" and today.weekday() < target:
        return None, False  # "next Friday" on a Monday: this week's or next week's, not knowable
    return _with_time(today + timedelta(days=ahead), m)


def _thanksgiving(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    """US Thanksgiving, the fourth Thursday of November: this year's if still ahead; none if it just passed (a
    past reference, as for any yearless day), else next year's."""
    def day_of(year: int) -> datetime:
        first = datetime(year, 11, 1)
        return first + timedelta(days=(3 - first.weekday()) % 7 + 21)

    this_year = day_of(pub.year)
    if this_year > pub:
        return this_year, False
    if pub - this_year <= timedelta(days=PAST_WINDOW_DAYS):
        return None, False
    return day_of(pub.year + 1), False


def _halloween(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    return _next_occurrence(10, 31, pub), False


def _new_year(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    if "eve" in m.group(0).lower():
        return _next_occurrence(12, 31, pub), False
    return _next_occurrence(1, 1, pub), False  # "after a quiet New Year's Day", on January 3: the one just past


def _christmas(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    return _next_occurrence(12, 25, pub), False


def _unresolvable(m: re.Match[str], pub: datetime) -> tuple[datetime | None, bool]:
    return None, False


def _r(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


_I = "(?i:"  # case-insensitive group opener; month names stay case-sensitive
_NUM_WORD = r"(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirty|ninety)"

_RULES: list[tuple[re.Pattern[str], str, Callable[[re.Match[str], datetime], tuple[datetime | None, bool]]]] = [
    # 14:00 UTC on March 15, 2026 / March 15, 2026 at 14:00 UTC / March 15 / 15 March 2026 / March 15th
    (_r(rf"\b{_TIME}\s+{_I}on\s+)(?P<mon>{_MON})\s+(?P<day>[0-3]?\d)(?:st|nd|rd|th)?\b(?:,?\s+{_YEAR})?"),
     "explicit", _explicit),
    (_r(rf"\b(?P<mon>{_MON})\s+(?P<day>[0-3]?\d)(?:st|nd|rd|th)?\b(?!\s*[%$]|,\d|\.\d)(?:,?\s+{_YEAR})?"
        rf"(?:,?\s+{_I}at\s+){_TIME})?"),
     "explicit", _explicit),
    (_r(rf"\b(?P<day>[0-3]?\d)(?:st|nd|rd|th)?\s+{_I}of\s+)?(?P<mon>{_MON})(?![a-z])(?:,?\s+{_YEAR})?"
        rf"(?:,?\s+{_I}at\s+){_TIME})?"),
     "explicit", _explicit),
    (_r(rf"\b(?P<year>20\d{{2}})-(?P<mo>[01]\d)-(?P<d>[0-3]\d)(?:[T\s]{_TIME})?"), "explicit", _iso),
    (_r(r"\b(?P<mo>[01]?\d)/(?P<d>[0-3]?\d)/(?P<year>20\d{2})\b"), "explicit", _us_numeric),
    # Christmas (Day), Thanksgiving, New Year's (Eve / Day)
    (_r(rf"\b{_I}christmas(?:\s+day)?)\b"), "christmas", _christmas),
    (_r(rf"\b{_I}thanksgiving(?:\s+day)?)\b"), "holiday", _thanksgiving),
    (_r(rf"\b{_I}halloween)\b"), "holiday", _halloween),
    (_r(rf"\b{_I}new\s+year(?:'|\u2019)?s(?:\s+(?P<eve>eve|day))?)\b(?!\s+(?:resolution|rally|party))"), "holiday",
     _new_year),
    # Q1 / Q1 2026 / the first quarter of 2026 / end of Q3
    (_r(rf"\b(?:Q(?P<q>[1-4])|{_I}(?P<qw>first|second|third|fourth|1st|2nd|3rd|4th)\s+quarter))"
        rf"(?:\s+(?:{_I}of)\s+)?{_YEAR}|'(?P<yy>\d{{2}})\b)?(?!\d)"),
     "quarter", _quarter),
    (_r(rf"\b{_I}(?:the\s+)?(?:end\s+of\s+(?:the\s+)?)?(?P<which>this|next|current)\s+quarter)\b"),
     "quarter", _relative_quarter),
    (_r(rf"\b{_I}(?:the\s+end\s+of\s+the\s+quarter|quarter[-\s]end))\b"), "quarter", _relative_quarter),
    # H1 / the second half of 2026
    (_r(rf"\b(?:H(?P<h>[12])|{_I}(?P<hw>first|second)\s+half))(?:\s+{_I}of\s+)?{_YEAR})?(?!\d)"), "half", _half),
    # early 2026 / mid-2026 / late next year
    (_r(rf"\b{_I}(?P<part>early|mid|late)[-\s](?:{_YEAR}|(?P<which>this|next)\s+year))\b"), "part_of_year",
     _part_of_year),
    # in December / by end of March / December 2026
    (_r(rf"\b{_I}(?:in|by|until|till|through|during|for|(?:the\s+)?end\s+of|early|late)\s+|mid[-\s])"
        rf"(?P<mon>{_MON})(?![a-z])(?:\s+{_YEAR})?"),
     "month", _month),
    (_r(rf"\b(?P<mon>{_MON})(?![a-z])\s+{_YEAR}"), "month", _month),
    # year-end, end of the year, end of next year, year's end, EOY
    (_r(rf"\b{_I}(?:(?:the\s+)?end\s+of\s+(?:the\s+)?(?:(?P<which>this|next)\s+)?year|year[-\s]end"
        rf"|(?:the\s+)?(?:(?P<which2>this|next)\s+)?year(?:'|\u2019)?s\s+end|end[-\s]of[-\s]year|EOY)\b)"),
     "year", _year_end),
    # by / in / end of 2026
    (_r(rf"\b{_I}(?:by|in|during|through|until|till|for|(?:the\s+)?end\s+of)\s+){_YEAR}(?![-/]\d)"), "year",
     _named_year),
    # before 2030: by the end of 2029
    (_r(rf"\b{_I}before\s+){_YEAR}(?![-/]\d)(?P<ends>\s+(?i:ends?|closes?|is\s+over|wraps?\s+up)\b)?"), "year",
     _year_before),
    (_r(rf"\b{_I}(?P<which>this|next)\s+year)\b"), "year", _this_or_next_year),
    # "price prediction 2024 - 2030": a range of years, so by the end of the last one
    (_r(rf"\b{_I}20\d{{2}}\s*[-\u2013\u2014]\s*){_YEAR}(?![-/]\d)"), "year", _named_year),
    # "2025 ether price target", "its 2026 BTC forecast": a forecast for that year
    (_r(rf"\b{_YEAR}\s+(?=(?:[\w$]+\s+){{0,2}}{_I}(?:price\s+)?(?:target|forecast|prediction|outlook)s?)\b)"),
     "year", _named_year),
    # next week, this week, by the weekend, end of the week
    (_r(rf"\b{_I}(?:(?:later|by|until)\s+)?(?:(?:the\s+)?end\s+of\s+)?(?P<which>this|next)\s+week(?:end)?"
        rf"|(?:by|until|before)\s+the\s+weekend|(?:the\s+)?end\s+of\s+the\s+week)\b"),
     "week", _week),
    # this month, next month, month-end, end of the month
    (_r(rf"\b{_I}(?:(?:later|by)\s+)?(?:(?:the\s+)?end\s+of\s+)?(?P<which>this|next)\s+month"
        rf"|(?:the\s+)?end\s+of\s+(?:the\s+)?month|month[-\s]end)\b"),
     "month", _month_relative),
    # in two weeks, within 30 days, in 3 months
    (_r(rf"\b{_I}(?:in|within)\s+(?:the\s+next\s+)?{_NUM_WORD}\s+(?P<unit>days?|weeks?|months?))\b"), "offset",
     _offset),
    # within 48 hours: the day it ends on (a price question skips it: a daily close hours away is no market)
    (_r(rf"\b{_I}(?:in|within)\s+(?:the\s+next\s+)?{_NUM_WORD}\s+(?P<unit>hours?))\b"), "hours", _offset),
    # tomorrow, tomorrow at 4 PM ET (a local time counts from that zone's date)
    (_r(rf"\b{_I}tomorrow)\b(?:,?\s+{_I}at\s+){_TIME})?"), "tomorrow", _tomorrow),
    # on Wednesday, by Friday, next Monday, Friday at 9 p.m. PT
    (_r(rf"\b{_I}(?:on|by|until|before|this|(?P<which>next))\s+(?P<wd>monday|tuesday|wednesday|thursday|friday"
        rf"|saturday|sunday))\b(?:,?\s+{_I}at\s+){_TIME})?"),
     "weekday", _weekday),
    # recognised, never a time after publication
    (_r(rf"\b{_I}today|tonight|yesterday|last\s+(?:week|month|year|quarter)"
        rf"|by\s+(?:the\s+)?end\s+of\s+(?:the\s+)?(?:day|trading\s+day)(?!\s+(?:on|of)\s)|by\s+EOD)\b"),
     "past_or_now", _unresolvable),
]

