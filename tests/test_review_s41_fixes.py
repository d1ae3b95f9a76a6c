"""From the s41 review, on real parts (the `cryptowire` executable, SQLite files, real servers):

- `keys rotate --grace-hours` outside 0-720 hours (1e9, inf, nan, 721, -1) is a usage error (exit 2, the bound
  in the message) and writes nothing; an expiry already stored out of range (by the version that accepted it)
  no longer crashes `keys list` or `usage`: it shows as 9999-12-31T23:59:59Z, and rotating again ends it;
- `assetSentiment` with `since` alone after the snapshot's newest dated article (the default `until`) is a free
  BAD_USER_INPUT, as the docs say, not an empty answer that is charged;
- `GET /api/usage/{key}` refuses a query parameter given twice (400), as the PDF endpoint does;
- a PDF client that hangs up while its page is still being fetched is charged once the render succeeds (refunded
  when it fails), as docs/pdf.md says.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.httpserver import LocalServer, Reply, static
from tests.support.newsdata import Data, build
from tests.support.pdfserver import ServeProcess, new_key, used
from tests.support.procs import wait_for
from warehouse.config import Settings

CLI = str(Path(sys.executable).parent / "cryptowire")
LATEST = "9999-12-31T23:59:59Z"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
    env["CRYPTOWIRE_HOME"] = str(home)
    return env


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], env=_env(home), capture_output=True, text=True, timeout=120)


def _store(home: Path) -> Any:
    from accounts import SqliteStore

    return SqliteStore(Settings(home=home).platform_db)


def _secrets(home: Path, key_id: str) -> list[dict[str, Any]]:
    out = cli(home, "keys", "list", "--json")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return {k["id"]: k for k in json.loads(out.stdout)}[key_id]["secrets"]


# ------------------------------------------------------------------------------------------ 1. keys rotate


@pytest.mark.parametrize("grace", ["1e9", "inf", "nan", "721", "-1"])
def test_rotate_refuses_a_grace_that_is_not_from_0_to_720_hours_and_writes_nothing(tmp_path: Path, grace: str) -> None:
    home = tmp_path / "home"
    made = cli(home, "keys", "create", "--plan", "pro", "--name", "r", "--json")
    assert made.returncode == 0, made.stderr
    key_id = json.loads(made.stdout)["id"]
    for extra in ((), ("--json",)):
        out = cli(home, "keys", "rotate", key_id, "--grace-hours", grace, *extra)
        assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr, out.stderr
        assert "--grace-hours" in out.stderr and "from 0 to 720" in out.stderr, out.stderr
        assert "Rotated" not in out.stdout
        if extra:  # a script reading stdout gets one JSON document
            doc = json.loads(out.stdout)
            assert doc["exitCode"] == 2 and "from 0 to 720" in doc["error"], doc
    # nothing was written: still the one secret, which never expires
    assert [s["expiresAt"] for s in _secrets(home, key_id)] == [None]


def test_the_largest_grace_is_accepted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key_id = json.loads(cli(home, "keys", "create", "--plan", "pro", "--name", "r", "--json").stdout)["id"]
    out = cli(home, "keys", "rotate", key_id, "--grace-hours", "720")
    assert out.returncode == 0 and "keeps working until" in out.stdout, out.stderr
    ends = sorted(s["expiresAt"] for s in _secrets(home, key_id) if s["expiresAt"])
    assert len(ends) == 1
    at = datetime.strptime(ends[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(at - (datetime.now(UTC) + timedelta(hours=720))) < timedelta(minutes=5)


def test_an_expiry_stored_out_of_range_is_listed_as_9999_and_a_new_rotation_ends_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ids = [json.loads(cli(home, "keys", "create", "--plan", "pro", "--name", f"k{i}", "--json").stdout)["id"]
           for i in range(2)]
    store = _store(home)
    try:  # what the earlier `keys rotate --grace-hours 1e9` / `inf` wrote before it crashed
        store.rotate_key(ids[0], 1e9 * 3600)
        store.rotate_key(ids[1], float("inf"))
    finally:
        store.close()

    listed = cli(home, "keys", "list")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert listed.stdout.count(f"(expires {LATEST})") == 2, listed.stdout
    for key_id in ids:
        assert sorted(s["expiresAt"] or "" for s in _secrets(home, key_id)) == ["", LATEST]
    for args in (("usage",), ("usage", "--json"), ("usage", ids[0]), ("keys", "revoke", ids[1], "--json")):
        out = cli(home, *args)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (args, out.stderr)

    # the remedy the docs give: rotate again, and every older secret ends by the new deadline
    out = cli(home, "keys", "rotate", ids[0], "--grace-hours", "1")
    assert out.returncode == 0, out.stderr
    ends = [s["expiresAt"] for s in _secrets(home, ids[0]) if s["expiresAt"]]
    assert len(ends) == 2 and LATEST not in ends, ends
    for end in ends:
        at = datetime.strptime(end, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert at - datetime.now(UTC) < timedelta(hours=1, minutes=5)


def test_iso_utc_never_raises_for_seconds_out_of_range() -> None:
    from pipeline.timestamps import EARLIEST, iso_utc

    assert iso_utc(0) == "1970-01-01T00:00:00Z"
    assert iso_utc(253402300799) == LATEST  # the last second that can be written
    for value in (253402300800, 1e9 * 3600 + time.time(), float("inf"), float("nan"), 1e308):
        assert iso_utc(value) == LATEST, value
    for value in (-1e18, float("-inf")):
        assert iso_utc(value) == EARLIEST, value


# ------------------------------------------------------------------- 2 and 3: a real metered API server

ANCHOR = datetime(2026, 11, 24, 12, 0)  # the snapshot's newest dated article
SENTIMENT = """query S($since: DateTime, $until: DateTime) {
  assetSentiment(ticker: "BTC", interval: DAY, since: $since, until: $until) {
    since until buckets { start articles } } }"""


def _articles() -> list[dict[str, Any]]:
    return [{
        "id": f"a_{i:016x}", "source_name": "Wire", "url": f"https://news.example/{i}", "title": f"BTC {i}",
        "summary": "s", "image_url": None, "published_at": ANCHOR - timedelta(hours=5 * i),
        "sentiment": ("positive", "neutral", "negative")[i % 3], "sentiment_score": 0.5, "tickers": ["BTC"],
        "topics": ["markets"], "date_inferred": False,
    } for i in range(10)]


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, Path, str, str]]:
    home = tmp_path_factory.mktemp("s41") / "home"
    build(home, Data(_articles(), []))
    store = _store(home)
    try:
        key_id, key = store.create_key("s41", "pro", ["news", "events", "pdf"])
    finally:
        store.close()
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False))) as srv:
        yield srv, home, key_id, key


def _gql(srv: ApiServer, key: str, variables: dict[str, Any]) -> httpx.Response:
    return httpx.post(srv.url(f"/crypto-news/{key}"), json={"query": SENTIMENT, "variables": variables}, timeout=30)


@pytest.mark.parametrize("since", ["2026-11-25", "2026-11-24T13:00:00Z"])
def test_since_alone_after_the_newest_article_is_refused_and_free(
    metered: tuple[ApiServer, Path, str, str], since: str,
) -> None:
    srv, home, key_id, key = metered
    before = used(home, key_id)
    r = _gql(srv, key, {"since": since})
    assert r.status_code == 400, r.text
    error = r.json()["errors"][0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert "is after `until`" in error["message"] and "2026-11-24T12:00:00.000Z" in error["message"], error
    assert r.headers.get("X-CU-Cost") == "0", r.headers
    assert used(home, key_id) == before


def test_since_alone_up_to_the_newest_article_and_an_explicit_range_are_served(
    metered: tuple[ApiServer, Path, str, str],
) -> None:
    srv, home, key_id, key = metered
    r = _gql(srv, key, {"since": "2026-11-24"})  # the anchor's own day
    assert r.status_code == 200 and "errors" not in r.json(), r.text
    series = r.json()["data"]["assetSentiment"]
    assert (series["since"], series["until"]) == ("2026-11-24T00:00:00.000Z", "2026-11-25T00:00:00.000Z")
    assert [b["start"] for b in series["buckets"]] == ["2026-11-24T00:00:00.000Z"]
    assert r.headers["X-CU-Cost"] == "2"
    # both ends given, after the news: the range asked for, empty (the client chose it)
    r = _gql(srv, key, {"since": "2026-11-25", "until": "2026-11-26"})
    assert r.status_code == 200 and r.json()["data"]["assetSentiment"]["buckets"] == [], r.text


@pytest.mark.parametrize("query,name", [("days=1&days=2", "days"), ("days=2&x=1&x=2", "x")])
def test_usage_refuses_a_parameter_given_twice(metered: tuple[ApiServer, Path, str, str], query: str,
                                               name: str) -> None:
    srv, _home, _key_id, key = metered
    r = httpx.get(srv.url(f"/api/usage/{key}?{query}"), timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "BAD_REQUEST", error
    assert error["message"].startswith(f"`{name}` is given more than once; give it once"), error
    r = httpx.get(srv.url(f"/api/usage/{key}?days=2"), timeout=30)
    assert r.status_code == 200 and len(r.json()["days"]) == 2, r.text


@pytest.mark.parametrize("query,says", [("dayz=30", "unknown parameter `dayz`: the only one is `days`"),
                                        ("days=%2B7", "days must be a whole number"),
                                        ("days=7_0", "days must be a whole number")])
def test_usage_takes_days_as_digits_and_nothing_else(metered: tuple[ApiServer, Path, str, str], query: str,
                                                     says: str) -> None:
    # A security review: ?days=+7 was taken, and an unknown parameter silently answered the default week.
    srv, _home, _key_id, key = metered
    r = httpx.get(srv.url(f"/api/usage/{key}?{query}"), timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "BAD_REQUEST", r.text
    assert says in r.json()["error"]["message"], r.text


# ------------------------------------------------------------------- 4. a PDF client that hangs up early

COST = 20_000


def _open_charges(home: Path) -> list[str]:
    """Ids of the charges without a settled line in the data home's charge journals."""
    open_ids: dict[str, None] = {}
    for path in Settings(home=home).pdf_charges_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["op"] == "charged":
                open_ids[r["id"]] = None
            else:
                open_ids.pop(r["id"], None)
    return list(open_ids)


def _hang_up_during_fetch(server: ServeProcess, key: str, url: str, fetched: Any) -> None:
    """Send the request, wait until the page is being fetched, and close the connection."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        target = f"/api/html-to-pdf/{key}?{httpx.QueryParams({'url': url, 'timeoutMs': 60000})}"
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        assert wait_for(fetched, 60), server.output()
    finally:
        sock.close()


def test_a_client_that_hangs_up_while_the_page_is_fetched_is_charged_once_it_renders(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key_id, key = new_key(home)
    release = threading.Event()
    with LocalServer() as page:
        page.routes["/late"] = lambda req: (release.wait(60), Reply(200, b"<h1>late</h1><img src='/late.png'>",
                                                                    {"Content-Type": "text/html"}))[1]
        page.routes["/late.png"] = static(b"", "image/png", 404)
        page.routes["/gone"] = lambda req: (release.wait(60), Reply(404, b"no", {"Content-Type": "text/plain"}))[1]
        server = ServeProcess(home, page.port)
        try:
            # the page answers only after the client is gone: rendered, so charged
            _hang_up_during_fetch(server, key, page.url("/late"), lambda: page.hits("/late") > 0)
            assert used(home, key_id) == COST  # charged before the fetch
            release.set()
            assert wait_for(lambda: page.hits("/late.png") > 0, 60), server.output()  # rendering
            assert wait_for(lambda: not _open_charges(home), 60), server.output()  # settled
            time.sleep(1)
            assert used(home, key_id) == COST, server.output()
            # the same hang-up, but the page then fails (404): refunded as always
            release.clear()
            _hang_up_during_fetch(server, key, page.url("/gone"), lambda: page.hits("/gone") > 0)
            assert used(home, key_id) == 2 * COST
            release.set()
            assert wait_for(lambda: used(home, key_id) == COST, 60), server.output()
        finally:
            release.set()
            server.stop()
