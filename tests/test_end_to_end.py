"""From an empty data home to answers over HTTP, the way a new user meets cryptowire: real feeds served on
127.0.0.1, the pipeline, the server, a real key, news, events and a PDF; then new items arrive and only they
appear at the head of the first page, while cursors handed out before stay valid."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from api.app import create_app
from pipeline.cli import app as cli
from tests.conftest import FEED_FIXTURES
from tests.support.apiserver import ApiServer
from tests.support.feedgen import item, rss
from tests.support.httpserver import LocalServer, Reply
from warehouse.config import get_settings

runner = CliRunner()
NEWS = """query CryptoNews($after: String, $first: Int) {
  cryptoNews(after: $after, first: $first) {
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
    edges { cursor node { title text sentiment tickers tickerSentiments { ticker label score } topics sourceName newsUrl } }
  }
}"""
EVENTS = """query PredictionEvents($after: String, $first: Int) {
  predictionEvents(after: $after, first: $first) {
    pageInfo { hasNextPage endCursor }
    edges { node { id eventTitle eventDescription sourceUrl imageUrl options tags } }
  }
}"""


def _cli(*args: str) -> dict:
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _extra_feed(titles: list[tuple[str, datetime]]) -> bytes:
    items = [
        item(t, f"https://wire.example/{i}", pub=format_datetime(when), description=f"{t}. More to follow.")
        for i, (t, when) in enumerate(titles)
    ]
    return rss(*items, title="Local Wire").encode()


@pytest.mark.slow
def test_feeds_to_api_and_new_items_at_the_head(data_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))
    monkeypatch.setenv("CRYPTOWIRE_SNAPSHOT_POLL_SECONDS", "0.1")
    now = datetime.now(UTC).replace(microsecond=0)
    extra = [("Local Wire opens its markets desk", now - timedelta(days=400))]

    with LocalServer() as feeds_srv, LocalServer() as page_srv:
        for path in sorted(FEED_FIXTURES.glob("*.xml")):
            body = path.read_bytes()
            feeds_srv.routes[f"/feeds/{path.name}"] = lambda req, b=body: Reply(200, b, {"Content-Type": "application/rss+xml"})
        feeds_srv.routes["/feeds/extra.xml"] = lambda req: Reply(200, _extra_feed(extra), {"Content-Type": "application/rss+xml"})
        page_srv.routes["/report"] = lambda req: Reply(
            200, b"<html><body><h1>Quarterly crypto report</h1></body></html>", {"Content-Type": "text/html"}
        )
        feeds_file = tmp_path / "feeds.yaml"
        names = [p.name for p in sorted(FEED_FIXTURES.glob("*.xml"))] + ["extra.xml"]
        feeds_file.write_text(
            "feeds:\n" + "".join(f"  - name: {n}\n    url: {feeds_srv.url('/feeds/' + n)}\n" for n in names)
        )
        monkeypatch.setenv("CRYPTOWIRE_FEEDS_FILE", str(feeds_file))
        monkeypatch.setenv("CRYPTOWIRE_PDF_ALLOW_HOSTS", json.dumps([f"127.0.0.1:{page_srv.port}"]))
        get_settings.cache_clear()

        first_run = _cli("materialize", "--feeds", str(feeds_file))
        assert first_run["ok"], first_run
        key = _cli("keys", "create", "--plan", "pro", "--name", "e2e")["key"]

        with ApiServer(create_app(get_settings())) as api:
            def news(after: str | None = None, first: int = 5) -> dict:
                r = httpx.post(api.url(f"/crypto-news/{key}"), json={"query": NEWS, "variables": {"after": after, "first": first}}, timeout=30)
                assert r.status_code == 200, r.text
                assert "errors" not in r.json(), r.text
                return r.json()["data"]["cryptoNews"]

            page1 = news()
            assert len(page1["edges"]) == 5 and page1["pageInfo"]["hasNextPage"]
            assert all(e["node"]["sentiment"] in ("Positive", "Negative", "Neutral") for e in page1["edges"])
            page2 = news(page1["pageInfo"]["endCursor"])
            events = httpx.post(api.url(f"/prediction-events/{key}"), json={"query": EVENTS, "variables": {"first": 10}}, timeout=30)
            assert events.status_code == 200, events.text
            for edge in events.json()["data"]["predictionEvents"]["edges"]:
                assert edge["node"]["options"] == ["Yes", "No"] and edge["node"]["id"].startswith("pevt_")

            pdf = httpx.get(api.url(f"/api/html-to-pdf/{key}"), params={"url": page_srv.url("/report")}, timeout=90)
            assert pdf.status_code == 200, pdf.text
            assert pdf.content.startswith(b"%PDF-") and pdf.headers["X-CU-Cost"] == "20000"

            # New items arrive in one feed; the schedule's job runs again.
            for e in page1["edges"] + page2["edges"]:  # every ticker has its own sentiment, in the order of tickers
                node = e["node"]
                assert [t["ticker"] for t in node["tickerSentiments"]] == node["tickers"], node
                assert all(t["label"] in ("Positive", "Negative", "Neutral") and -1 <= t["score"] <= 1
                           for t in node["tickerSentiments"])
                if len(node["tickers"]) == 1:
                    assert node["tickerSentiments"][0]["label"] == node["sentiment"]
            extra += [
                ("Bitcoin climbs past $120,000 as ETF inflows hit a record", now - timedelta(minutes=3)),
                ("Ethereum developers set the date for the next upgrade", now - timedelta(minutes=2)),
            ]
            second_run = _cli("materialize", "--feeds", str(feeds_file))
            assert second_run["ok"], second_run
            raw = next(a for a in second_run["assets"] if a["asset"] == "raw_articles")
            assert raw["metadata"]["new"] == 2 and raw["metadata"]["updated"] == 0

            deadline = time.monotonic() + 30
            while news(first=1)["edges"][0]["node"]["newsUrl"] != "https://wire.example/2":
                assert time.monotonic() < deadline, "the server did not switch to the new snapshot"
                time.sleep(0.2)
            head = news()
            assert [e["node"]["newsUrl"] for e in head["edges"][:2]] == ["https://wire.example/2", "https://wire.example/1"]
            assert [e["node"]["title"] for e in head["edges"][2:]] == [e["node"]["title"] for e in page1["edges"][:3]]
            # A cursor handed out before the new items still gives the same next page.
            again = news(page1["pageInfo"]["endCursor"])
            assert [e["node"]["newsUrl"] for e in again["edges"]] == [e["node"]["newsUrl"] for e in page2["edges"]]
