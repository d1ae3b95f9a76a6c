"""The corpus tier: every real feed document in ../shared/fixtures/feeds, served over HTTP from 127.0.0.1 and
ingested. (The same code on the repository's own quirk documents: tests/test_ingest_parse.py.)

Counts are checked against feedparser. True duplicates — the same article, by canonical URL — are one row:
coindesk-4 is coindesk-2 with a newline before ``<?xml`` (all 50 items shared) and cointelegraph-2 is a
trimmed copy of cointelegraph-1 (its 2 items shared), so 353 items make 301 rows. The quirks SOURCES.md
lists must come out clean; the exact values below were read from the raw XML by hand.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

import duckdb
import feedparser
import pytest

from pipeline.ingest import Feed, IngestReport, ingest
from tests.conftest import SHARED_FEEDS
from tests.support.httpserver import LocalServer, static
from tests.test_ingest_parse import assert_readers_agree
from warehouse.config import Settings
from warehouse.db import connect

FIXTURES = sorted(SHARED_FEEDS.glob("*.xml"))
pytestmark = pytest.mark.corpus("feeds")


def independent_key(link: str) -> str:
    """A canonical-URL key written separately from the code under test (whitespace, utm_*, fragment, case)."""
    link = "".join(link.split())
    p = urlsplit(link)
    query = "&".join(x for x in p.query.split("&") if x and not x.lower().startswith("utm_"))
    return urlunsplit((p.scheme.lower(), p.netloc.lower(), p.path or "/", query, ""))


@pytest.fixture(scope="module")
def ingested(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[duckdb.DuckDBPyConnection, IngestReport]]:
    con, report = serve_and_ingest(FIXTURES, tmp_path_factory.mktemp("fixtures"))
    yield con, report
    con.close()


def serve_and_ingest(paths: list, home) -> tuple[duckdb.DuckDBPyConnection, IngestReport]:  # noqa: ANN001
    """The documents served from 127.0.0.1 and ingested into a new warehouse under ``home``."""
    con = connect(home / "warehouse.duckdb")
    with LocalServer() as server:
        for path in paths:
            kind = "application/atom+xml" if b"<feed" in path.read_bytes()[:400] else "application/rss+xml"
            server.routes[f"/{path.name}"] = static(path.read_bytes(), kind)
        feeds = [Feed(path.stem, server.url(f"/{path.name}")) for path in paths]
        report = ingest(con, feeds, Settings(home=home))
    return con, report


def frame(con: duckdb.DuckDBPyConnection, where: str = "TRUE", params: list | None = None) -> list[dict]:
    cur = con.execute(f"SELECT * FROM raw_articles WHERE {where}", params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def one(con: duckdb.DuckDBPyConnection, title: str) -> dict:
    (row,) = frame(con, "title = ?", [title])
    return row


def test_item_counts_match_feedparser(ingested: tuple[duckdb.DuckDBPyConnection, IngestReport]) -> None:
    con, report = ingested
    by_name = {r.feed.name: r for r in report.results}
    keys: dict[str, list[str]] = collections.defaultdict(list)
    for path in FIXTURES:
        assert_readers_agree(path)  # the fast reader and feedparser, item by item
        entries = feedparser.parse(path.read_bytes()).entries
        result = by_name[path.stem]
        assert (result.error, result.http_status, result.bytes) == (None, 200, path.stat().st_size), path.name
        assert result.items_seen == len(entries), path.name
        for e in entries:
            keys[independent_key(e.link)].append(path.stem)

    duplicates = collections.Counter(tuple(v) for v in keys.values() if len(v) > 1)
    assert duplicates == {("coindesk-2", "coindesk-4"): 50, ("cointelegraph-1", "cointelegraph-2"): 2}
    assert con.execute("SELECT count(*) FROM raw_articles").fetchall() == [(len(keys),)]
    assert report.new == len(keys)
    assert sorted(r[0] for r in con.execute("SELECT url FROM raw_articles").fetchall()) == sorted(keys)


ENTITY = re.compile(r"&(#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);")
TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(\s[^>]*)?/?>")


def test_quirks_come_out_clean(ingested: tuple[duckdb.DuckDBPyConnection, IngestReport]) -> None:
    con, _ = ingested
    rows = frame(con)
    assert len(rows) > 250
    assert_clean(rows)
    check_exact_values(con)


def assert_clean(rows: list[dict]) -> None:
    """What every ingested row looks like, whatever quirks its feed has."""
    for r in rows:
        for field in ("title", "summary"):
            text = r[field]
            assert "CDATA" not in text and "]]>" not in text, (field, text)
            assert not TAG.search(text), (field, text)
            assert not ENTITY.search(text), (field, text)
            assert text == text.strip() and "  " not in text and "\u00a0" not in text and "\n" not in text
        assert r["title"], r
        for field in ("url", "image_url"):
            if r[field]:
                assert not re.search(r"\s", r[field]) and r[field].startswith("http"), (field, r[field])
        assert r["url"] and "utm_" not in r["url"] and "#" not in r["url"]
        assert all(c and c == c.strip() for c in r["categories"]), r["categories"]
        assert all(a and a == a.strip() for a in r["authors"]), r["authors"]
        assert r["published_at"].microsecond == 0
        assert r["date_inferred"] is False  # every fixture item has a date, all before this run
        if r["content_html"]:
            assert "<!--" not in r["content_html"] and "<script" not in r["content_html"].lower()


def check_exact_values(con: duckdb.DuckDBPyConnection) -> None:
    """Exact values read from the raw XML by hand."""
    # theblock-1: pubDate "Fri, 12 Dec 2025 17:33:11 -0500"; link with ?utm_source=rss&amp;utm_medium=rss.
    r = one(con, "Fogo cancels $20 million pre-sale, will airdrop tokens instead in upcoming mainnet launch")
    assert r["published_at"] == datetime(2025, 12, 12, 22, 33, 11)
    assert r["url"] == "https://www.theblock.co/post/382435/fogo-solana-svm-airdrop-token-sale-mainnet-launch"
    assert r["image_url"] == "https://www.tbstat.com/wp/uploads/2025/04/20250411_Tokens_News_2-800x450.jpg"
    assert r["source_name"] == "theblock-1" and r["language"] == "en" and len(r["categories"]) == 14
    # theblock-1: "Citadel Securities&#8217; call for &#8216;flawed&#8217;" as numeric character references.
    r = one(con, "DeFi groups fire back against Citadel Securities’ call for ‘flawed’ SEC tokenization rules")
    assert r["published_at"] == datetime(2025, 12, 12, 20, 23, 11)

    # googlenews-1: link and pubDate padded with newlines and indentation.
    r = frame(con, "url = ?", [
        "https://news.google.com/rss/articles/"
        "CBMiN2h0dHBzOi8vd3d3LmFzYWhpLmNvbS9hcnRpY2xlcy9BU1MyNTZIR1ZTMjRVVElMMDBYLmh0bWzSAQA?oc=5"
    ])[0]  # fmt: skip
    assert r["published_at"] == datetime(2024, 2, 5, 19, 0, 0)
    assert (
        r["title"]
        == "盛山文科相、旧統一教会系から選挙支援 21年衆院選 関係者が証言：朝日新聞デジタル - 朝日新聞デジタル"
    )
    assert r["guid"] == "CBMiN2h0dHBzOi8vd3d3LmFzYWhpLmNvbS9hcnRpY2xlcy9BU1MyNTZIR1ZTMjRVVElMMDBYLmh0bWzSAQA"
    assert r["language"] == "ja"

    # coindesk-1: CDATA title with a trailing space, media:content with &amp; in the query, two dc:creator.
    r = one(con, "Citadel Securities and DeFi Waging War of Words Through SEC Correspondence")
    assert r["published_at"] == datetime(2025, 12, 12, 22, 20, 18)
    assert r["image_url"] == (
        "https://cdn.sanity.io/images/s3y3vcno/production/92e55eb28f7499e7a2830668981d5027aff1a10c-1920x1080.jpg"
        "?fm=jpg&w=1920&h=1080&crop=focalpoint&fit=clip"
    )
    assert r["content_html"] is None  # <content:encoded/> is empty
    assert r["summary"].startswith(
        "The investing giant had asked the U.S. Securities and Exchange Commission"
    )
    assert one(con, "DOT Sinks 2% After Breaking Key Support")["authors"] == ["CD Analytics", "Will Canny"]

    # coindesk-3: title with a leading space, empty <description/>, two creators.
    r = one(con, "Crypto for Advisors: The CLARITY Act failed, but the rules came anyway")
    assert (r["summary"], r["content_html"]) == ("", None)
    assert r["authors"] == ["Alex Tapscott", "Leo Mindyuk"]
    assert r["published_at"] == datetime(2026, 10, 1, 15, 0, 0)

    # cointelegraph-1: <link> in CDATA with a raw & between utm_* parameters; image enclosure.
    r = one(con, "Figure Technology files ‘second IPO’ to bring native equity issuance to Solana")
    assert r["url"] == "https://cointelegraph.com/news/figure-technology-solana-onchain-equity-second-ipo"
    assert r["published_at"] == datetime(2025, 12, 12, 16, 57, 28)
    assert r["source_name"] == "cointelegraph-1"  # also in cointelegraph-2, which comes later
    assert r["summary"].startswith(
        "Figure is planning a second IPO to issue blockchain-native equity on Solana"
    )

    # decrypt-1: &#39; in the title, an empty <category></category>, an image enclosure and a thumbnail.
    r = one(con, "Vanguard Exec Calls Bitcoin a 'Digital Labubu', Even as Firm Offers Crypto ETF Trading")
    assert r["categories"] == ["Coins"]
    assert r["image_url"] == (
        "https://img.decrypt.co/insecure/rs:fill:1024:512:1:0/plain/"
        "https://cdn.decrypt.co/wp-content/uploads/2025/05/labubu-up-decrypt-style-scaled-gID_7.jpg@png"
    )
    assert r["published_at"] == datetime(2025, 12, 12, 21, 59, 32)

    # reddit-1 (Atom): entity-escaped HTML content holding &amp;#39; (an apostrophe, decoded once per layer).
    r = one(con, "Image Resizer if back in Power toys for Windows 10")
    assert "increasing the size of images that's I've been using on Windows 11" in r["summary"]
    assert r["published_at"] == datetime(2025, 11, 28, 16, 44, 40)
    assert r["categories"] == ["Windows10"]
    assert r["image_url"] == (
        "https://external-preview.redd.it/qiObES0c5cJzzH74Gu5bEl3qJDxsGuUyfr67o4IlPM8.png"
        "?width=640&crop=smart&auto=webp&s=80d25d166dcccc0dd1b33690658a26d570533e00"
    )
    assert r["content_html"].startswith("<table>") and "<!-- SC_OFF -->" not in r["content_html"]

    # theblock-2: UTC dates, media:content type="image/*".
    r = one(con, "Drift opens exploit recovery claims with initial payouts of just over 1% of user losses")
    assert r["published_at"] == datetime(2026, 10, 2, 17, 10, 40)
    assert r["image_url"].startswith("https://www.tbstat.com/cdn-cgi/image/width=1600,height=900")
