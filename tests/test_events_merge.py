"""Merging derived events into a real DuckDB warehouse: stable ids, immutable and unique created_at, sources."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from pipeline.events import ArticleIn, EventCandidate, derive_events
from warehouse.db import connect
from warehouse.events import CHECKS, iso_ms, merge_events, run_checks

NAMES = {"BTC": "Bitcoin", "ETH": "Ethereum", "SOL": "Solana", "TON": "Toncoin"}
NOW = datetime(2026, 11, 21, 12, 0, 0, 123456)


def article(aid: str, title: str, published: datetime, tickers: tuple[str, ...] = ("BTC",)) -> ArticleIn:
    return ArticleIn(aid, title, "", f"https://news.example/{aid}", None, "Test Wire", published, tickers,
                     ("pricemovement",))


ARTICLES = [
    article("a1", "Bitcoin Eyes $100K as Midterm Results Lift Risk Appetite", datetime(2026, 11, 4, 16, 45)),
    article("a2", "Analysts: ETH Could Hit $5,000 by Year-End", datetime(2026, 11, 9, 15, 30), ("ETH",)),
    article("a3", "Bitcoin Eyes $100K: Options Market Prices 45% Chance by Month-End", datetime(2026, 11, 10, 9, 55)),
    article("a4", "Coinbase to List Toncoin on November 28", datetime(2026, 11, 11, 19, 15), ("TON",)),
    article("a5", "SOL Slides Toward $150 Support as Memecoin Volumes Fade", datetime(2026, 11, 16, 8, 50), ("SOL",)),
]


def store_articles(con: duckdb.DuckDBPyConnection, articles: list[ArticleIn]) -> None:
    batch = pa.Table.from_pylist([
        {"id": a.id, "source_name": a.source_name, "url": a.url, "title": a.title, "summary": a.summary,
         "published_at": a.published_at}
        for a in articles
    ])
    con.register("_test_articles", batch)
    con.execute(
        "INSERT OR REPLACE INTO articles (id, source_name, feed_url, url, title, summary, authors, categories, "
        "published_at, fetched_at, content_hash) SELECT id, source_name, 'https://feed.example/rss', url, title, "
        "summary, [], [], published_at, published_at, id FROM _test_articles"
    )
    con.unregister("_test_articles")


def rows(con: duckdb.DuckDBPyConnection) -> dict[str, tuple]:
    return {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT id, created_at, event_title, event_description, source_article_id, status, updated_at "
            "FROM prediction_events"
        ).fetchall()
    }


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "w.duckdb"


def test_two_materializations_give_the_same_ids_and_created_at(warehouse: Path) -> None:
    con = connect(warehouse)
    store_articles(con, ARTICLES)
    first = merge_events(con, derive_events(ARTICLES, NAMES), NOW)
    assert (first.candidates, first.inserted, first.updated, first.unchanged) == (4, 4, 0, 0)
    assert first.sources_added == 5  # a1 and a3 ask the same question
    before = rows(con)
    con.close()

    con = connect(warehouse)  # a second materialization, as a new process would
    second = merge_events(con, derive_events(ARTICLES, NAMES), NOW + timedelta(hours=6))
    assert (second.inserted, second.updated, second.unchanged, second.sources_added) == (0, 0, 4, 0)
    assert rows(con) == before
    assert all(v == 0 for v in run_checks(con).values()), run_checks(con)


def test_created_at_unique_ordered_by_publication_and_whole_milliseconds(warehouse: Path) -> None:
    con = connect(warehouse)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW)
    created = con.execute(
        "SELECT created_at FROM prediction_events ORDER BY source_published_at, source_article_id"
    ).fetchall()
    stamps = [r[0] for r in created]
    assert stamps[0] == datetime(2026, 11, 21, 12, 0, 0, 123000)  # now truncated to ms
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert all(b - a == timedelta(milliseconds=1) for a, b in zip(stamps, stamps[1:], strict=False))
    assert all(s.microsecond % 1000 == 0 for s in stamps)
    assert iso_ms(stamps[0]) == "2026-11-21T12:00:00.123Z"
    # a new event's updatedAt is its createdAt: it is not dated before the event existed (createdAt runs ahead)
    assert con.execute("SELECT count(*) FROM prediction_events WHERE updated_at <> created_at").fetchall() == [(0,)]


def test_later_runs_get_later_created_at_even_if_the_clock_goes_back(warehouse: Path) -> None:
    con = connect(warehouse)
    merge_events(con, derive_events(ARTICLES[:2], NAMES), NOW)
    latest = con.execute("SELECT max(created_at) FROM prediction_events").fetchall()[0][0]
    report = merge_events(con, derive_events(ARTICLES, NAMES), NOW - timedelta(days=1))  # clock skew
    assert report.inserted == 2
    new = con.execute("SELECT min(created_at) FROM prediction_events WHERE source_article_id IN ('a4', 'a5')")
    assert new.fetchall()[0][0] == latest + timedelta(milliseconds=1)
    assert run_checks(con)["created_at_unique"] == 0
    # a change stamped by a clock behind created_at is dated at created_at, never before it
    merge_events(con, [], NOW - timedelta(days=2), complete=True)  # withdraws every event
    assert con.execute("SELECT count(*) FROM prediction_events WHERE updated_at < created_at").fetchall() == [(0,)]


def test_a_change_is_stamped_after_every_earlier_change_even_if_the_clock_goes_back(warehouse: Path) -> None:
    """A poller of `updatedSince` keeps the newest `updatedAt` it has seen: an edit stamped earlier is lost to it."""
    con = connect(warehouse)
    store_articles(con, ARTICLES)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW)
    seen = con.execute("SELECT max(updated_at) FROM prediction_events").fetchall()[0][0]
    edited = [replace(ARTICLES[0], title="Bitcoin Eyes $100K Again as Midterm Results Lift Risk Appetite"),
              *ARTICLES[1:]]
    store_articles(con, edited)
    report = merge_events(con, derive_events(edited, NAMES), NOW - timedelta(seconds=5))  # an NTP step back
    assert report.updated == 1
    (stamp,) = con.execute("SELECT updated_at FROM prediction_events WHERE source_article_id = 'a1'").fetchall()[0]
    assert stamp > seen
    # A new event too: a poller that saw the edit must still see it.
    newer = [*edited, article("a6", "Bitcoin Could Hit $150,000 by Year-End", datetime(2026, 11, 20, 8, 0))]
    store_articles(con, newer)
    assert merge_events(con, derive_events(newer, NAMES), NOW - timedelta(seconds=10)).inserted == 1
    (added,) = con.execute("SELECT updated_at FROM prediction_events WHERE source_article_id = 'a6'").fetchall()[0]
    assert added > stamp


def test_edited_source_article_keeps_id_and_created_at(warehouse: Path) -> None:
    con = connect(warehouse)
    store_articles(con, ARTICLES)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW)
    before = rows(con)
    edited = [replace(ARTICLES[0], title="Bitcoin Eyes $100K Again as Midterm Results Lift Risk Appetite"),
              *ARTICLES[1:]]
    store_articles(con, edited)
    later = NOW + timedelta(hours=1)
    report = merge_events(con, derive_events(edited, NAMES), later)
    after = rows(con)
    assert set(after) == set(before)
    assert (report.inserted, report.updated) == (0, 1)
    changed = [i for i in after if after[i] != before[i]]
    assert len(changed) == 1
    (eid,) = changed
    assert after[eid][0] == before[eid][0]  # created_at never changes
    assert "Again" in after[eid][2] and "Again" not in before[eid][2]  # the description follows the article
    assert after[eid][5] == datetime(2026, 11, 21, 13, 0, 0, 123000)  # updated_at


def test_an_earlier_article_becomes_the_source_and_all_sources_are_kept(warehouse: Path) -> None:
    con = connect(warehouse)
    merge_events(con, derive_events([ARTICLES[2]], NAMES), NOW)  # only the later article at first
    (eid,) = rows(con)
    created = rows(con)[eid][0]
    merge_events(con, derive_events([ARTICLES[0], ARTICLES[2]], NAMES), NOW + timedelta(hours=1))
    assert rows(con)[eid][3] == "a1" and rows(con)[eid][0] == created
    sources = con.execute("SELECT article_id FROM prediction_event_sources WHERE event_id = ? ORDER BY 1",
                          [eid]).fetchall()
    assert [s[0] for s in sources] == ["a1", "a3"]
    # a run that only sees the later article does not take the source back
    merge_events(con, derive_events([ARTICLES[2]], NAMES), NOW + timedelta(hours=2))
    assert rows(con)[eid][3] == "a1"


def test_events_are_never_deleted_and_status_follows_now(warehouse: Path) -> None:
    con = connect(warehouse)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW)
    assert {r[4] for r in rows(con).values()} == {"open"}
    report = merge_events(con, derive_events(ARTICLES[:1], NAMES), datetime(2026, 12, 1))
    assert (report.events, report.not_derived) == (4, 3)
    status = dict(con.execute("SELECT asset || ':' || kind, status FROM prediction_events").fetchall())
    assert status["BTC:price_threshold"] == "closed"  # resolution day November 30 has passed
    assert status["ETH:price_threshold"] == "open"
    assert report.open == 1


def test_duplicate_candidates_are_folded(warehouse: Path) -> None:
    con = connect(warehouse)
    e1 = derive_events([ARTICLES[0]], NAMES)[0]
    e3 = derive_events([ARTICLES[2]], NAMES)[0]
    assert e1.id == e3.id
    report = merge_events(con, [e3, e1], NOW)
    assert (report.candidates, report.inserted, report.sources_added) == (1, 1, 2)
    assert con.execute("SELECT source_article_id FROM prediction_events").fetchall() == [("a1",)]


def _bad(event: EventCandidate, **changes: object) -> EventCandidate:
    return replace(event, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"id": "pevt_short"}, "id must match"),
        ({"options": ("No", "Yes")}, "options must be"),
        ({"tags": ()}, "tags must be"),
        ({"event_title": "Bitcoin above $100,000"}, "must be a question"),
        ({"date": datetime(2026, 11, 1)}, "is not after the source's publication"),
    ],
)
def test_malformed_candidates_are_refused_and_nothing_is_written(warehouse: Path, changes: dict, message: str) -> None:
    con = connect(warehouse)
    good = derive_events(ARTICLES, NAMES)
    with pytest.raises(ValueError, match=message):
        merge_events(con, [*good, _bad(good[0], **changes)], NOW)
    assert con.execute("SELECT count(*) FROM prediction_events").fetchall()[0][0] == 0
    assert con.execute("SELECT count(*) FROM prediction_event_sources").fetchall()[0][0] == 0


def test_checks_catch_violations(warehouse: Path) -> None:
    con = connect(warehouse)
    store_articles(con, ARTICLES)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW)
    assert set(run_checks(con)) == {c.name for c in CHECKS}
    assert all(v == 0 for v in run_checks(con).values())
    con.execute("DELETE FROM articles WHERE id = 'a1'")
    con.execute("UPDATE prediction_events SET event_title = 'Bitcoin?' WHERE asset = 'ETH'")
    con.execute("UPDATE prediction_events SET date = source_published_at WHERE asset = 'SOL'")
    con.execute("UPDATE prediction_events SET tags = [] WHERE asset = 'TON'")
    result = run_checks(con)
    assert result["source_article_exists"] == 1
    assert result["title_is_question"] == 1
    assert result["date_after_source"] == 1
    assert result["tags_not_empty"] == 1
    assert result["id_format"] == result["created_at_unique"] == result["options_yes_no"] == 0
    for check in CHECKS:  # every sample query runs
        con.execute(check.sample_sql).fetchall()


def test_whole_labelled_set_through_a_real_warehouse_passes_every_check(warehouse: Path) -> None:
    from models.tagging import get_tagger, load_registry
    from pipeline.events.evaluate import load_rows

    tagger = get_tagger()
    names = {a.symbol: a.name for a in load_registry()}
    articles = []
    for row in load_rows():
        tags = tagger.tag(row.title, row.summary)
        articles.append(ArticleIn(row.key, row.title, row.summary, f"https://news.example/{row.key}", None,
                                  row.source_name, row.published_at, tuple(tags.symbols), tuple(tags.topics)))
    con = connect(warehouse)
    store_articles(con, articles)
    events = derive_events(articles, names)
    report = merge_events(con, events, NOW)
    assert report.inserted == len(events) > 20
    assert all(v == 0 for v in run_checks(con).values()), run_checks(con)
    sources = con.execute("SELECT count(*) FROM prediction_event_sources").fetchall()[0][0]
    assert sources == sum(len(e.source_article_ids) for e in events) > len(events)  # some questions recur
    again = merge_events(con, derive_events(articles, names), NOW + timedelta(days=1))
    assert (again.inserted, again.updated, again.sources_added) == (0, 0, 0)


def test_empty_derivation_changes_nothing_but_status(warehouse: Path) -> None:
    con = connect(warehouse)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW)
    before = rows(con)
    report = merge_events(con, [], datetime(2027, 2, 1))
    assert (report.candidates, report.inserted, report.updated, report.not_derived, report.open) == (0, 0, 0, 4, 0)
    after = rows(con)
    assert {k: v[:4] for k, v in after.items()} == {k: v[:4] for k, v in before.items()}
    assert {v[4] for v in after.values()} == {"closed"}


def _source(con: duckdb.DuckDBPyConnection, eid: str) -> tuple:
    return con.execute("SELECT source_article_id, source_published_at, event_description, withdrawn_reason "
                       "FROM prediction_events WHERE id = ?", [eid]).fetchall()[0]


def test_a_source_edited_into_other_news_hands_the_event_to_the_article_still_asking(warehouse: Path) -> None:
    con = connect(warehouse)
    store_articles(con, ARTICLES)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW, complete=True)
    (eid,) = [i for i, r in rows(con).items() if r[3] == "a1"]  # a1 and a3 ask it; a1 is the earlier
    edited = [replace(ARTICLES[0], title="Bitcoin Slips 5% as Traders Take Profits"), *ARTICLES[1:]]
    store_articles(con, edited)
    merge_events(con, derive_events(edited, NAMES), NOW + timedelta(hours=1), complete=True)
    source, published, description, reason = _source(con, eid)
    assert (source, published, reason) == ("a3", ARTICLES[2].published_at, None)
    assert "Options Market" in description and "Midterm" not in description


def test_a_source_edited_into_another_question_says_so_when_withdrawn(warehouse: Path) -> None:
    con = connect(warehouse)
    store_articles(con, ARTICLES)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW, complete=True)
    (old,) = [i for i, r in rows(con).items() if r[3] == "a2"]
    edited = [*ARTICLES[:1], replace(ARTICLES[1], title="Analysts: ETH Could Hit $6,000 by Year-End"), *ARTICLES[2:]]
    store_articles(con, edited)
    merge_events(con, derive_events(edited, NAMES), NOW + timedelta(hours=1), complete=True)
    (new,) = [i for i, r in rows(con).items() if r[3] == "a2" and i != old]
    reason = _source(con, old)[3]
    assert reason and reason.startswith("its source article now gives another question") and new in reason, reason
    assert "$6,000" in reason


@pytest.mark.parametrize("complete", [True, False])
def test_a_source_re_dated_later_is_followed(warehouse: Path, complete: bool) -> None:
    con = connect(warehouse)
    store_articles(con, ARTICLES)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW, complete=complete)
    (eid,) = [i for i, r in rows(con).items() if r[3] == "a2"]
    later = replace(ARTICLES[1], published_at=ARTICLES[1].published_at + timedelta(hours=3))
    redated = [*ARTICLES[:1], later, *ARTICLES[2:]]
    store_articles(con, redated)
    merge_events(con, derive_events(redated, NAMES), NOW + timedelta(hours=1), complete=complete)
    assert _source(con, eid)[:2] == ("a2", later.published_at)


def test_a_withdrawal_names_only_what_its_current_source_asks_now(warehouse: Path) -> None:
    con = connect(warehouse)
    store_articles(con, ARTICLES)
    merge_events(con, derive_events(ARTICLES, NAMES), NOW, complete=True)
    (eid,) = [i for i, r in rows(con).items() if r[3] == "a1"]  # a1 and a3 ask it
    step = [*ARTICLES[:2], replace(ARTICLES[2], title="Bitcoin Eyes $120K: Options Market Prices 45% Chance"),
            *ARTICLES[3:]]  # a3, a former source, now asks another question; a1 still asks this one
    store_articles(con, step)
    merge_events(con, derive_events(step, NAMES), NOW + timedelta(hours=1), complete=True)
    assert _source(con, eid)[0] == "a1" and _source(con, eid)[3] is None
    step = [replace(step[0], title="Bitcoin Slips 5% as Traders Take Profits"), *step[1:]]
    store_articles(con, step)
    merge_events(con, derive_events(step, NAMES), NOW + timedelta(hours=2), complete=True)
    reason = _source(con, eid)[3]
    assert reason and reason.startswith("no article derives this question any more"), reason


def test_the_warehouse_check_knows_every_kind_the_derivation_writes() -> None:
    from pipeline.events.templates import KINDS
    from warehouse.events import EVENT_KINDS

    assert sorted(KINDS) == sorted(EVENT_KINDS)
