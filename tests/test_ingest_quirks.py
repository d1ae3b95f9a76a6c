"""The repository's own feed documents (tests/fixtures/feeds), each written to carry the quirks of a real feed
(tests/fixtures/README.md), served from 127.0.0.1 and ingested: every row comes out clean, and the values below
are read from the documents by hand. Runs from a clone alone; the real corpus: tests/test_ingest_fixtures.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import duckdb
import pytest

from pipeline.ingest import IngestReport
from tests.conftest import FEED_FIXTURES
from tests.test_ingest_fixtures import assert_clean, frame, one, serve_and_ingest

DOCS = sorted(FEED_FIXTURES.glob("*.xml"))


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[duckdb.DuckDBPyConnection, IngestReport]]:
    con, report = serve_and_ingest(DOCS, tmp_path_factory.mktemp("quirks"))
    yield con, report
    con.close()


def test_every_document_is_read_and_its_rows_are_clean(ingested: tuple[duckdb.DuckDBPyConnection, IngestReport]) -> None:
    con, report = ingested
    seen = {r.feed.name: r.items_seen for r in report.results if r.error is None}
    assert seen == {
        "atom-escaped": 2, "cdata-link": 1, "cdata-titles": 2, "leading-newline": 2, "offset-dates": 2,
        "one-line": 2, "padded": 1, "single-quoted": 2, "unordered": 3,
    }
    rows = frame(con)
    assert len(rows) == 15  # leading-newline.xml is cdata-titles.xml behind a newline: the same 2 articles
    assert_clean(rows)


def test_values_read_by_hand(ingested: tuple[duckdb.DuckDBPyConnection, IngestReport]) -> None:
    con, _ = ingested
    r = one(con, "Bitcoin tops $98,000 as ETF inflows return")  # CDATA title with a trailing space
    assert r["authors"] == ["Ana Ruiz", "Tom Becker"]
    assert r["image_url"].endswith("btc.jpg&width=1200&height=628")  # &amp; in media:content, unescaped once
    r = one(con, "Solana's validators vote on fee changes")  # &amp;#039; (double-escaped) and padded title
    assert r["summary"] == "The proposal would cut base fees by half." and r["categories"] == ["Solana"]
    r = one(con, "“Regulators‑first” approach: SEC delays a decision on XRP ETFs")  # curly quotes, U+2011 kept
    assert r["url"] == "https://telegraph.example.net/news/sec-delays-xrp-etf"  # CDATA link, raw &, utm_ gone
    assert r["summary"] == "The agency extended its review by 45 days."
    assert r["image_url"] == "https://telegraph.example.net/img/xrp.jpg"
    r = one(con, "Polygon's daily active addresses hit a record")  # runs of spaces collapse
    assert r["published_at"] == datetime(2026, 3, 5, 12, 15)  # 07:15 -0500 in UTC
    assert r["summary"] == "Daily active addresses on Polygon reached 2.1 million."  # &nbsp; is a space
    r = one(con, "Cardano developers ship a node update")  # Atom, entity-escaped HTML content
    assert r["summary"] == "The release fixes two bugs in block propagation."
    assert r["published_at"] == datetime(2026, 3, 6, 10, 55) and r["image_url"] == "https://thumbs.example.org/abc123.jpg"
    r = one(con, "Example Corp adds bitcoin to its treasury")  # the whole document on one line
    assert r["published_at"] == datetime(2026, 3, 6, 13, 0)
    r = one(con, "ビットコイン、1500万円を回復")  # URL and date padded with newlines and indentation
    assert r["url"] == "https://news.example.jp/articles/2026/03/07/btc-recovers"
    assert r["published_at"] == datetime(2026, 3, 7, 3, 0)
    r = one(con, "Tron's stablecoin supply climbs to a new high")  # leading space, empty <description/>
    assert r["summary"] == ""
