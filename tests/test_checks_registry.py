"""An article from before an asset's rename carries the symbol of its day (MATIC for Polygon in 2021, docs/tagging.md):
the registry check must take it as known. It counted such tickers as unknown, so every warehouse with older news
failed `articles.tickers_in_registry` (46 violations on an upgraded home of real headlines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app as cli
from tests.support.feedgen import item, rss
from tests.support.httpserver import LocalServer, Reply


@pytest.mark.slow
def test_a_former_symbol_on_an_older_article_passes_the_registry_check(data_home: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))
    monkeypatch.setenv("CRYPTOWIRE_PRICE_SOURCE_URL", "")
    body = rss(
        item("Polygon (MATIC) jumps 20% as new DeFi apps launch on the network", "http://wire.example/matic",
             pub="Mon, 15 Mar 2021 10:00:00 +0000"),
        item("Bitcoin steadies above $60,000 as traders wait for the Fed", "http://wire.example/btc",
             pub="Mon, 15 Mar 2021 11:00:00 +0000"),
    )
    with LocalServer() as srv:
        srv.routes["/wire.xml"] = lambda req: Reply(200, body.encode(), {"Content-Type": "application/rss+xml"})
        feeds = tmp_path / "feeds.yaml"
        feeds.write_text(f"feeds:\n  - name: Wire\n    url: {srv.url('/wire.xml')}\n")
        monkeypatch.setenv("CRYPTOWIRE_FEEDS_FILE", str(feeds))  # --feeds sets it in this process: undone after
        result = CliRunner().invoke(cli, ["materialize", "--feeds", str(feeds), "--json"])
    doc = json.loads(result.output)
    tickers = CliRunner().invoke(cli, ["sql", "SELECT list_sort(flatten(list(tickers))) FROM articles", "--json"])
    assert "MATIC" in tickers.output, tickers.output  # the article of 2021 has the symbol of its day
    check = next(c for c in doc["checks"] if c["check"] == "tickers_in_registry")
    assert check["passed"], check

    # A failed check names a few offending values, not only their count (a contributor's review: after a registry
    # change, `materialize --select articles` said "3 violation(s)" and nothing of which tickers).
    import duckdb

    con = duckdb.connect(str(data_home / "warehouse.duckdb"))
    try:
        con.execute("UPDATE articles SET tickers = ['ZZZQ'] WHERE title LIKE 'Bitcoin%'")
    finally:
        con.close()
    result = CliRunner().invoke(cli, ["materialize", "--select", "articles"])
    assert "WARN  articles.tickers_in_registry failed: 1 violation(s); e.g. ZZZQ" in result.output, result.output
    assert result.exit_code == 0  # a warning: reported, and the run goes on (red, ERROR, is for blocking checks)
