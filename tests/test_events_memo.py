"""Deriving only the articles that changed (pipeline.events.memo) gives what deriving every article gives: two real
DuckDB warehouses take the same articles, edits and prices, one through the memo, one with a full pass each run."""

from __future__ import annotations

import json
import zoneinfo
from datetime import date, datetime, timedelta
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from models.tagging import load_registry
from pipeline.events import derive_events
from pipeline.events.evaluate import eval_tagging
from pipeline.events.memo import derive_and_merge, fingerprint
from pipeline.events.reference import default_reference
from warehouse.config import Settings, get_settings
from warehouse.db import connect
from warehouse.events import WITHDRAWN_DEFAULT, merge_events
from warehouse.prices import load_prices

PROJECT = Path(__file__).resolve().parents[1]
NAMES = {a.symbol: a.name for a in load_registry()}
NOW = datetime(2026, 11, 24, 12, 0)


@pytest.fixture(scope="module")
def labelled() -> list[dict]:
    """The bundled sample's labelled articles, tagged as the pipeline tags them."""
    tag, _, _ = eval_tagging()
    out = []
    for line in (PROJECT / "models/eval/events.jsonl").read_text().splitlines():
        item = json.loads(line)
        published = datetime.fromisoformat(item["published_at"])
        tickers, topics = tag(item["title"], item["summary"], published)
        out.append({"id": "a_" + item["key"].replace("#", "_"), "source_name": item["source_name"],
                    "url": item.get("guid"), "title": item["title"], "summary": item["summary"],
                    "published_at": published, "tickers": list(tickers), "topics": list(topics)})
    return out


def put(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> None:
    con.register("_t", pa.Table.from_pylist(rows))
    con.execute(
        "INSERT OR REPLACE INTO articles (id, source_name, feed_url, url, title, summary, authors, categories, "
        "published_at, fetched_at, content_hash, tickers, topics) SELECT id, source_name, 'https://feed.example/rss', "
        "url, title, summary, [], [], published_at, published_at, id, tickers, topics FROM _t")
    con.unregister("_t")


def by_memo(con: duckdb.DuckDBPyConnection, now: datetime) -> int:
    derivation, _ = derive_and_merge(con, NAMES, now)  # what the asset runs
    return derivation.derived


def by_full_pass(con: duckdb.DuckDBPyConnection, now: datetime) -> None:
    from pipeline.events import ArticleIn

    reference = default_reference().with_prices(load_prices(con))
    inputs = [ArticleIn(*r) for r in con.execute(  # every column derivation reads, as the asset read them before
        "SELECT id, title, summary, url, image_url, source_name, published_at, tickers, topics, published_offset "
        "FROM articles ORDER BY published_at, id").fetchall()]
    refused: dict[str, str] = {}
    merge_events(con, derive_events(inputs, NAMES, reference=reference, refused=refused), now, complete=True,
                 refused=refused)


def tables(con: duckdb.DuckDBPyConnection) -> tuple[list, list]:
    return (con.execute("SELECT * FROM prediction_events ORDER BY id").fetchall(),
            con.execute("SELECT * FROM prediction_event_sources ORDER BY ALL").fetchall())


def test_the_memo_derives_only_what_changed_and_merges_what_a_full_pass_merges(
        tmp_path: Path, labelled: list[dict]) -> None:
    memo, full = connect(tmp_path / "memo.duckdb"), connect(tmp_path / "full.duckdb")
    try:
        def step(change, now: datetime) -> int:
            for con in (memo, full):
                change(con)
            derived = by_memo(memo, now)
            by_full_pass(full, now)
            got, want = tables(memo), tables(full)
            assert got == want
            return derived

        half = len(labelled) // 2
        assert step(lambda con: put(con, labelled[:half]), NOW) == half
        assert step(lambda con: None, NOW + timedelta(minutes=10)) == 0  # nothing new: nothing derived
        assert step(lambda con: put(con, labelled[half:]), NOW + timedelta(minutes=20)) == len(labelled) - half
        events = memo.execute("SELECT count(*) FROM prediction_events").fetchall()[0][0]
        assert events >= 20

        # Edits: a source article now asks another question, another asks none; both are derived again and the
        # events they gave are withdrawn or moved as a full pass would.
        sources = [r[0] for r in memo.execute(
            "SELECT source_article_id FROM prediction_events ORDER BY source_article_id LIMIT 2").fetchall()]
        edited = [dict(a) for a in labelled if a["id"] in sources]
        edited[0].update(title="Bitcoin Could Hit $250,000 by Year-End, Analyst Says", tickers=["BTC"])
        edited[1].update(title="Markets Quiet Ahead of the Weekend", summary="Nothing moved.")
        assert step(lambda con: put(con, edited), NOW + timedelta(minutes=30)) == 2
        assert memo.execute("SELECT count(*) FROM prediction_events WHERE withdrawn_reason IS NOT NULL"
                            ).fetchall()[0][0] >= 1

        # New reference prices: the articles naming BTC from its previous price day on (the shipped table's
        # 2025-07-01) are derived again, not the older ones nor the others. These put every BTC level out of the price band, so the checks refuse
        # the BTC questions and their events are withdrawn saying so.
        days = [(date(2026, 10, 1) + timedelta(days=i), NOW) for i in range(60)]
        since = default_reference().previous_price_day("BTC", date(2026, 10, 1))
        later = full.execute("SELECT count(*) FROM articles WHERE list_contains(tickers, 'BTC') AND published_at >= ?",
                             [since]).fetchall()[0][0]
        assert 0 < later < len(labelled)
        assert step(lambda con: con.executemany("INSERT INTO asset_prices VALUES ('BTC', ?, 3.0, 'test', ?)", days),
                    NOW + timedelta(hours=1)) == later
        # A price changed on a day of the past (a corrected fetch): the same, from that ticker's day before it.
        assert step(lambda con: con.execute("UPDATE asset_prices SET usd = 2.5 WHERE day = '2026-11-10'"),
                    NOW + timedelta(hours=2)) > 0
        reasons = {r[0] for r in memo.execute(
            "SELECT withdrawn_reason FROM prediction_events WHERE asset = 'BTC' AND withdrawn_reason IS NOT NULL"
        ).fetchall()}
        assert reasons - {WITHDRAWN_DEFAULT}, reasons  # the checks' own reasons, carried through the memo
        # An article gone from the warehouse leaves the memo; its events stay listed, as with a full pass.
        gone = sources[0]
        assert step(lambda con: con.execute("DELETE FROM articles WHERE id = ?", [gone]),
                    NOW + timedelta(hours=3)) == 0
        # every column derivation reads is an input: its edit alone derives the article again
        for column, value in (("published_offset", -300), ("url", "https://moved.example/a"),
                              ("image_url", "https://img.example/a.png"), ("source_name", "Other Wire")):
            assert step(lambda con, c=column, v=value: con.execute(f"UPDATE articles SET {c} = ? WHERE id = ?",
                                                                   [v, sources[1]]),
                        NOW + timedelta(hours=3, minutes=len(column))) == 1, column
        # a ticker moved to the topics is a changed input (a hash of the columns one by one would not tell)
        tagged = next(dict(a) for a in labelled if a["tickers"] and a["id"] != gone)
        tagged.update(tickers=tagged["tickers"][:1], topics=[])
        assert step(lambda con: put(con, [tagged]), NOW + timedelta(hours=4)) == 1
        moved = {**tagged, "tickers": [], "topics": tagged["tickers"]}
        assert step(lambda con: put(con, [moved]), NOW + timedelta(hours=5)) == 1
        assert memo.execute("SELECT count(*) FROM event_memo WHERE article_id = ?", [gone]).fetchall()[0][0] == 0
    finally:
        memo.close()
        full.close()


def test_the_fingerprint_follows_the_loaded_code_and_data_not_the_files_on_disk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.events import derive

    first = fingerprint(NAMES)
    assert fingerprint(dict(NAMES)) == first
    assert fingerprint({**NAMES, "BTC": "Bitcoin Core"}) != first
    assert set(derive.LOADED_CODE) >= {"pipeline.events.price", "pipeline.events.templates", "pipeline.events.dates"}
    # a deploy that rewrites the rule files under a running process: the process still derives with what it loaded,
    # and so its fingerprint stays
    monkeypatch.setattr(Path, "read_bytes", lambda self: b"# rewritten by a deploy\n")
    assert fingerprint(NAMES) == first
    # the code it loaded is what names it
    monkeypatch.setitem(derive.LOADED_CODE, "pipeline.events.price", b"# other rules\n")
    assert fingerprint(NAMES) != first


def _zone_bytes(key: str) -> bytes:
    for root in zoneinfo.TZPATH:
        if (Path(root) / key).is_file():
            return (Path(root) / key).read_bytes()
    return resources.files("tzdata.zoneinfo").joinpath(*key.split("/")).read_bytes()


def test_the_fingerprint_follows_the_time_zone_rules_and_the_python_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.events import dates

    first = fingerprint(NAMES)
    # a time zone database in which New York keeps Tokyo's time ("4 PM ET" falls on another day)
    for key in set(dates._ZONES.values()):
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(_zone_bytes("Asia/Tokyo" if key == "America/New_York" else key))
    zoneinfo.reset_tzpath(to=[str(tmp_path)])
    zoneinfo.ZoneInfo.clear_cache()
    dates.zone_rules.cache_clear()
    try:
        assert fingerprint(NAMES) != first
    finally:
        zoneinfo.reset_tzpath()
        zoneinfo.ZoneInfo.clear_cache()
        dates.zone_rules.cache_clear()
    assert fingerprint(NAMES) == first
    monkeypatch.setattr("platform.python_version", lambda: "3.99.0")
    assert fingerprint(NAMES) != first


@pytest.fixture
def home_of_50(data_home: Path, labelled: list[dict]) -> Settings:
    """A data home whose warehouse holds 50 labelled articles and nothing derived yet."""
    settings = get_settings()
    settings.warehouse_path.parent.mkdir(parents=True, exist_ok=True)
    con = connect(settings.warehouse_path)
    put(con, labelled[:50])
    con.close()
    return settings


def test_the_rederive_events_job_derives_every_article_again(home_of_50: Settings) -> None:
    import dagster as dg

    from pipeline.automation import FULL_DERIVATION_TAG, rederive_events_job
    from pipeline.definitions import ALL_ASSETS, resources

    settings = home_of_50
    instance = dg.DagsterInstance.ephemeral()

    def derived(**kw) -> int:
        result = dg.materialize(ALL_ASSETS, selection=["prediction_events"], resources=resources(settings),
                                instance=instance, **kw)
        (materialization,) = result.asset_materializations_for_node("prediction_events")
        return materialization.metadata["articles_derived"].value

    assert derived() == 50
    assert derived() == 0  # a scheduled run with nothing new
    assert rederive_events_job.tags == {FULL_DERIVATION_TAG: "1"}  # what the job's runs carry
    assert derived(tags={FULL_DERIVATION_TAG: "1"}) == 50


def test_materialize_rederive_derives_every_article_again(home_of_50: Settings) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    def derived(*flags: str) -> int:
        result = CliRunner().invoke(app, ["materialize", "--select", "prediction_events", "--json", *flags])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.output[result.output.index("{"):])
        (events,) = [a for a in doc["assets"] if a["asset"] == "prediction_events"]
        return events["metadata"]["articles_derived"]

    assert derived() == 50
    assert derived() == 0
    assert derived("--rederive") == 50
    # without the events step in the selection it would do nothing: a mistake in the command line
    result = CliRunner().invoke(app, ["materialize", "--select", "raw_articles", "--rederive"])
    assert result.exit_code == 2 and "prediction_events" in result.output, result.output
