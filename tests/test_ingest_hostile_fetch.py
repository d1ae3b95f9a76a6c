"""Review s42: hostile feeds and feeds files, against real servers on 127.0.0.1 (/work/review/s42-feeds).

Credentials in a feed URL never leave the request; a body compressed over and over, a bad validator, a body cut
by the network, a redirect into a private network, a FIFO, a bad feeds file or setting, and Retry-After."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import os
import threading
import time
import tracemalloc
import zlib
from pathlib import Path

import duckdb
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from pipeline.ingest import AllFeedsFailed, Feed, FeedsFileError, ingest, load_feeds
from pipeline.ingest import fetch as fetch_module
from tests.support.feedgen import item, rss
from tests.support.httpserver import (
    Handler,
    LocalServer,
    Reply,
    RequestHandler,
    conditional,
    redirect,
    sequence,
    static,
)
from warehouse.config import Settings

RSS = "application/rss+xml; charset=utf-8"
SECRETS = ("Hunter2Secret", "Sw0rdfishPW", "RedirSecretPW")
HEALTHY = rss(item("Healthy one", "https://healthy.example.com/1"), item("Healthy two", "https://healthy.example.com/2"))


def stored(con: duckdb.DuckDBPyConnection) -> str:
    """Every row of every table that holds a feed URL, as text."""
    tables = ("raw_articles", "articles", "feed_fetches", "feed_state")
    return "\n".join(str(con.execute(f"SELECT * FROM {t}").fetchall()) for t in tables)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret} shown in: {text[:2000]}"


# --- 1. credentials in a feed URL ---------------------------------------------------------------------------------

def test_credentials_are_sent_but_never_logged_stored_nor_shown(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = "Basic " + base64.b64encode(b"alice:Hunter2Secret").decode()

    def private(req: RequestHandler) -> Reply:
        if req.headers.get("Authorization") != auth:
            return Reply(401, b"who are you")
        return Reply(200, rss(item("Behind a login", None, guid="p-1"), item("Linked", "https://p.example/1")).encode(),
                     {"Content-Type": RSS, "ETag": '"p1"'})

    local_server.routes["/private.xml"] = private
    local_server.routes["/busy.xml"] = lambda req: Reply(429, b"slow down", {"Retry-After": "60"})
    local_server.routes["/hop.xml"] = redirect("/gone.xml", 301)
    url = local_server.url("/x").removeprefix("http://").removesuffix("/x")
    feeds = [Feed("Private", f"http://alice:Hunter2Secret@{url}/private.xml"),
             Feed("Busy", f"http://bob:Sw0rdfishPW@{url}/busy.xml"),
             Feed("Hop", f"http://erin:RedirSecretPW@{url}/hop.xml")]

    report = ingest(con, feeds, settings)
    private_result, busy, hop = report.results
    assert (private_result.error, private_result.items_new) == (None, 2)  # the credentials were sent
    assert busy.error is not None and busy.error.startswith("HTTP 429")
    assert hop.error is not None and f"redirected (HTTP 301) to http://***@{url}/gone.xml" in hop.error
    assert feeds[0].url == f"http://***@{url}/private.xml"
    assert "Hunter2Secret" not in repr(feeds[0])
    assert_no_secret(stored(con), caplog.text, *(str(r.error) for r in report.results))
    assert con.execute("SELECT DISTINCT feed_url FROM raw_articles").fetchall() == [(feeds[0].url,)]

    with pytest.raises(AllFeedsFailed) as err:  # every feed failing: the message lists each feed's url
        ingest(con, feeds[1:], settings)
    assert f"Busy <http://***@{url}/busy.xml>" in str(err.value)
    assert_no_secret(str(err.value), stored(con), caplog.text)


def test_a_home_that_stored_the_full_url_keeps_its_validators_and_articles(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    """Older versions stored feed_url with the credentials, and keyed a link-less item's id by it."""
    def doc(title: str) -> str:
        return rss(item(title, None, guid="g-1"), item("Linked story", "https://p.example/1"))

    local_server.routes["/private.xml"] = conditional(doc("Link-less story"), etag='"v1"')
    full = local_server.url("/private.xml").replace("http://", "http://alice:Hunter2Secret@")
    feeds = [Feed("Private", full)]
    assert ingest(con, feeds, settings).new == 2
    # Make the rows what an older version wrote: the full URL, and the link-less item's id keyed by it.
    legacy_id = "a_" + hashlib.sha256(f"guid\n{full}\ng-1".encode()).hexdigest()[:16]
    con.execute("UPDATE raw_articles SET id = ? WHERE guid = 'g-1'", [legacy_id])
    con.execute("UPDATE raw_articles SET feed_url = ?", [full])
    con.execute("UPDATE feed_fetches SET feed_url = ?, error = ?",  # and its errors quoted the full URL
                [full, f"redirected (HTTP 301) to {full}, which answered HTTP 404 Not Found"])
    con.execute("DELETE FROM feed_state")
    con.execute("INSERT INTO feed_state VALUES (?, '\"v1\"', NULL, now())", [full])

    again = ingest(con, feeds, settings)  # the validators are found: a 304
    assert [(r.http_status, r.not_modified, r.error) for r in again.results] == [(304, True, None)]
    local_server.routes["/private.xml"] = conditional(doc("Link-less story, edited"), etag='"v2"')
    edited = ingest(con, feeds, settings)
    assert (edited.new, edited.updated) == (0, 1)  # the same article, not a second one
    assert con.execute("SELECT id, title FROM raw_articles WHERE guid = 'g-1'").fetchall() == [
        (legacy_id, "Link-less story, edited")]
    assert con.execute("SELECT count(*) FROM raw_articles").fetchall() == [(2,)]
    assert_no_secret(stored(con))
    assert con.execute("SELECT feed_url, etag FROM feed_state").fetchall() == [(feeds[0].url, '"v2"')]


def test_materialize_and_status_never_show_credentials(
    data_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_server: LocalServer
) -> None:
    from pipeline.cli import app

    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))
    local_server.routes["/good.xml"] = static(HEALTHY, RSS)
    local_server.routes["/busy.xml"] = lambda req: Reply(429, b"slow down", {"Retry-After": "60"})
    local_server.routes["/hop.xml"] = redirect("/gone.xml", 301)
    host = local_server.url("/x").removeprefix("http://").removesuffix("/x")
    feeds = tmp_path / "feeds.yaml"
    feeds.write_text(f"""feeds:
  - {{name: Good, url: "http://alice:Hunter2Secret@{host}/good.xml"}}
  - {{name: Busy, url: "http://bob:Sw0rdfishPW@{host}/busy.xml"}}
  - {{name: Hop, url: "http://erin:RedirSecretPW@{host}/hop.xml"}}
""")
    monkeypatch.setenv("CRYPTOWIRE_FEEDS_FILE", str(feeds))
    runner = CliRunner()
    run = runner.invoke(app, ["materialize", "--feeds", str(feeds), "--select", "raw_articles", "--json"])
    assert run.exit_code == 0, run.output
    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0, status.output
    urls = {f["url"] for f in json.loads(status.stdout)["feeds"]}
    assert urls == {f"http://***@{host}/{p}.xml" for p in ("good", "busy", "hop")}
    assert_no_secret(run.output, status.output, runner.invoke(app, ["status"]).output)


# --- 2. stacked Content-Encoding ----------------------------------------------------------------------------------

def spaces_gzip(mib: int) -> bytes:
    """A feed of ``mib`` MiB, nearly all spaces, gzipped (about 1,000 times smaller)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = rss(item("Bomb item", "https://bomb.example.com/1")).split("</channel>")[0].encode()
    parts = [z.compress(head)] + [z.compress(b" " * (1 << 20)) for _ in range(mib)]
    return b"".join([*parts, z.compress(b"</channel></rss>"), z.flush()])


def test_a_body_compressed_twice_over_is_refused(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    bomb = gzip.compress(spaces_gzip(64))  # a few KB on the wire, 64 MiB inside
    local_server.routes["/bomb.xml"] = lambda req: Reply(200, bomb, {"Content-Type": RSS,
                                                                      "Content-Encoding": "gzip, gzip"})
    local_server.routes["/healthy.xml"] = static(HEALTHY, RSS)
    report = ingest(con, [Feed("Bomb", local_server.url("/bomb.xml")), Feed("Healthy", local_server.url("/healthy.xml"))],
                    settings.model_copy(update={"fetch_max_bytes": 1 << 20}))
    bombed, healthy = report.results
    assert (healthy.error, healthy.items_new) == (None, 2)
    assert bombed.error is not None and "compressed 2 times over (Content-Encoding: gzip, gzip): refused" in bombed.error
    assert local_server.hits("/bomb.xml") == 1


def test_a_single_layer_bomb_is_cut_at_the_cap_in_bounded_memory(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    bomb = spaces_gzip(64)
    local_server.routes["/bomb.xml"] = lambda req: Reply(200, bomb, {"Content-Type": RSS, "Content-Encoding": "gzip"})
    cap = 1 << 20
    tracemalloc.start()
    try:
        report = ingest(con, [Feed("Bomb", local_server.url("/bomb.xml"))], settings.model_copy(
            update={"fetch_max_bytes": cap}))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (bombed,) = report.results
    assert (bombed.error, bombed.bytes, bombed.items_new) == (None, cap, 1)
    assert bombed.warning is not None and "cut at the size cap" in bombed.warning
    assert peak < 24 * cap, f"peak {peak / cap:.0f} MiB for a cap of 1 MiB"  # 64 MiB were never held at once


# --- 3. bad validators --------------------------------------------------------------------------------------------

def test_validators_that_are_no_sane_header_are_neither_sent_nor_kept(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    huge = '"' + "e" * 4000 + '"'

    def answer(etag: str, slug: str) -> Handler:
        def handler(req: RequestHandler) -> Reply:
            if len(req.headers.get("If-None-Match") or "") > 1000:
                return Reply(431, b"header too large")
            return Reply(200, rss(item(f"Story {slug}", f"https://v.example/{slug}")).encode(),
                         {"Content-Type": RSS, "ETag": etag})
        return handler

    # http.server writes header values as latin-1: these two bytes reach httpx as the UTF-8 of "é"
    local_server.routes["/accent.xml"] = answer('"caf\xc3\xa9"', "accent")
    local_server.routes["/huge.xml"] = answer(huge, "huge")
    local_server.routes["/old.xml"] = static(rss(item("Old state", "https://v.example/old")), RSS)
    feeds = [Feed("Accent", local_server.url("/accent.xml")), Feed("Huge", local_server.url("/huge.xml")),
             Feed("Old", local_server.url("/old.xml"))]
    # A home that kept such values before: they must not fail the request.
    con.execute("INSERT INTO feed_state VALUES (?, ?, ?, now())",
                [feeds[2].url, '"caf\u00e9"', "Mon, 11 May 2026 10:00:00 GMT\u00a0\u00ff"])

    for _ in range(2):
        report = ingest(con, feeds, settings)
        assert [(r.http_status, r.error) for r in report.results] == [(200, None)] * 3
    assert con.execute("SELECT etag, last_modified FROM feed_state ORDER BY feed_url").fetchall() == [
        (None, None)] * 3
    assert all("if-none-match" not in s.headers and "if-modified-since" not in s.headers for s in local_server.seen)


# --- 6. a body cut by the network ----------------------------------------------------------------------------------

def test_validators_of_a_body_cut_by_the_network_are_not_kept(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    whole = rss(*(item(f"Story {i}", f"https://cut.example.com/{i}") for i in range(20)))

    def cut(req: RequestHandler) -> None:  # no Content-Length: the body ends where the connection closes
        req.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/rss+xml\r\nETag: "v1"\r\n'
                        b"Connection: close\r\n\r\n" + whole.encode()[: len(whole) // 2])
        req.close_connection = True

    local_server.routes["/feed.xml"] = sequence(cut, conditional(whole, etag='"v1"'))
    feeds = [Feed("Cut", local_server.url("/feed.xml"))]
    first = ingest(con, feeds, settings)
    assert first.results[0].warning is not None and "the document ends in the middle" in first.results[0].warning
    assert 0 < first.new < 20
    second = ingest(con, feeds, settings)
    assert (second.results[0].http_status, second.new + first.new) == (200, 20)
    assert con.execute("SELECT etag FROM feed_state").fetchall() == [('"v1"',)]  # from the whole document


# --- 7. redirects into a private network ---------------------------------------------------------------------------

def test_a_redirect_into_a_more_private_network_is_refused(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    quick = settings.model_copy(update={"fetch_connect_timeout": 0.5, "fetch_retries": 0})
    local_server.routes["/feed.xml"] = static(HEALTHY, RSS)
    local_server.routes["/metadata.xml"] = redirect("http://169.254.169.254/latest/meta-data/")
    local_server.routes["/inward.xml"] = redirect(local_server.url("/feed.xml"))
    with LocalServer() as other:  # loopback to loopback (another port): as configured, allowed
        other.routes["/hop.xml"] = redirect(local_server.url("/feed.xml"))

        async def public(host: str, port: int) -> list[str]:  # "localhost" stands for a public host here
            return ["93.184.216.34"] if host == "localhost" else ["127.0.0.1"]

        monkeypatch.setattr(fetch_module, "_resolve", public, raising=False)
        feeds = [Feed("Metadata", local_server.url("/metadata.xml")),
                 Feed("Inward", f"http://localhost:{local_server.port}/inward.xml"),
                 Feed("Local hop", other.url("/hop.xml"))]
        metadata, inward, hop = ingest(con, feeds, quick).results
    assert metadata.error is not None and metadata.error.startswith(
        "redirected (HTTP 302) to http://169.254.169.254/latest/meta-data/, a link-local address")
    assert "refused" in metadata.error
    assert inward.error is not None and (
        f"to {local_server.url('/feed.xml')}, a loopback address (this machine), from a public address: refused"
        in inward.error)
    assert (hop.error, hop.items_seen) == (None, 2)
    assert local_server.hits("/feed.xml") == 1  # only the allowed hop reached it


# --- 8. a FIFO or a device as a feed path --------------------------------------------------------------------------

def test_a_fifo_or_a_device_is_refused_and_the_run_goes_on(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer, tmp_path: Path
) -> None:
    fifo = tmp_path / "feed.fifo"
    os.mkfifo(fifo)
    local_server.routes["/healthy.xml"] = static(HEALTHY, RSS)
    feeds = [Feed("Pipe", fifo.as_uri()), Feed("Zero", "file:///dev/zero"),
             Feed("Healthy", local_server.url("/healthy.xml"))]
    done: list = []
    worker = threading.Thread(target=lambda: done.append(ingest(con, feeds, settings.model_copy(
        update={"fetch_deadline": 3.0}))), daemon=True)
    t0 = time.monotonic()
    worker.start()
    worker.join(8)
    hung = worker.is_alive()
    if hung:  # a writer lets the blocked open() return, so that the test ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
    assert not hung, "the run hung on the FIFO"
    assert time.monotonic() - t0 < 4
    pipe, zero, healthy = done[0].results
    assert pipe.error == f"cannot read {fifo}: it is a named pipe (FIFO), not a regular file; point the feed at a file"
    assert zero.error is not None and "it is a device, not a regular file" in zero.error
    assert (healthy.error, healthy.items_new) == (None, 2)


# --- 13. the feeds file ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("feeds:\n  - name: A\n    url: https://a.com/rss\n    url: https://b.com/rss\n",
     "at line 4, column 5: key 'url' appears twice in one mapping (lines 3 and 4); keep one"),
    ("feeds:\n  - {name: A, url: 'https://a.com/rss'}\n  - {name: B, url: 'HTTPS://A.com:443/rss#top'}\n",
     "entry 2 ('B'): duplicate url 'HTTPS://A.com:443/rss#top' (also entry 1 ('A')): the same feed"),
    ("feeds:\n  - {name: A, url: 'https://a.com/rss'}\n  - {name: B, url: 'https://u:Hunter2Secret@a.com/rss'}\n",
     "entry 2 ('B'): duplicate url 'https://***@a.com/rss'"),
    ("feeds:\n  - {name: A, url: '127.0.0.1:32805/good'}\n",
     "write it with its scheme, http://127.0.0.1:32805/good (or https://)"),
    ("feeds:\n  - {name: \"A\\nB\\e[31m\", url: 'https://a.com/rss'}\n",
     "entry 1: `name` holds a control character (U+000A) at position 2"),
    ("feeds:\n  - {name: \"Evil \\u202egnp.exe\", url: 'https://a.com/rss'}\n", "control character (U+202E)"),
])
def test_feeds_file_mistakes_are_refused_naming_what_to_fix(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_text(text)
    with pytest.raises(FeedsFileError) as err:
        load_feeds(path)
    assert expected in str(err.value)
    assert_no_secret(str(err.value))


# --- 14. settings ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "value", "expected"), [
    ("CRYPTOWIRE_USER_AGENT", "caf\u20ac", "CRYPTOWIRE_USER_AGENT='caf€': holds '€'"),
    ("CRYPTOWIRE_USER_AGENT", "reader\r\nX-Evil: 1", "holds '\\r'"),
    ("CRYPTOWIRE_FETCH_DEADLINE", "inf", "CRYPTOWIRE_FETCH_DEADLINE='inf': input should be a finite number"),
    ("CRYPTOWIRE_FETCH_DEADLINE", "nan", "CRYPTOWIRE_FETCH_DEADLINE='nan': input should be a finite number"),
    ("CRYPTOWIRE_FETCH_DEADLINE", "0", "greater than 0"),
])
def test_bad_fetch_settings_are_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    from pipeline.cli import settings_errors

    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as err:
        Settings()
    (line,) = settings_errors(err.value)
    assert expected in line and "\n" not in line


# --- 15. Retry-After ------------------------------------------------------------------------------------------------

def test_retry_after_is_honoured_on_a_503_and_shown_as_a_date(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    times: list[float] = []

    def flaky(req: RequestHandler) -> Reply:
        times.append(time.monotonic())
        if len(times) == 1:
            return Reply(503, b"down", {"Retry-After": "1"})
        return Reply(200, HEALTHY.encode(), {"Content-Type": RSS})

    local_server.routes["/flaky.xml"] = flaky
    local_server.routes["/down.xml"] = lambda req: Reply(503, b"down", {"Retry-After": "120"})
    local_server.routes["/busy.xml"] = lambda req: Reply(429, b"slow", {"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"})
    report = ingest(con, [Feed("Flaky", local_server.url("/flaky.xml")), Feed("Down", local_server.url("/down.xml")),
                          Feed("Busy", local_server.url("/busy.xml"))], settings)
    flaky_result, down, busy = report.results
    assert (flaky_result.error, flaky_result.items_new) == (None, 2)
    assert times[1] - times[0] >= 0.95  # not the 0.5 s backoff
    assert down.error == ("HTTP 503 Service Unavailable: the publisher asks to wait 120 s (Retry-After); "
                          "not retried in this run")
    assert local_server.hits("/down.xml") == 1
    assert busy.error == ("HTTP 429 Too Many Requests: the publisher asks to wait until 2099-10-21 07:28:00 UTC "
                          "(Retry-After); poll it less often")
