"""cryptoNews(collapseStories: true) with filters: each story listed once, by its earliest article that passes them.

One filter (tickers, topics, sources, sentiment, or since) is answered by a row condition on columns written at
publish (``warehouse.parts.contents.PRIOR_SQL``), other combinations by checking each page's stories with a query. Both
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


def _priors(path: Path) -> list[tuple]:
    scon, _ = open_reader(path)
    try:
        return scon.execute("SELECT id, story_prev_at, list_sort(story_prior_tickers), list_sort(story_prior_sources), story_first "
                            "FROM news ORDER BY id").fetchall()
    finally:
        scon.close()


def test_a_partial_publish_writes_what_a_full_one_writes(tmp_path: Path) -> None:
    """A publish rebuilds only the periods that changed; the later articles of a story whose earlier one changed
    (a late report joining it, a re-tag published before the stories step ran) lie in other periods, whose parts
    must be rebuilt too."""
    from warehouse import stories as ws

    articles = make_articles(60, 0, seed=3, start=NOW)
    for k, a in enumerate(articles):  # 7 hours apart over 17 days: hour, day and month parts
        a.update(published_at=NOW - timedelta(hours=7 * k + 1), tickers=["BTC"], source_name="CoinDesk")
    b, c, d = articles[30], articles[12], articles[2]  # one story, days apart
    con = connect(tmp_path / "warehouse.duckdb")
    try:
        write(con, Data(articles, []))
        ws.save_assignments(con, [(a["id"], f"st_{a['id']}", a["published_at"]) for a in articles
                                  if a not in (c, d)], NOW)
        ws.save_assignments(con, [(m["id"], f"st_{b['id']}", m["published_at"]) for m in (c, d)], NOW)
        publish_set(con, tmp_path / "sets", now=NOW)

        late = make_articles(1, 0, seed=99)[0]  # reported a day before b, found later: the story's first now
        late.update(published_at=b["published_at"] - timedelta(days=1), tickers=["SOL"], source_name="Decrypt")
        write(con, Data([late], []))
        con.execute("UPDATE articles SET fetched_at = ? WHERE id = ?", [NOW + timedelta(minutes=5), late["id"]])
        ws.save_assignments(con, [(late["id"], f"st_{b['id']}", late["published_at"])], NOW + timedelta(minutes=5))
        at = NOW + timedelta(minutes=10)
        assert _priors(publish_set(con, tmp_path / "sets", now=at)) == _priors(publish_set(con, tmp_path / "f1", now=at))

        # c re-tagged (the articles step), published before the stories step brings the story in step
        con.execute("UPDATE articles SET tickers = ['XRP'], tagged_at = ? WHERE id = ?", [at + timedelta(minutes=1), c["id"]])
        at += timedelta(minutes=5)
        partial, full = _priors(publish_set(con, tmp_path / "sets", now=at)), _priors(publish_set(con, tmp_path / "f2", now=at))
        assert partial == full
        assert next(r for r in full if r[0] == d["id"])[2] == ["BTC", "SOL", "XRP"]
    finally:
        con.close()


def test_a_date_corrected_without_the_stories_step_rebuilds_the_rest_of_its_story(tmp_path: Path) -> None:
    """An inferred date replaced by the real one changes no stamp (the whole-table time sum finds the two periods
    the article left and joined); the other articles of its story, in other periods, now have another article
    before them: a publish run alone (``--select serving_snapshot``) must rebuild their parts too."""
    from warehouse import stories as ws

    articles = make_articles(60, 0, seed=3, start=NOW)
    for k, a in enumerate(articles):  # 7 hours apart over 17 days
        a.update(published_at=NOW - timedelta(hours=7 * k + 1), tickers=["BTC"], source_name="CoinDesk")
    b, c, d = articles[30], articles[12], articles[2]  # one story, days apart
    d["tickers"] = ["SOL"]
    con = connect(tmp_path / "warehouse.duckdb")
    try:
        write(con, Data(articles, []))
        ws.save_assignments(con, [(a["id"], f"st_{a['id']}", a["published_at"]) for a in articles
                                  if a not in (b, c, d)], NOW)
        ws.save_assignments(con, [(m["id"], f"st_{b['id']}", m["published_at"]) for m in (b, c, d)], NOW)
        publish_set(con, tmp_path / "sets", now=NOW)
        # d's real date, a day before b: the story's first article now (the stories step has not run since)
        con.execute("UPDATE articles SET published_at = ? WHERE id = ?",
                    [b["published_at"] - timedelta(days=1), d["id"]])
        at = NOW + timedelta(minutes=5)
        partial, full = _priors(publish_set(con, tmp_path / "sets", now=at)), _priors(publish_set(con, tmp_path / "f", now=at))
        assert partial == full
        assert next(r for r in full if r[0] == c["id"])[2] == ["BTC", "SOL"]
    finally:
        con.close()


def test_parts_written_before_the_columns_are_built_anew(tmp_path: Path) -> None:
    """A set published by the code before (no "contents" in its manifest) has parts without the columns: the next
    publish rebuilds every part, so the row condition is never asked of a set that lacks it. The format stays 3:
    an API of that code reads the new sets."""
    import json

    from warehouse.parts import read_manifest, set_parts

    con = connect(tmp_path / "warehouse.duckdb")
    try:
        write(con, Data(make_articles(200, 0, seed=4, start=NOW), []))
        first = publish_set(con, tmp_path / "sets", now=NOW)
        manifest = read_manifest(first)
        assert manifest["format"] == 3 and manifest["contents"] == 4
        kept = publish_set(con, tmp_path / "sets", now=NOW)
        assert len(set(set_parts(first)) & set(set_parts(kept))) > 5  # unchanged periods are reused
        del manifest["contents"]
        kept.write_text(json.dumps(manifest))  # as the code before wrote it
        again = publish_set(con, tmp_path / "sets", now=NOW)
        assert not set(set_parts(again)) & set(set_parts(kept))
    finally:
        con.close()
