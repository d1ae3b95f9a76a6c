"""Review: the reference-price asset reports what it could not fetch and an old shipped price table.

Each test runs ``cryptowire materialize --select asset_reference_prices`` (real Dagster, a real DuckDB warehouse)
against a real HTTP server on 127.0.0.1 standing in for CoinGecko, or with no reachable source at all.
"""

from __future__ import annotations

import csv
import json
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import Result
from typer.testing import CliRunner

from pipeline.events.reference import REFERENCE_PATH, STALE_AFTER, default_reference
from tests.support.httpserver import Handler, LocalServer, Reply, RequestHandler
from warehouse.db import utcnow

PRICE_PATH = "/api/v3/simple/price"


def shipped_newest() -> tuple[int, date]:
    """How many assets the shipped table prices, and its newest price day (read from the CSV itself)."""
    with REFERENCE_PATH.open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["field"] == "price_usd"]
    return len({r["ticker"] for r in rows}), max(date.fromisoformat(r["date"]) for r in rows)


def answering(coins: set[str] | None) -> Handler:
    """A CoinGecko-like simple/price answering for the requested ids in ``coins`` (None: every id asked for)."""

    def handler(req: RequestHandler) -> Reply:
        asked = parse_qs(urlsplit(req.path).query)["ids"][0].split(",")
        body = {c: {"usd": 1.5} for c in asked if coins is None or c in coins}
        return Reply(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    return handler


def materialize(data_home: Path, monkeypatch: pytest.MonkeyPatch, source: str, as_json: bool = True) -> Result:
    from pipeline.cli import app
    from warehouse.config import get_settings

    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))
    monkeypatch.setenv("CRYPTOWIRE_PRICE_SOURCE_URL", source)
    get_settings.cache_clear()
    args = ["materialize", "--select", "asset_reference_prices", *(["--json"] if as_json else [])]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output  # never fails the run, online or not
    return result


def metadata(result: Result) -> dict[str, Any]:
    (asset,) = json.loads(result.stdout)["assets"]
    assert asset["ok"], asset
    return asset["metadata"]


def expect_staleness(meta: dict[str, Any], stale: int) -> None:
    """``stale`` assets have nothing newer than the shipped table: said (with its age) when that is too old."""
    _, newest = shipped_newest()
    age = (utcnow().date() - newest).days
    if age <= STALE_AFTER.days:  # a freshly shipped table: nothing to say
        stale = 0
    assert meta["stale_assets"] == stale, meta
    if stale:
        assert meta["shipped_price_age_days"] == age
        warning = meta["warning"]
        assert f"{stale} of " in warning and newest.isoformat() in warning and f"{age} days old" in warning
        assert "run online" in warning and "CRYPTOWIRE_PRICE_SOURCE_URL" in warning
    else:
        assert "shipped_price_age_days" not in meta and "shipped table" not in meta["warning"]


def test_a_partial_answer_names_the_coins_it_lacks(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = default_reference().coingecko_ids()
    priced, _ = shipped_newest()
    missing = sorted(t for t in ids if t not in ("BTC", "ETH"))
    with LocalServer() as srv:
        srv.routes[PRICE_PATH] = answering({"bitcoin", "ethereum"})
        meta = metadata(materialize(data_home, monkeypatch, srv.url("/api/v3")))
        text = materialize(data_home, monkeypatch, srv.url("/api/v3"), as_json=False).output
    assert meta["fetched"] == 2 and meta["error"] == ""
    assert meta["missing"] == len(missing) == len(ids) - 2
    # Which: the first few by ticker, with the id asked for, and how many more.
    named = ", ".join(f"{t} ({ids[t]})" for t in missing[:5])
    assert meta["missing_coins"] == f"{named} and {len(missing) - 5} more"
    assert f"answered for 2 of {len(ids)} coins, not for {len(missing)} (missing_coins)" in meta["warning"]
    # The two fetched today are fresh; the rest still rely on the shipped table.
    expect_staleness(meta, priced - 2)
    # The text summary of the run carries the warning too.
    assert f"missing={len(missing)}" in text and f"warning=the price source answered for 2 of {len(ids)}" in text


def test_a_full_answer_warns_of_nothing(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalServer() as srv:
        srv.routes[PRICE_PATH] = answering(None)
        meta = metadata(materialize(data_home, monkeypatch, srv.url("/api/v3")))
    ids = default_reference().coingecko_ids()
    assert meta["fetched"] == len(ids) and meta["missing"] == 0 and meta["missing_coins"] == ""
    assert meta["stale_assets"] == 0 and meta["warning"] == ""


@pytest.mark.parametrize("source", ["off", "unreachable"])
def test_an_old_shipped_table_is_reported_without_failing(data_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                           source: str) -> None:
    priced, _ = shipped_newest()
    if source == "off":
        url = ""
    else:
        with LocalServer() as gone:
            url = gone.url("/api/v3")  # closed when used: as offline as a failed DNS lookup
    meta = metadata(materialize(data_home, monkeypatch, url))
    assert meta["fetched"] == 0
    if source == "unreachable":
        assert "could not read" in meta["error"]
    else:
        assert "fetching is off" in meta["note"]
    expect_staleness(meta, priced)
