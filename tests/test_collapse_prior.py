"""cryptoNews(collapseStories: true) with filters: each story listed once, by its earliest article that passes them.

One filter (tickers, topics, sources, sentiment, or since) is answered by a row condition on columns written at
publish (``warehouse.publish.PRIOR_SQL``), other combinations by checking each page's stories with a query. Both
must give what a plain reading of the rows gives, on real multi-article stories spread over a set's parts and in a
single file, page by page in both directions.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.newsdata import Data, make_articles, open_reader, write
from warehouse.cursors import decode_news_cursor, parse_instant
from warehouse.db import connect
from warehouse.parts import publish_set
from warehouse.publish import publish_snapshot
from warehouse.read import NewsFilters, PageRequest, SnapshotReader

NOW = datetime(2025, 3, 10, 14, 30)
SINCE, UNTIL = parse_instant("2025-03-02T10:00:00"), parse_instant("2025-03-08")
FILTERS = [  # the first eight take the row condition (until too), the rest the per-page check
    NewsFilters(tickers=("ETH",)), NewsFilters(tickers=("sol", "DOGE")), NewsFilters(topics=("defi",)),
    NewsFilters(sources=("decrypt", "the block")), NewsFilters(sentiment="Positive"), NewsFilters(since=SINCE),
    NewsFilters(since=SINCE, until=UNTIL), NewsFilters(tickers=("BTC",), until=UNTIL),
    NewsFilters(tickers=("ETH",), topics=("markets",)), NewsFilters(tickers=("ETH",), since=SINCE),
    NewsFilters(search="Article 1"),
]


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], dict[str, str], list[Path]]:
    tmp = tmp_path_factory.mktemp("collapse")
    articles = make_articles(400, 30, seed=5, start=NOW - timedelta(minutes=20))
    rng = random.Random(9)
    ordered = sorted(articles, key=lambda a: (a["published_at"], a["id"]))
    story: dict[str, str] = {}
    i = 0
    while i < len(ordered):  # runs of 1-6 neighbours in time, so stories cross the parts' period boundaries
        members = ordered[i:i + rng.choice([1, 1, 2, 3, 4, 6])]
        for a in members:
            story[a["id"]] = f"st_{members[0]['id']}"
        i += len(members)
    con = connect(tmp / "warehouse.duckdb")
    try:
        con.execute("BEGIN")
        write(con, Data(articles, []))
        for sid in set(story.values()):
            members = [a for a in ordered if story[a["id"]] == sid]
            con.execute("INSERT INTO stories VALUES (?, ?, ?, ?, ?, ?, NULL, [], [], ?)",
                        [sid, members[0]["title"], members[0]["published_at"], members[-1]["published_at"],
                         len(members), len({a["source_name"] for a in members}), NOW])
            for a in members:
                con.execute("INSERT INTO story_articles VALUES (?, ?, ?, ?)", [a["id"], sid, a["published_at"], NOW])
        con.execute("COMMIT")
        paths = [publish_set(con, tmp / "sets", now=NOW), publish_snapshot(con, tmp / "single")]
    finally:
        con.close()
    return articles, story, paths


def _passes(a: dict[str, Any], f: NewsFilters) -> bool:
    if f.tickers and not {t.upper() for t in f.tickers} & set(a["tickers"]):
        return False
    if f.topics and not {t.lower() for t in f.topics} & set(a["topics"]):
        return False
    if f.sources and a["source_name"].lower() not in {s.lower() for s in f.sources}:
        return False
    if f.sentiment and a["sentiment"].capitalize() != f.sentiment:
        return False
    if f.search and f.search.lower() not in (a["title"] + " " + a["summary"]).lower():
        return False
    if f.since and a["published_at"] < f.since.at:
        return False
    return not (f.until and a["published_at"] >= f.until.upper_exclusive())


def _expected(articles: list[dict[str, Any]], story: dict[str, str], f: NewsFilters) -> list[str]:
    first: dict[str, dict[str, Any]] = {}
    for a in sorted(articles, key=lambda a: (a["published_at"], a["id"])):
        if _passes(a, f):
            first.setdefault(story[a["id"]], a)
    return [a["id"] for a in sorted(first.values(), key=lambda a: (a["published_at"], a["id"]), reverse=True)]


def _walk(reader: SnapshotReader, f: NewsFilters, size: int, backwards: bool) -> list[tuple]:
    pages, cursor = [], None
    for _ in range(500):
        req = PageRequest(last=size, before=cursor) if backwards else PageRequest(first=size, after=cursor)
        page = reader.news_page(req, f)
        pages.append(([r["id"] for r in page.rows], page.has_next, page.has_previous))
        if not page.rows or not (page.has_previous if backwards else page.has_next):
            return pages
        cursor = decode_news_cursor((page.rows[0] if backwards else page.rows[-1])["_cursor"])
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("layout", ["set", "single"])
def test_each_story_is_listed_once_by_its_earliest_matching_article(
    snapshots: tuple[list[dict[str, Any]], dict[str, str], list[Path]], layout: str
) -> None:
    articles, story, paths = snapshots
    assert sum(1 for s in set(story.values()) if list(story.values()).count(s) > 2) > 20
    con, reader = open_reader(paths[0 if layout == "set" else 1])
    try:
        # the same snapshot read without the row condition (as a set published before it): the per-page check
        checked = SnapshotReader(con.cursor(), reader.tag, reader.counts["news"], reader.counts["events"], None,
                                 reader.layout, facts={"news_prior": False})
        for i, f in enumerate(FILTERS):
            assert (reader._prior_condition(f) is not None) == (i < 8), f
            f = NewsFilters(**{**f.__dict__, "collapse_stories": True})
            want = _expected(articles, story, f)
            assert want, f
            for size in (3, 50):
                for backwards in (False, True):
                    pages = _walk(reader, f, size, backwards)
                    ids = [i for p in (reversed(pages) if backwards else pages) for i in p[0]]
                    assert ids == want, (f, size, backwards)
                    assert pages == _walk(checked, f, size, backwards), (f, size, backwards)
    finally:
        con.close()


def test_a_story_out_of_step_with_its_articles_dates_still_gets_every_earlier_article(tmp_path: Path) -> None:
    """A date corrected after grouping can put an article before its story's stored first_seen, where the
    members' lookup by time does not reach: publishing finds every member all the same."""
    articles = make_articles(12, 0, seed=3, start=NOW - timedelta(minutes=20))
    a, b, c = sorted(articles[::3][:3], key=lambda a: (a["published_at"], a["id"]))  # three times, hours apart
    for m, tickers in zip((a, b, c), (["SOL"], ["ETH"], ["ETH"]), strict=True):
        m["tickers"] = tickers
    con = connect(tmp_path / "warehouse.duckdb")
    try:
        write(con, Data(articles, []))
        con.execute("INSERT INTO stories VALUES ('st_x', 't', ?, ?, 3, 3, NULL, [], [], ?)",
                    [b["published_at"], c["published_at"], NOW])  # first_seen after the earliest member's date
        for m in (a, b, c):
            con.execute("INSERT INTO story_articles VALUES (?, 'st_x', ?, ?)", [m["id"], b["published_at"], NOW])
        path = publish_set(con, tmp_path / "sets", now=NOW)
    finally:
        con.close()
    scon, reader = open_reader(path)
    try:
        prior = dict(scon.execute("SELECT id, story_prior_tickers FROM news WHERE story_id = 'st_x'").fetchall())
        assert prior[a["id"]] is None and sorted(prior[c["id"]]) == ["ETH", "SOL"]
        listed = [r["id"] for r in reader.news_page(PageRequest(first=50), NewsFilters(tickers=("SOL", "ETH"),
                                                                                        collapse_stories=True)).rows]
        assert a["id"] in listed and b["id"] not in listed and c["id"] not in listed
    finally:
        scon.close()
