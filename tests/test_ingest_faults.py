"""Servers on 127.0.0.1 that misbehave on purpose; each fault is recorded and never stops the healthy feed."""

from __future__ import annotations

import time

import duckdb
import pytest

from pipeline.ingest import Feed, FeedResult, IngestReport, ingest
from tests.support.feedgen import item, rss
from tests.support.httpserver import LocalServer, Reply, endless, hang, redirect, sequence, static
from warehouse.config import Settings

RSS = "application/rss+xml; charset=utf-8"
HEALTHY = rss(
    item("Healthy one", "https://healthy.example.com/1"),
    item("Healthy two", "https://healthy.example.com/2"),
)


def run_with_healthy(
    con: duckdb.DuckDBPyConnection, settings: Settings, server: LocalServer, path: str
) -> tuple[FeedResult, IngestReport]:
    """Ingest the faulty route next to a healthy feed; the healthy one must always come through."""
    server.routes["/healthy.xml"] = static(HEALTHY, RSS)
    report = ingest(
        con, [Feed("Faulty", server.url(path)), Feed("Healthy", server.url("/healthy.xml"))], settings
    )
    faulty, healthy = report.results
    assert (healthy.error, healthy.items_seen) == (None, 2)
    assert con.execute("SELECT count(*) FROM raw_articles WHERE source_name = 'Healthy'").fetchall() == [(2,)]
    recorded = con.execute(
        "SELECT http_status, items_seen, error, warning FROM feed_fetches WHERE feed_name = 'Faulty' AND run_id = ?",
        [report.run_id],
    ).fetchall()
    assert recorded == [(faulty.http_status, faulty.items_seen, faulty.error, faulty.warning)]
    return faulty, report


def titles(con: duckdb.DuckDBPyConnection, source: str = "Faulty") -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT title FROM raw_articles WHERE source_name = ? ORDER BY title", [source]
        ).fetchall()
    ]


def test_malformed_xml_is_read_leniently(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    broken = rss(
        item("Placeholder", "https://bad.example.com/1"), item("Second", "https://bad.example.com/2")
    )
    broken = broken.replace("Placeholder", "Bare & ampersand").replace("</channel>", "")  # two faults
    local_server.routes["/bad.xml"] = static(broken, RSS)
    faulty, _ = run_with_healthy(con, settings, local_server, "/bad.xml")
    assert faulty.error is None
    assert faulty.warning is not None and "malformed XML" in faulty.warning and "feedparser" in faulty.warning
    assert titles(con) == ["Bare & ampersand", "Second"]


@pytest.mark.parametrize("cut_in", ["<link>", "<description>", "</item>"])
def test_a_document_cut_short_keeps_only_its_complete_items(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer, cut_in: str
) -> None:
    """A server sends a feed cut short (with a matching Content-Length). Read leniently, the cut item became a new
    article with no link and the fetch time as its date (the newest news), or blanked an existing one's summary."""
    whole = rss(item("First", "https://cut.example.com/1", description="First summary."),
                item("Second", "https://cut.example.com/2", description="Second summary, in full."),
                item("Third", "https://cut.example.com/3", description="Third summary."))
    local_server.routes["/cut.xml"] = static(whole, RSS)
    run_with_healthy(con, settings, local_server, "/cut.xml")
    before = con.execute("SELECT * FROM raw_articles ORDER BY id").fetchall()

    second = whole.index("<title>Second")
    at = whole.index(cut_in, second) + len(cut_in) + (6 if cut_in != "</item>" else -3)
    local_server.routes["/cut.xml"] = static(whole[:at], RSS)
    faulty, report = run_with_healthy(con, settings, local_server, "/cut.xml")
    assert faulty.error is None and faulty.items_seen == 1, faulty
    assert faulty.warning is not None and "the document ends in the middle" in faulty.warning
    assert "kept the 1 complete items before the cut" in faulty.warning
    assert (report.new, report.updated) == (0, 0)
    assert con.execute("SELECT * FROM raw_articles ORDER BY id").fetchall() == before


def test_garbage_is_an_error(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/junk"] = static(b"\x00\x01\x02\xff binary, not xml", "application/octet-stream")
    faulty, _ = run_with_healthy(con, settings, local_server, "/junk")
    assert faulty.error is not None and faulty.error.startswith("not a feed: malformed XML")
    assert faulty.http_status == 200


def test_an_html_page_instead_of_a_feed(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    page = "<!DOCTYPE html>\n<html><head><title>CoinNews</title></head><body><h1>Welcome</h1></body></html>"
    local_server.routes["/page"] = static(page, "text/html; charset=utf-8")
    faulty, _ = run_with_healthy(con, settings, local_server, "/page")
    assert faulty.error == (
        "got an HTML page, not an RSS or Atom feed (Content-Type text/html; charset=utf-8); check the feed URL"
    )


def test_an_empty_body(con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer) -> None:
    local_server.routes["/empty"] = static(b"", RSS)
    faulty, _ = run_with_healthy(con, settings, local_server, "/empty")
    assert faulty.error == "empty body (the server sent no document)"
    assert (faulty.http_status, faulty.bytes) == (200, 0)


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (rss(item("Café “crème” brûlée", "https://enc.example.com/1")).encode("cp1252"), RSS),  # says utf-8
        (rss(item("Café “crème” brûlée", "https://enc.example.com/1"), declaration="").encode("cp1252"),
         "application/rss+xml; charset=windows-1252"),
        (rss(item("Café “crème” brûlée", "https://enc.example.com/1"), declaration="").encode("cp1252"),
         "text/xml"),  # no declaration, no charset anywhere
        (rss(item("Café “crème” brûlée", "https://enc.example.com/1"),
             declaration="<?xml version='1.0' encoding='iso-8859-1'?>").encode("utf-8"), "text/xml"),
    ],
    ids=["declared-utf8-is-cp1252", "charset-only-in-header", "nothing-declared", "declared-latin1-is-utf8"],
)  # fmt: skip
def test_wrong_or_missing_encoding_declaration(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    local_server: LocalServer,
    body: bytes,
    content_type: str,
) -> None:
    local_server.routes["/enc.xml"] = static(body, content_type)
    faulty, _ = run_with_healthy(con, settings, local_server, "/enc.xml")
    assert faulty.error is None
    assert titles(con) == ["Café “crème” brûlée"]


def test_404_is_recorded_and_not_retried(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    faulty, _ = run_with_healthy(con, settings, local_server, "/gone.xml")
    assert (faulty.http_status, faulty.error) == (
        404, "HTTP 404 Not Found: the feed is no longer at this url; fix it in the feeds file or set enabled: false"
    )
    assert local_server.hits("/gone.xml") == 1


def test_429_names_the_wait_the_publisher_asks_for(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/busy.xml"] = lambda req: Reply(429, b"slow down", {"Retry-After": "120"})
    faulty, _ = run_with_healthy(con, settings, local_server, "/busy.xml")
    assert faulty.http_status == 429
    assert faulty.error == ("HTTP 429 Too Many Requests: the publisher asks to wait 120 s (Retry-After); "
                            "poll it less often")
    assert local_server.hits("/busy.xml") == 1


def test_500_then_success_is_retried(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    ok = rss(item("After a retry", "https://retry.example.com/1"))
    local_server.routes["/flaky.xml"] = sequence(static("oops", "text/plain", 500), static(ok, RSS))
    faulty, _ = run_with_healthy(con, settings, local_server, "/flaky.xml")
    assert (faulty.http_status, faulty.error) == (200, None)
    assert local_server.hits("/flaky.xml") == 2
    assert titles(con) == ["After a retry"]


def test_500_every_time_gives_up_after_the_retries(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/down.xml"] = static("oops", "text/plain", 503)
    faulty, _ = run_with_healthy(
        con, settings.model_copy(update={"fetch_retries": 1}), local_server, "/down.xml"
    )
    assert (faulty.http_status, faulty.error) == (503, "HTTP 503 Service Unavailable (after 2 attempts)")
    assert local_server.hits("/down.xml") == 2


def test_a_redirect_is_followed_and_a_redirect_loop_is_stopped(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/old.xml"] = redirect("/new.xml", 301)
    local_server.routes["/new.xml"] = static(rss(item("Moved", "https://moved.example.com/1")), RSS)
    local_server.routes["/loop-a"] = redirect("/loop-b")
    local_server.routes["/loop-b"] = redirect("/loop-a")
    report = ingest(con, [Feed("Moved", local_server.url("/old.xml"))], settings)
    assert (report.results[0].http_status, report.new) == (200, 1)

    faulty, _ = run_with_healthy(con, settings, local_server, "/loop-a")
    assert faulty.error == "more than 5 redirects (a redirect loop?)"
    assert local_server.hits("/loop-a") + local_server.hits("/loop-b") == settings.fetch_max_redirects + 1


def test_a_server_that_never_answers_times_out_and_is_retried(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/silent.xml"] = hang(10)
    quick = settings.model_copy(update={"fetch_read_timeout": 0.3, "fetch_retries": 1})
    t0 = time.perf_counter()
    faulty, _ = run_with_healthy(con, quick, local_server, "/silent.xml")
    assert time.perf_counter() - t0 < 5
    assert (faulty.http_status, faulty.error) == (None, "read timeout (after 2 attempts)")
    assert local_server.hits("/silent.xml") == 2


def test_the_run_deadline_bounds_a_slow_feed(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/silent.xml"] = hang(10)
    quick = settings.model_copy(update={"fetch_read_timeout": 8.0, "fetch_deadline": 1.0})
    t0 = time.perf_counter()
    faulty, _ = run_with_healthy(con, quick, local_server, "/silent.xml")
    assert time.perf_counter() - t0 < 4
    assert faulty.error == "run deadline of 1s reached"


def test_a_50_mb_body_is_cut_at_the_cap_and_the_run_goes_on(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    head = rss().split("</channel>")[0].encode()  # an open channel, then items for ever
    one = item("Endless story", "https://endless.example.com/story?n=1", description="x" * 900).encode()
    chunk = one * 64  # ~64 KB, the one block the server keeps in memory
    total = 50 * 1024 * 1024
    local_server.routes["/huge.xml"] = endless(head, chunk, total)
    cap = 1024 * 1024
    t0 = time.perf_counter()
    faulty, _ = run_with_healthy(
        con, settings.model_copy(update={"fetch_max_bytes": cap}), local_server, "/huge.xml"
    )
    assert time.perf_counter() - t0 < 10
    assert (faulty.http_status, faulty.bytes, faulty.error) == (200, cap, None)
    assert faulty.warning is not None and "cut at the size cap" in faulty.warning
    complete = (cap - len(head)) // len(one)
    assert faulty.items_seen == complete  # every complete item before the cut, the cut one dropped
    assert titles(con) == ["Endless story"]  # ~1,000 copies of one article: one row


def test_a_cut_body_that_does_not_parse_is_an_error(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/big.bin"] = endless(
        b"", b"\x00\xff" * 4096, 4 * 1024 * 1024, "application/octet-stream"
    )
    faulty, _ = run_with_healthy(
        con, settings.model_copy(update={"fetch_max_bytes": 64 * 1024}), local_server, "/big.bin"
    )
    assert faulty.error is not None and faulty.error.endswith("the body was cut at the size cap")
    assert faulty.bytes == 64 * 1024


def test_items_without_link_or_date(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/sparse.xml"] = static(
        rss(
            item("Guid only", None, guid="post-17", pub=None),
            item("Title only", None, pub=None),
            item(None, None, pub=None, description=""),  # nothing to know it by
            item("  ", "https://news.example.com/untitled", pub=None),  # no headline: the checks would refuse it
            item("Dated, no link", None, guid="post-18", pub="Wed, 05 Mar 2025 06:07:08 GMT"),
        ),
        RSS,
    )
    faulty, report = run_with_healthy(con, settings, local_server, "/sparse.xml")
    assert (faulty.error, faulty.items_seen, faulty.items_new) == (None, 5, 3)
    assert faulty.warning == "2 items skipped: no title"
    got = con.execute(
        "SELECT title, url, guid, date_inferred, published_at = date_trunc('second', fetched_at) FROM raw_articles "
        "WHERE source_name = 'Faulty' ORDER BY title"
    ).fetchall()
    assert got == [
        ("Dated, no link", None, "post-18", False, False),
        ("Guid only", None, "post-17", True, True),
        ("Title only", None, None, True, True),
    ]
    # Stable ids: the same items on the next run are the same rows.
    again = ingest(con, [Feed("Faulty", local_server.url("/sparse.xml"))], settings)
    assert (again.new, again.unchanged) == (0, 3)


def test_duplicated_guids(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/dups.xml"] = static(
        rss(
            item("Same guid, same link", "https://dup.example.com/1", guid="g1"),
            item("Same guid, same link", "https://dup.example.com/1", guid="g1"),
            item("No link, guid repeated", None, guid="g2"),
            item("No link, guid repeated (again)", None, guid="g2"),
            item("Same guid, other link", "https://dup.example.com/3", guid="g1"),
        ),
        RSS,
    )
    faulty, _ = run_with_healthy(con, settings, local_server, "/dups.xml")
    assert (faulty.items_seen, faulty.items_new) == (5, 3)
    assert titles(con) == ["No link, guid repeated", "Same guid, other link", "Same guid, same link"]


def test_a_server_that_resets_the_connection(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    def reset(req):  # type: ignore[no-untyped-def]
        req.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n<rss")
        req.close_connection = True
        return None

    local_server.routes["/reset.xml"] = reset
    faulty, _ = run_with_healthy(con, settings, local_server, "/reset.xml")
    assert faulty.error is not None and "RemoteProtocolError" in faulty.error
    assert local_server.hits("/reset.xml") == 1


def test_reply_headers_with_a_wrong_content_type_still_parse(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    body = rss(item("Served as text/html", "https://ctype.example.com/1")).encode()
    local_server.routes["/feed"] = lambda req: Reply(200, body, {"Content-Type": "text/html"})
    faulty, _ = run_with_healthy(con, settings, local_server, "/feed")
    assert (faulty.error, titles(con)) == (None, ["Served as text/html"])


def test_a_url_httpx_cannot_use_is_that_feed_s_error(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    faulty, _ = run_with_healthy(con, settings, local_server, "/bad path\x00.xml")
    assert faulty.error is not None and faulty.error.startswith("InvalidURL")
