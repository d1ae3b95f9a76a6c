"""Resolution dates: relative phrases, explicit dates, past references and the default for price levels."""

from __future__ import annotations

from datetime import datetime

import pytest

from pipeline.events.dates import default_price_date, find_dates, resolve_phrase

FRIDAY = datetime(2025, 12, 12, 15, 41)  # Friday, December 12, 2025, 15:41 UTC


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("by the end of the year", datetime(2025, 12, 31)),
        ("by year-end", datetime(2025, 12, 31)),
        ("by year end", datetime(2025, 12, 31)),
        ("by year's end", datetime(2025, 12, 31)),
        ("by the year’s end", datetime(2025, 12, 31)),
        ("before the end of the year", datetime(2025, 12, 31)),
        ("by the end of next year", datetime(2026, 12, 31)),
        ("next year", datetime(2026, 12, 31)),
        ("in December", datetime(2025, 12, 31)),
        ("by the End of December", datetime(2025, 12, 31)),
        ("in January", datetime(2026, 1, 31)),  # already past this year: next January
        ("December 2026", datetime(2026, 12, 31)),
        ("next week", datetime(2025, 12, 21)),  # Sunday of next week
        ("this week", datetime(2025, 12, 14)),
        ("by the weekend", datetime(2025, 12, 14)),
        ("this month", datetime(2025, 12, 31)),
        ("by month-end", datetime(2025, 12, 31)),
        ("next month", datetime(2026, 1, 31)),
        ("Q1", datetime(2026, 3, 31)),  # Q1 has passed this year: next year's
        ("in Q4", datetime(2025, 12, 31)),
        ("Q1 2027", datetime(2027, 3, 31)),
        ("Q2'26", datetime(2026, 6, 30)),
        ("the first quarter of 2026", datetime(2026, 3, 31)),
        ("next quarter", datetime(2026, 3, 31)),
        ("H1", datetime(2026, 6, 30)),
        ("the second half of 2026", datetime(2026, 12, 31)),
        ("early 2026", datetime(2026, 3, 31)),
        ("mid-2026", datetime(2026, 6, 30)),
        ("late next year", datetime(2026, 12, 31)),
        ("in 2026", datetime(2026, 12, 31)),
        ("by 2030", datetime(2030, 12, 31)),
        ("before 2030", datetime(2029, 12, 31)),
        ("before 2026 ends", datetime(2026, 12, 31)),
        ("by March 15", datetime(2026, 3, 15)),
        ("on Dec. 17", datetime(2025, 12, 17)),
        ("December 17th", datetime(2025, 12, 17)),
        ("March 15, 2026", datetime(2026, 3, 15)),
        ("15 March 2026", datetime(2026, 3, 15)),
        ("2026-03-15", datetime(2026, 3, 15)),
        ("3/15/2026", datetime(2026, 3, 15)),
        ("March 15, 2026 at 14:00 UTC", datetime(2026, 3, 15, 14, 0)),
        ("14:00 UTC on March 15", datetime(2026, 3, 15, 14, 0)),
        ("on Wednesday", datetime(2025, 12, 17)),
        ("next Wednesday", datetime(2025, 12, 17)),  # written on a Friday: unambiguous
        ("tomorrow", datetime(2025, 12, 13)),
        ("in two weeks", datetime(2025, 12, 26)),
        ("within 30 days", datetime(2026, 1, 11)),
        ("in 3 months", datetime(2026, 3, 12)),
        ("by Christmas", datetime(2025, 12, 25)),
        ("by New Year's Eve", datetime(2025, 12, 31)),
        ("on New Year's Day", datetime(2026, 1, 1)),
        ("within 48 hours", datetime(2025, 12, 14)),  # 15:41 on Sunday
        ("tomorrow at 9:00 a.m. ET", datetime(2025, 12, 13, 14, 0)),
        ("on Monday at 8 PM UTC+8", datetime(2025, 12, 15, 12, 0)),
    ],
)
def test_phrase_resolves(phrase: str, expected: datetime) -> None:
    assert resolve_phrase(f"Bitcoin could hit $100K {phrase}, analysts say", FRIDAY) == expected


@pytest.mark.parametrize(
    "phrase",
    [
        "on Dec 10",  # two days before publication: the Dec 10 that just passed
        "Oct. 26",  # 47 days before: still a past reference, not next October
        "on December 12",  # the publication day itself is not after publication
        "today",
        "yesterday",
        "last week",
        "on Friday",  # written on a Friday: today or a week on?
        "March 10, 2023",
        "by the end of 2024",
        "February 30",
        "in 6 hours",  # still the publication day, which a question cannot be about
        "by Thanksgiving",  # November 27, 2025 passed 15 days before: a past reference, as any yearless day
        "by end of day",
        "by the end of the trading day",
    ],
)
def test_phrase_recognised_but_not_after_publication(phrase: str) -> None:
    hits = find_dates(f"SEC to decide {phrase}", FRIDAY)
    assert len(hits) == 1, hits
    assert hits[0].when is None


def test_yearless_date_long_before_publication_is_next_year() -> None:
    assert resolve_phrase("by January 15", datetime(2025, 12, 20)) == datetime(2026, 1, 15)
    assert resolve_phrase("by November 1", FRIDAY) is None  # 41 days back: a past reference
    assert resolve_phrase("by September 30", FRIDAY) == datetime(2026, 9, 30)  # 73 days back: next year's


def test_a_yearless_month_just_past_is_a_past_reference() -> None:
    # "initially scheduled for November", written on December 12: that November, not next year's
    assert resolve_phrase("initially scheduled for November", FRIDAY) is None
    assert resolve_phrase("in December", FRIDAY) == datetime(2025, 12, 31)  # the current month
    assert resolve_phrase("in September", FRIDAY) == datetime(2026, 9, 30)  # 73 days back: next year's
    assert resolve_phrase("in December", datetime(2026, 1, 10)) is None  # just past, across the year


def test_next_weekday_within_the_same_week_is_ambiguous() -> None:
    monday = datetime(2025, 12, 8, 9, 0)
    assert resolve_phrase("next Friday", monday) is None
    assert resolve_phrase("on Friday", monday) == datetime(2025, 12, 12)


def test_year_end_on_new_years_eve_is_not_after_publication() -> None:
    assert resolve_phrase("by year-end", datetime(2025, 12, 31, 9, 0)) is None


def test_month_names_are_case_sensitive_and_may_is_a_verb() -> None:
    assert find_dates("Bitcoin May Hit $100K as traders may buy", FRIDAY) == []
    assert resolve_phrase("Bitcoin May Hit $100K in May", FRIDAY) == datetime(2026, 5, 31)


def test_overlapping_phrases_give_one_hit() -> None:
    hits = find_dates("Upgrade set for the end of March 2026, then Q3", FRIDAY)
    assert [h.text for h in hits] == ["the end of March 2026", "Q3"]
    assert [h.when for h in hits] == [datetime(2026, 3, 31), datetime(2026, 9, 30)]


def test_precise_time_is_flagged() -> None:
    (hit,) = find_dates("Rio hard fork scheduled for March 26 at 14:00 UTC", FRIDAY)
    assert hit.precise and hit.when == datetime(2026, 3, 26, 14, 0)


@pytest.mark.parametrize(
    ("published", "expected"),
    [
        (datetime(2026, 11, 4, 16, 45), datetime(2026, 11, 30)),
        (datetime(2026, 11, 23, 0, 0), datetime(2026, 11, 30)),  # 7 days left after the 23rd
        (datetime(2026, 11, 23, 23, 59), datetime(2026, 11, 30)),  # the time of day does not count
        (datetime(2026, 11, 24, 0, 1), datetime(2026, 12, 31)),  # 6 days left: next month
        (datetime(2025, 12, 27), datetime(2026, 1, 31)),
        (datetime(2024, 2, 10), datetime(2024, 2, 29)),
    ],
)
def test_default_price_date(published: datetime, expected: datetime) -> None:
    assert default_price_date(published) == expected
    assert default_price_date(published) > published


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("listing on December 3 at 8:00 AM UTC-5", datetime(2026, 12, 3, 13, 0)),
        ("listing on December 3 at 8:00 PM UTC+8", datetime(2026, 12, 3, 12, 0)),
        ("fork on December 3 at 14:00 UTC+05:30", datetime(2026, 12, 3, 8, 30)),
        ("fork on December 3 at 11:30 p.m. PT", datetime(2026, 12, 4, 7, 30)),
        ("fork on December 3 at 14:00 UTC-15", datetime(2026, 12, 3)),  # no such offset: the day alone
    ],
)
def test_a_time_is_read_in_its_zone_or_offset(text: str, expected: datetime) -> None:
    (hit,) = find_dates(text, datetime(2026, 11, 27, 9))
    assert hit.when == expected, hit


def test_thanksgiving_is_the_fourth_thursday_of_november() -> None:
    assert resolve_phrase("by Thanksgiving", datetime(2025, 11, 1)) == datetime(2025, 11, 27)
    assert resolve_phrase("by Thanksgiving", datetime(2027, 1, 5)) == datetime(2027, 11, 25)


def test_tomorrow_with_a_local_time_is_tomorrow_where_that_time_is_written() -> None:
    # 03:30 UTC on Saturday is still Friday evening in Los Angeles: its "tomorrow" is Saturday.
    saturday_utc = datetime(2025, 12, 13, 3, 30)
    assert resolve_phrase("goes live tomorrow at 10 a.m. PT", saturday_utc) == datetime(2025, 12, 13, 18, 0)
    assert resolve_phrase("goes live tomorrow", saturday_utc) == datetime(2025, 12, 14)  # no zone: the UTC day


def test_a_local_publication_time_counts_relative_phrases_from_its_own_calendar() -> None:
    from pipeline.events.dates import instant, local_time

    eve = local_time(datetime(2026, 1, 1, 1, 0), -300)  # Thu 31 Dec 2025 20:00 in New York
    assert instant(eve) == datetime(2026, 1, 1, 1, 0)
    assert resolve_phrase("by year-end", eve) is None  # that December 31 has begun
    assert resolve_phrase("by tomorrow", eve) is None  # January 1 has begun in UTC
    assert resolve_phrase("by Friday", eve) == datetime(2026, 1, 2)
    seoul = local_time(datetime(2026, 11, 26, 22, 30), 540)  # Fri 27 Nov 07:30 in Seoul
    assert resolve_phrase("tomorrow", seoul) == datetime(2026, 11, 28)
    # a time with its own zone counts from that zone's date: Thursday 17:30 in New York
    assert resolve_phrase("tomorrow at 9:00 a.m. ET", seoul) == datetime(2026, 11, 27, 14, 0)
    assert local_time(datetime(2026, 11, 26, 22, 30), None) == datetime(2026, 11, 26, 22, 30)


def test_local_time_arithmetic_keeps_its_offset_and_hours_count_from_the_instant() -> None:
    from datetime import timedelta

    from pipeline.events.dates import instant, local_time

    tuesday_evening = local_time(datetime(2025, 12, 10, 2, 0), -300)  # Tue 9 Dec 21:00 in New York
    assert instant(tuesday_evening + timedelta(hours=1)) == datetime(2025, 12, 10, 3, 0)
    assert instant(tuesday_evening.replace(minute=30)) == datetime(2025, 12, 10, 2, 30)
    assert resolve_phrase("within 48 hours", tuesday_evening) == datetime(2025, 12, 12)
    assert resolve_phrase("after a quiet New Year's Day", datetime(2026, 1, 3, 10)) is None  # the one just past
