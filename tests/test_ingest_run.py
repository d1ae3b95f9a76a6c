"""Whole ingestion runs against real HTTP servers on 127.0.0.1 and a real DuckDB file."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from pipeline.ingest import AllFeedsFailed, Feed, IngestReport, ingest
from tests.support.feedgen import item, rss
from tests.support.httpserver import LocalServer, Reply, RequestHandler, conditional, static
from warehouse.config import Settings
from warehouse.db import connect

RSS = "application/rss+xml; charset=utf-8"


def rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute("SELECT * FROM raw_articles ORDER BY id").fetchall()


def article(con: duckdb.DuckDBPyConnection, url: str) -> dict:
    cur = con.execute("SELECT * FROM raw_articles WHERE url = ?", [url])
    names = [d[0] for d in cur.description]
    (row,) = cur.fetchall()
    return dict(zip(names, row, strict=True))


def three_items(title0: str = "Bitcoin tops $100k") -> str:
    return rss(
        item(title0, "https://news.example.com/btc?utm_source=rss", pub="Mon, 03 Mar 2025 10:00:00 +0000"),
        item("Ether upgrade ships", "https://news.example.com/eth", pub="Mon, 03 Mar 2025 11:00:00 +0000"),
        item("SOL ETF decision", "https://news.example.com/sol", pub="Mon, 03 Mar 2025 12:00:00 +0000"),
    )


def test_second_run_with_same_feeds_changes_nothing(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/a.xml"] = static(three_items(), RSS)  # no validators: the body is parsed again
    feeds = [Feed("A", local_server.url("/a.xml"))]

    first = ingest(con, feeds, settings)
    before = rows(con)
    second = ingest(con, feeds, settings)

    assert (first.new, first.updated, first.unchanged) == (3, 0, 0)
    assert (second.new, second.updated, second.unchanged) == (0, 0, 3)
    assert rows(con) == before  # not one column of one row moved, updated_at included
    assert local_server.hits("/a.xml") == 2
    health = con.execute(
        "SELECT run_id, items_seen, items_new, items_updated, http_status FROM feed_fetches ORDER BY started_at"
    ).fetchall()
    assert health == [(first.run_id, 3, 3, 0, 200), (second.run_id, 3, 0, 0, 200)]


def test_an_article_in_two_feeds_or_twice_in_one_is_one_row(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    shared = item("Shared story", "https://news.example.com/shared?utm_campaign=x#comments")
    local_server.routes["/a.xml"] = static(
        rss(shared, item("Only in A", "https://news.example.com/a"), shared), RSS
    )
    local_server.routes["/b.xml"] = static(
        rss(
            item("Shared story", "https://NEWS.example.com/shared?fbclid=abc"),
            item("Only in B", "https://b.example/1"),
        ),
        RSS,
    )
    feeds = [Feed("A", local_server.url("/a.xml")), Feed("B", local_server.url("/b.xml"))]

    report = ingest(con, feeds, settings)

    assert con.execute("SELECT count(*) FROM raw_articles").fetchall() == [(3,)]
    assert article(con, "https://news.example.com/shared")["source_name"] == "A"  # first feed wins
    a, b = report.results
    assert (a.items_seen, a.items_new, b.items_seen, b.items_new) == (3, 2, 2, 1)
    assert report.new == 3


def test_a_copy_in_another_feed_never_overwrites_the_original(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """The first feed answers 304 (or dropped the item) while a syndicating feed changes: its copy, dated later
    and worded otherwise, used to replace the original's date and text (an API client saw the article move)."""
    link = "https://news.example.com/firedancer"
    original = rss(item("Firedancer ships", link, pub="Mon, 09 Nov 2026 08:25:00 +0000", description="By us."))
    copy = item("Firedancer ships (via Chain Herald)", link, pub="Mon, 09 Nov 2026 10:30:00 +0000",
                description="Syndicated.")
    local_server.routes["/a.xml"] = conditional(original, etag='"a1"')
    local_server.routes["/b.xml"] = static(rss(copy), RSS)
    feeds = [Feed("A", local_server.url("/a.xml")), Feed("B", local_server.url("/b.xml"))]
    ingest(con, feeds, settings)
    before = article(con, link)
    assert (before["source_name"], before["published_at"]) == ("A", datetime(2026, 11, 9, 8, 25))

    local_server.routes["/b.xml"] = static(rss(copy, item("Another B story", "https://b.example/2")), RSS)
    report = ingest(con, feeds, settings)  # A: 304; B: changed, its copy now the only one in the run
    assert report.results[0].not_modified and (report.new, report.updated) == (1, 0)
    assert article(con, link) == before

    edited = rss(item("Firedancer ships today", link, pub="Mon, 09 Nov 2026 08:25:00 +0000", description="By us."))
    local_server.routes["/a.xml"] = conditional(edited, etag='"a2"')
    report = ingest(con, feeds, settings)  # the first source's own edit still applies
    assert report.updated == 1 and article(con, link)["title"] == "Firedancer ships today"


def test_a_changed_title_updates_the_row_and_does_not_duplicate_it(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/a.xml"] = static(three_items("Bitcoin tops $100k"), RSS)
    feeds = [Feed("A", local_server.url("/a.xml"))]
    ingest(con, feeds, settings)
    old = article(con, "https://news.example.com/btc")
    others = con.execute("SELECT * FROM raw_articles WHERE url <> 'https://news.example.com/btc'").fetchall()
    time.sleep(0.01)  # updated_at has microseconds; make sure a move would show

    local_server.routes["/a.xml"] = static(three_items("Bitcoin tops $100,000 (updated)"), RSS)
    report = ingest(con, feeds, settings)

    new = article(con, "https://news.example.com/btc")
    assert (report.new, report.updated, report.unchanged) == (0, 1, 2)
    assert report.results[0].items_updated == 1
    assert con.execute("SELECT count(*) FROM raw_articles").fetchall() == [(3,)]
    assert new["id"] == old["id"]
    assert new["title"] == "Bitcoin tops $100,000 (updated)"
    assert new["content_hash"] != old["content_hash"]
    assert new["updated_at"] > old["updated_at"]
    assert new["fetched_at"] == old["fetched_at"]  # first seen stays first seen
    assert (
        con.execute("SELECT * FROM raw_articles WHERE url <> 'https://news.example.com/btc'").fetchall()
        == others
    )


def test_conditional_get_remembers_validators_and_a_304_costs_no_parsing(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/etag.xml"] = conditional(three_items(), etag='"v1"')
    lm = "Mon, 03 Mar 2025 12:00:00 GMT"
    local_server.routes["/lm.xml"] = conditional(
        rss(item("Other", "https://other.example.com/1")), last_modified=lm
    )
    feeds = [Feed("E", local_server.url("/etag.xml")), Feed("L", local_server.url("/lm.xml"))]

    ingest(con, feeds, settings)
    before = rows(con)
    second = ingest(con, feeds, settings)

    assert [(r.http_status, r.not_modified, r.items_seen, r.bytes, r.error) for r in second.results] == [
        (304, True, 0, 0, None),
        (304, True, 0, 0, None),
    ]
    etag_reqs = [s for s in local_server.seen if s.path == "/etag.xml"]
    lm_reqs = [s for s in local_server.seen if s.path == "/lm.xml"]
    assert "if-none-match" not in etag_reqs[0].headers
    assert etag_reqs[1].headers["if-none-match"] == '"v1"'
    assert lm_reqs[1].headers["if-modified-since"] == lm
    assert rows(con) == before
    assert con.execute(
        "SELECT feed_url, etag, last_modified FROM feed_state ORDER BY feed_url"
    ).fetchall() == [
        (local_server.url("/etag.xml"), '"v1"', None),
        (local_server.url("/lm.xml"), None, lm),
    ]


def test_user_agent_is_honest(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/a.xml"] = static(three_items(), RSS)
    ingest(con, [Feed("A", local_server.url("/a.xml"))], settings)
    (seen,) = local_server.seen
    assert seen.headers["user-agent"] == settings.user_agent
    assert "cryptowire" in seen.headers["user-agent"]


def test_a_crash_while_writing_leaves_every_table_as_it_was(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/a.xml"] = conditional(three_items("Version one"), etag='"v1"')
    feeds = [Feed("A", local_server.url("/a.xml"))]
    ingest(con, feeds, settings)
    tables = ("raw_articles", "feed_state", "feed_fetches")
    before = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in tables}

    # New content, and a real fault in the run's last write: feed_fetches becomes a view, which cannot
    # take rows. By then the merge has already updated an article and inserted nothing else.
    local_server.routes["/a.xml"] = conditional(three_items("Version two") + "<!-- v2 -->", etag='"v2"')
    con.execute("ALTER TABLE feed_fetches RENAME TO feed_fetches_real")
    con.execute("CREATE VIEW feed_fetches AS SELECT * FROM feed_fetches_real")
    with pytest.raises(duckdb.Error):
        ingest(con, feeds, settings)
    con.execute("DROP VIEW feed_fetches")
    con.execute("ALTER TABLE feed_fetches_real RENAME TO feed_fetches")

    after = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in tables}
    assert after == before
    assert article(con, "https://news.example.com/btc")["title"] == "Version one"
    # The validators were not saved either, so the next run fetches the new version in full.
    report = ingest(con, feeds, settings)
    assert report.results[0].http_status == 200 and report.updated == 1


def test_when_every_feed_fails_health_is_recorded_and_the_run_raises(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/html"] = static("<!doctype html><html><body>Sign in</body></html>")
    with LocalServer() as refused:  # started, then closed: its port refuses connections
        refused_url = refused.url("/feed.xml")
    feeds = [
        Feed("Missing", local_server.url("/missing.xml")),
        Feed("Page", local_server.url("/html")),
        Feed("Down", refused_url),
    ]
    with pytest.raises(AllFeedsFailed) as err:
        ingest(con, feeds, settings)

    message = str(err.value)
    assert "all 3 feeds failed" in message
    assert f"Missing <{local_server.url('/missing.xml')}>: HTTP 404" in message
    assert "Page <" in message and "got an HTML page" in message
    assert "Down <" in message and "ConnectError" in message
    report: IngestReport = err.value.report
    assert report.all_failed
    health = con.execute(
        "SELECT feed_name, http_status, error IS NOT NULL FROM feed_fetches ORDER BY feed_name"
    ).fetchall()
    assert health == [("Down", None, True), ("Missing", 404, True), ("Page", 200, True)]
    assert con.execute("SELECT count(*) FROM raw_articles").fetchall() == [(0,)]


def test_disabled_feeds_are_not_fetched(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/a.xml"] = static(three_items(), RSS)
    local_server.routes["/off.xml"] = static(three_items(), RSS)
    report = ingest(
        con,
        [Feed("A", local_server.url("/a.xml")), Feed("Off", local_server.url("/off.xml"), enabled=False)],
        settings,
    )
    assert [r.feed.name for r in report.results] == ["A"]
    assert local_server.hits("/off.xml") == 0


def test_local_files_are_read_from_disk_and_skipped_when_unchanged(
    con: duckdb.DuckDBPyConnection, settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "feed.xml"
    path.write_text(three_items())
    size = path.stat().st_size
    feeds = [Feed("Local", path.as_uri(), language="de")]

    first = ingest(con, feeds, settings)
    second = ingest(con, feeds, settings)
    path.write_text(three_items("Changed on disk"))
    third = ingest(con, feeds, settings)

    assert (first.new, first.results[0].http_status, first.results[0].bytes) == (3, None, size)
    assert second.results[0].not_modified and second.results[0].items_seen == 0
    assert third.updated == 1
    assert {r[0] for r in con.execute("SELECT language FROM raw_articles").fetchall()} == {
        "de"
    }  # the file's wins


def test_missing_local_file_is_a_feed_error(
    con: duckdb.DuckDBPyConnection, settings: Settings, tmp_path: Path
) -> None:
    good = tmp_path / "good.xml"
    good.write_text(three_items())
    report = ingest(
        con, [Feed("Gone", (tmp_path / "gone.xml").as_uri()), Feed("Good", good.as_uri())], settings
    )
    assert report.results[0].error is not None and "no such file" in report.results[0].error
    assert report.new == 3


def test_date_rules_missing_far_future_and_a_late_real_date(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    future = (datetime.now() + timedelta(days=30)).strftime("%a, %d %b %Y %H:%M:%S +0000")
    near = datetime.now().replace(microsecond=0) + timedelta(hours=2)
    local_server.routes["/a.xml"] = static(
        rss(
            item("No date", "https://d.example.com/none", pub=None),
            item("Far future", "https://d.example.com/future", pub=future),
            item("Epoch", "https://d.example.com/epoch", pub="Thu, 01 Jan 1970 00:00:00 +0000"),
            item(
                "Clock skew", "https://d.example.com/near", pub=near.strftime("%a, %d %b %Y %H:%M:%S +0000")
            ),
        ),
        RSS,
    )
    feeds = [Feed("A", local_server.url("/a.xml"))]
    ingest(con, feeds, settings)
    (fetched_at,) = {
        r[0].replace(microsecond=0) for r in con.execute("SELECT fetched_at FROM raw_articles").fetchall()
    }
    for url in ("https://d.example.com/none", "https://d.example.com/future", "https://d.example.com/epoch"):
        row = article(con, url)
        assert (row["published_at"], row["date_inferred"]) == (fetched_at, True), url
    near_row = article(con, "https://d.example.com/near")
    assert (near_row["published_at"], near_row["date_inferred"]) == (near, False)  # within a day: believed

    # An inferred date stays put on later runs, until the feed gives a real one.
    ingest(con, feeds, settings)
    assert article(con, "https://d.example.com/none")["published_at"] == fetched_at
    local_server.routes["/a.xml"] = static(
        rss(item("No date", "https://d.example.com/none", pub="Tue, 04 Mar 2025 05:06:07 +0000")), RSS
    )
    report = ingest(con, feeds, settings)
    row = article(con, "https://d.example.com/none")
    assert (row["published_at"], row["date_inferred"], report.updated) == (
        datetime(2025, 3, 4, 5, 6, 7),
        False,
        1,
    )



def test_a_publishers_date_correction_alone_is_taken_but_not_a_fetch_time_stamp(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    link = "https://d.example.com/corrected"
    feeds = [Feed("A", local_server.url("/a.xml"))]
    local_server.routes["/a.xml"] = static(rss(item("Firedancer ships", link, pub="Sat, 21 Nov 2026 00:00:00 +0000")), RSS)
    ingest(con, feeds, settings)
    # The publisher corrects the date (same text): an earlier real date is a correction, and it is taken.
    local_server.routes["/a.xml"] = static(rss(item("Firedancer ships", link, pub="Fri, 20 Nov 2026 09:15:00 +0000")), RSS)
    report = ingest(con, feeds, settings)
    assert (article(con, link)["published_at"], report.updated) == (datetime(2026, 11, 20, 9, 15), 1)
    # A later date hours before the fetch is a correction too ...
    fmt = "%a, %d %b %Y %H:%M:%S +0000"
    later = (datetime.now(UTC) - timedelta(days=2)).replace(tzinfo=None, microsecond=0)
    local_server.routes["/a.xml"] = static(rss(item("Firedancer ships", link, pub=later.strftime(fmt))), RSS)
    report = ingest(con, feeds, settings)
    assert (article(con, link)["published_at"], report.updated) == (later, 1)
    # ... but not one after the item was first fetched (a cache's build time), nor one within hours of the fetch:
    # a feed that stamps every item with the request's time would move it every run.
    first_seen = later - timedelta(days=1)  # as if first fetched three days ago
    con.execute("UPDATE raw_articles SET fetched_at = ? WHERE url = ?", [first_seen, link])
    built = later + timedelta(hours=1)  # after the first fetch: no publication time
    local_server.routes["/a.xml"] = static(rss(item("Firedancer ships", link, pub=built.strftime(fmt))), RSS)
    assert ingest(con, feeds, settings).updated == 0 and article(con, link)["published_at"] == later
    stamped = datetime.now(UTC) - timedelta(minutes=30)
    local_server.routes["/a.xml"] = static(rss(item("Firedancer ships", link, pub=stamped.strftime(fmt))), RSS)
    report = ingest(con, feeds, settings)
    assert (article(con, link)["published_at"], report.updated) == (later, 0)



def test_the_feeds_offset_of_a_date_is_kept_beside_it(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/a.xml"] = static(rss(
        item("Seoul desk", "https://d.example.com/seoul", pub="Fri, 27 Nov 2026 07:30:00 +09:00"),
        item("New York desk", "https://d.example.com/ny", pub="Thu, 26 Nov 2026 20:00:00 EST"),
        item("No zone", "https://d.example.com/plain", pub="Thu, 26 Nov 2026 20:00:00"),
        item("No date", "https://d.example.com/none", pub=None),
    ), RSS)
    ingest(con, [Feed("A", local_server.url("/a.xml"))], settings)
    got = dict(con.execute("SELECT url, published_offset FROM raw_articles").fetchall())
    assert got == {"https://d.example.com/seoul": 540, "https://d.example.com/ny": -300,
                   "https://d.example.com/plain": None, "https://d.example.com/none": None}
    assert article(con, "https://d.example.com/seoul")["published_at"] == datetime(2026, 11, 26, 22, 30)


@pytest.mark.parametrize("limit", [3, 10])  # 10: three connection pools of 4 and still at most 10 at once
def test_fetching_is_concurrent_but_bounded(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer, limit: int
) -> None:
    cond = threading.Condition()
    state = {"now": 0, "max": 0, "started": 0}
    body = three_items().encode()

    def slow(req: RequestHandler) -> Reply:
        with cond:
            state["now"] += 1
            state["started"] += 1
            state["max"] = max(state["max"], state["now"])
            cond.notify_all()
            # The first `limit` requests wait for each other (so that a loaded machine cannot hide the
            # concurrency); the client must never let more than `limit` in at once.
            if state["started"] <= limit:
                cond.wait_for(lambda: state["now"] >= limit, timeout=3)
        time.sleep(0.1)
        with cond:
            state["now"] -= 1
        return Reply(200, body, {"Content-Type": RSS})

    n = limit + 5
    for i in range(n):
        local_server.routes[f"/{i}.xml"] = slow
    feeds = [Feed(f"F{i}", local_server.url(f"/{i}.xml")) for i in range(n)]
    t0 = time.perf_counter()
    report = ingest(con, feeds, settings.model_copy(update={"fetch_concurrency": limit}))
    elapsed = time.perf_counter() - t0
    assert not report.failed
    assert state["max"] == limit
    assert elapsed < 3  # all released together, not one after another


def test_validators_are_kept_only_after_a_good_parse(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/a.xml"] = conditional("<html><body>maintenance</body></html>", etag='"same"')
    feeds = [Feed("A", local_server.url("/a.xml"))]
    with pytest.raises(AllFeedsFailed):
        ingest(con, feeds, settings)
    local_server.routes["/a.xml"] = conditional(three_items(), etag='"same"')  # a server that reuses its ETag
    report = ingest(con, feeds, settings)
    assert "if-none-match" not in local_server.seen[-1].headers
    assert (report.results[0].http_status, report.new) == (200, 3)


def test_the_raw_date_check_accepts_a_real_date_a_later_fetch_brought(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """First seen with a date too far ahead (inferred), the real date came days later within a day of that fetch:
    ingestion accepts it, so the check must too (it compared with the first fetch and failed for good)."""
    from pipeline.checks import RAW_TITLE_OR_DATE_WRONG

    local_server.routes["/a.xml"] = static(three_items(), RSS)
    ingest(con, [Feed("A", local_server.url("/a.xml"))], settings)
    first = article(con, "https://news.example.com/eth")["fetched_at"]
    later = first + timedelta(days=3)
    bad = f"SELECT count(*) FROM raw_articles WHERE {RAW_TITLE_OR_DATE_WRONG}"
    con.execute("UPDATE raw_articles SET updated_at = ?, published_at = ? WHERE url = 'https://news.example.com/eth'",
                [later, later + timedelta(hours=12)])
    assert con.execute(bad).fetchall() == [(0,)]
    con.execute("UPDATE raw_articles SET published_at = ? WHERE url = 'https://news.example.com/eth'",
                [later + timedelta(days=2)])  # beyond the fetch that brought it, plus a day
    assert con.execute(bad).fetchall() == [(1,)]


def _status_home(tmp_path: Path, settings: Settings) -> tuple[Settings, duckdb.DuckDBPyConnection]:
    home_settings = settings.model_copy(update={"home": tmp_path / "home"})
    home_settings.home.mkdir()
    return home_settings, connect(home_settings.warehouse_path)


def _status_report(home_settings: Settings) -> dict:
    from pipeline.status import _warehouse

    return {"home": "h", "warehouse": "w", "snapshots": "s", "feeds_file": "f", **_warehouse(home_settings),
            "serving": {"complete": False, "current": None, "problem": "none yet"}}


def test_status_shows_updates_and_sets_apart_feeds_the_last_run_did_not_fetch(
    tmp_path: Path, settings: Settings, local_server: LocalServer
) -> None:
    """An edit showed as `new 0 ok` (no updated count), and a feed disabled, removed or moved to another URL kept
    its old line as if it were current."""
    from pipeline.status import render

    home_settings, con = _status_home(tmp_path, settings)
    local_server.routes["/a.xml"] = static(three_items(), RSS)
    local_server.routes["/b.xml"] = static(rss(item("Only in B", "https://b.example/1")), RSS)
    ingest(con, [Feed("A", local_server.url("/a.xml")), Feed("B", local_server.url("/b.xml"))], home_settings)
    local_server.routes["/a.xml"] = static(three_items("Bitcoin tops $100,000 (updated)"), RSS)
    ingest(con, [Feed("A", local_server.url("/a.xml")), Feed("B", local_server.url("/b.xml"), enabled=False)],
           home_settings)
    con.close()
    report = _status_report(home_settings)
    a, b = report["feeds"]
    assert (a["feed"], a["updated"], a["in_last_run"]) == ("A", 1, True)
    assert (b["feed"], b["in_last_run"]) == ("B", False)
    lines = render(report).splitlines()
    at = lines.index("feeds (last fetch):")
    assert lines[at + 2].split()[0] == "A" and lines[at + 2].split()[-2:] == ["1", "ok"], lines[at:]
    assert lines[at + 3].startswith("  not fetched by the last run") and lines[at + 4].split()[0] == "B"


def test_a_feed_no_longer_fetched_keeps_its_last_error_as_history_not_as_an_error_now(
    tmp_path: Path, settings: Settings, local_server: LocalServer
) -> None:
    """An operator's review: a feed moved away from a 404 URL kept `"error"` in `status --json` for 30 days (for
    ever without the daemon), so an alert on it kept firing after the fix."""
    from pipeline.status import render

    home_settings, con = _status_home(tmp_path, settings)
    local_server.routes["/a.xml"] = static(three_items(), RSS)
    local_server.routes["/new.xml"] = static(rss(item("Only in C", "https://c.example/1")), RSS)
    ingest(con, [Feed("A", local_server.url("/a.xml")), Feed("C", local_server.url("/gone.xml"))], home_settings)
    ingest(con, [Feed("A", local_server.url("/a.xml")), Feed("C", local_server.url("/new.xml"))], home_settings)
    con.close()
    report = _status_report(home_settings)
    now = [f for f in report["feeds"] if f["in_last_run"]]
    then = [f for f in report["feeds"] if not f["in_last_run"]]
    assert [f["error"] for f in now] == [None, None] and len(then) == 1
    assert then[0]["error"] is None and "404" in then[0]["last_error"], then
    text = render(report)
    assert "then: ERROR" in text and "\n  C " in text.split("not fetched by the last run")[0], text


def test_the_first_source_s_edit_applies_when_an_earlier_feed_carries_a_copy(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """B brought the article first; then A, listed before B, syndicates it while B edits its own: B's edit is the
    one merged (the run kept A's copy, which the merge refuses as another source's, and B's edit was lost)."""
    link = "https://news.example.com/original"
    local_server.routes["/b.xml"] = static(rss(item("Original", link)), RSS)
    ingest(con, [Feed("B", local_server.url("/b.xml"))], settings)
    local_server.routes["/a.xml"] = static(rss(item("Original (syndicated)", link)), RSS)
    local_server.routes["/b.xml"] = static(rss(item("Original, corrected", link)), RSS)
    report = ingest(con, [Feed("A", local_server.url("/a.xml")), Feed("B", local_server.url("/b.xml"))], settings)
    row = article(con, link)
    assert (row["source_name"], row["title"]) == ("B", "Original, corrected")
    assert report.updated == 1 and [r.items_updated for r in report.results] == [0, 1]


def test_an_item_whose_link_moved_stays_one_article(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """A publisher edits a slug (same guid) or moves to https (same link but for the scheme): the item keeps its
    id and its link is updated in place, not stored a second time (which counted its sentiment twice)."""
    def feed(slug: str, scheme: str, title: str = "Cardano governance vote passes") -> str:
        return rss(
            item(title, f"http://ed.example/{slug}", guid="e-1", pub="Mon, 03 Mar 2025 10:00:00 +0000"),
            item("SOL rallies", f"{scheme}://good.example/sol", guid=f"{scheme}://good.example/sol", permalink=True,
                 pub="Mon, 03 Mar 2025 11:00:00 +0000"),
            item("ETH slides", f"{scheme}://www.good.example/eth/", pub="Mon, 03 Mar 2025 12:00:00 +0000"),
        )

    feeds = [Feed("Edit", local_server.url("/f.xml"))]
    local_server.routes["/f.xml"] = static(feed("e1", "http"), RSS)
    ingest(con, feeds, settings)
    ids = dict(con.execute("SELECT guid, id FROM raw_articles WHERE guid = 'e-1'").fetchall())
    before = sorted(r[0] for r in con.execute("SELECT id FROM raw_articles").fetchall())

    local_server.routes["/f.xml"] = static(feed("e1-cardano-governance-vote", "https", "Cardano vote passes"), RSS)
    second = ingest(con, feeds, settings)

    assert (second.new, second.updated) == (0, 3)
    after = con.execute("SELECT id, url, title FROM raw_articles ORDER BY id").fetchall()
    assert sorted(r[0] for r in after) == before
    assert {r[1] for r in after} == {"http://ed.example/e1-cardano-governance-vote", "https://good.example/sol",
                                     "https://www.good.example/eth/"}
    assert dict(con.execute("SELECT guid, id FROM raw_articles WHERE guid = 'e-1'").fetchall()) == ids


def test_a_guid_reused_for_another_item_is_not_taken_for_a_moved_link(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """Some feeds number their items (guid 1, 2, ...): a new item under an old number, with another title and
    date, is a new article; the stored one keeps its text."""
    feeds = [Feed("Numbered", local_server.url("/n.xml"))]
    local_server.routes["/n.xml"] = static(rss(
        item("First story", "https://n.example/first", guid="1", pub="Mon, 03 Mar 2025 10:00:00 +0000")), RSS)
    ingest(con, feeds, settings)
    local_server.routes["/n.xml"] = static(rss(
        item("Second story", "https://n.example/second", guid="1", pub="Tue, 04 Mar 2025 10:00:00 +0000")), RSS)
    second = ingest(con, feeds, settings)

    assert (second.new, second.updated) == (1, 0)
    assert sorted(r[0] for r in con.execute("SELECT title FROM raw_articles").fetchall()) == [
        "First story", "Second story"]


def test_a_feed_of_too_many_items_keeps_its_first_with_a_warning(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """A document of thousands of small items (one cut at the size cap held 77,000) would hold the run for hours:
    its newest items are kept, whatever the document's order, the rest dropped, and the feed's health says so."""
    many = rss(*(item(f"Item {i}", f"https://many.example/{i}", pub=f"Mon, 03 Mar 2025 {20 - i:02d}:00:00 +0000")
                 for i in (5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4)))  # oldest first but for the newest five
    local_server.routes["/many.xml"] = static(many, RSS)
    local_server.routes["/a.xml"] = static(three_items(), RSS)
    report = ingest(con, [Feed("Many", local_server.url("/many.xml")), Feed("A", local_server.url("/a.xml"))],
                    settings.model_copy(update={"feed_max_items": 5}))

    assert report.new == 8
    assert sorted(r[0] for r in con.execute("SELECT title FROM raw_articles WHERE source_name = 'Many'").fetchall()) == [
        f"Item {i}" for i in range(5)]
    warning = con.execute("SELECT warning FROM feed_fetches WHERE feed_name = 'Many'").fetchall()[0][0]
    assert "12 items" in warning and "kept the newest 5" in warning and "CRYPTOWIRE_FEED_MAX_ITEMS" in warning
    assert con.execute("SELECT warning FROM feed_fetches WHERE feed_name = 'A'").fetchall() == [(None,)]


def test_a_numbered_guid_under_a_repeated_title_is_a_new_article(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """A daily column under one title, numbered by position: tomorrow's is another article, not today's edited
    (from a review: the second run overwrote the first's row)."""
    feeds = [Feed("Daily", local_server.url("/d.xml"))]
    for day, pub in (("03", "Mon, 03 Mar 2025 18:00:00 +0000"), ("04", "Tue, 04 Mar 2025 18:00:00 +0000")):
        local_server.routes["/d.xml"] = static(rss(
            item("Crypto market wrap", f"https://d.example/2025/03/{day}/wrap", guid="1", pub=pub)), RSS)
        ingest(con, feeds, settings)
    assert con.execute("SELECT count(*) FROM raw_articles").fetchall() == [(2,)]


def test_two_items_claiming_one_stored_article_are_both_kept(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """The stored item moved (same guid and date) while another item appears at a variant of its old link: neither
    may take the stored row (from a review: one vanished and the other overwrote the stored article)."""
    feeds = [Feed("Two", local_server.url("/t.xml"))]
    local_server.routes["/t.xml"] = static(rss(
        item("Alpha", "https://www.t.example/a", guid="g1", pub="Mon, 03 Mar 2025 10:00:00 +0000")), RSS)
    ingest(con, feeds, settings)
    local_server.routes["/t.xml"] = static(rss(
        item("Alpha", "https://www.t.example/a-edited", guid="g1", pub="Mon, 03 Mar 2025 10:00:00 +0000"),
        item("Beta", "https://t.example/a/", pub="Tue, 04 Mar 2025 10:00:00 +0000")), RSS)
    ingest(con, feeds, settings)
    assert sorted(r[0] for r in con.execute("SELECT title FROM raw_articles").fetchall()) == ["Alpha", "Alpha", "Beta"]
