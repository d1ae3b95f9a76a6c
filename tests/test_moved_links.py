"""A publisher edits an article's slug (same guid) or moves its site to https: the next run keeps one article, and
what is served follows: the snapshot lists it once, under its new link, and the sentiment buckets count it once
(it was stored and served twice, and counted twice in asset_sentiment)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app as cli
from tests.support.feedgen import item, rss
from tests.support.httpserver import LocalServer, Reply

runner = CliRunner()


def _cli(*args: str) -> dict:
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _sql(query: str) -> list[list]:
    return [list(row.values()) for row in _cli("sql", query, "--snapshot")]


@pytest.mark.slow
def test_a_moved_link_is_served_once_under_its_new_link(data_home: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))
    when = format_datetime(datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3))
    links = {"btc": "http://wire.example/btc-etf", "eth": "http://wire.example/eth"}

    def feed(req: object) -> Reply:
        body = rss(
            item("Bitcoin eyes $150,000 by year-end as ETF inflows surge", links["btc"], guid="w-1", pub=when),
            item("Ethereum slides after the upgrade is delayed", links["eth"], pub=when),
        )
        return Reply(200, body.encode(), {"Content-Type": "application/rss+xml"})

    with LocalServer() as srv:
        srv.routes["/wire.xml"] = feed
        feeds = tmp_path / "feeds.yaml"
        feeds.write_text(f"feeds:\n  - name: Wire\n    url: {srv.url('/wire.xml')}\n")
        monkeypatch.setenv("CRYPTOWIRE_FEEDS_FILE", str(feeds))  # --feeds sets it in this process: undone after
        assert _cli("materialize", "--feeds", str(feeds))["ok"]
        links.update(btc="http://wire.example/btc-etf-record-inflows", eth="https://wire.example/eth/")
        second = _cli("materialize", "--feeds", str(feeds))
    assert second["ok"], second
    raw = next(a for a in second["assets"] if a["asset"] == "raw_articles")
    assert (raw["metadata"]["new"], raw["metadata"]["updated"]) == (0, 2)
    assert sorted(r[0] for r in _sql("SELECT news_url FROM news")) == [
        "http://wire.example/btc-etf-record-inflows", "https://wire.example/eth/"]
    # the event asked by the moved article links to where the article is now
    assert _sql("SELECT source_url FROM events") == [["http://wire.example/btc-etf-record-inflows"]]
    counts = _sql("SELECT ticker, sum(articles) FROM sentiment WHERE grain = 'day' GROUP BY ticker ORDER BY 1")
    assert counts and all(n == 1 for _, n in counts), counts
