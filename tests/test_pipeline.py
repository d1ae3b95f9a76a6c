"""The pipeline as data engineers run it: the CLI materializes the bundled sample into a real warehouse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import httpx
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from warehouse.config import PROJECT_ROOT

runner = CliRunner()


@pytest.fixture
def isolated_home(data_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DAGSTER_HOME", str(data_home / "dagster"))  # restored after the test
    return data_home


def _invoke(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_definitions_validate() -> None:
    dagster = Path(sys.executable).parent / "dagster"
    out = subprocess.run(
        [str(dagster), "definitions", "validate", "-m", "pipeline.definitions"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_command_has_help() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("materialize", "status", "up", "dev", "worker", "backfill"):
        assert command in result.output
        sub = runner.invoke(app, [command, "--help"])
        assert sub.exit_code == 0 and "Usage" in sub.output


@pytest.mark.slow
def test_materialize_sample_end_to_end_and_again(isolated_home: Path) -> None:
    first = _invoke("materialize")
    assert first["ok"], first
    by_asset = {a["asset"]: a for a in first["assets"]}
    assert set(by_asset) >= {"raw_articles", "crypto_assets", "articles", "prediction_events", "serving_snapshot"}
    assert all(a["ok"] for a in first["assets"]), first["assets"]
    assert all(c["passed"] for c in first["checks"]), [c for c in first["checks"] if not c["passed"]]
    assert by_asset["raw_articles"]["metadata"]["rows"] >= 150

    con = duckdb.connect(str(isolated_home / "warehouse.duckdb"), read_only=True)
    try:
        n_raw, n_articles, unscored = con.execute(
            "SELECT (SELECT count(*) FROM raw_articles), count(*), count(*) FILTER (WHERE model_version IS NULL) "
            "FROM articles"
        ).fetchall()[0]
        assert n_raw == n_articles >= 150 and unscored == 0
        labels = {r[0] for r in con.execute("SELECT DISTINCT sentiment FROM articles").fetchall()}
        assert labels == {"negative", "neutral", "positive"}
        assert con.execute("SELECT count(*) FROM prediction_events").fetchall()[0][0] > 0
        updated_before = con.execute("SELECT max(updated_at) FROM raw_articles").fetchall()[0][0]
        # Stories: every article in exactly one; the sample's sources report some news together.
        assert con.execute("SELECT count(*), count(DISTINCT article_id) FROM story_articles").fetchall()[0] == (
            n_articles, n_articles)
        assert con.execute("SELECT max(sources) FROM stories").fetchall()[0][0] >= 3
        stories_before = con.execute("SELECT * EXCLUDE (updated_at) FROM stories ORDER BY id").fetchall()
    finally:
        con.close()

    # A second run with the same feeds changes nothing and scores nothing, so it never loads the model: in a
    # process of its own, as the schedule starts one, neither torch nor transformers get imported.
    code = (
        "import sys; from pipeline.cli import main; sys.argv = ['cryptowire', 'materialize', '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('LOADED ' + repr([m for m in ('torch', 'transformers') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
    assert out.returncode == 0 and "LOADED []" in out.stderr, out.stderr[-3000:]
    second = json.loads(out.stdout)
    by_asset = {a["asset"]: a for a in second["assets"]}
    assert by_asset["raw_articles"]["metadata"]["new"] == 0
    assert by_asset["raw_articles"]["metadata"]["updated"] == 0
    assert by_asset["articles"]["metadata"]["scored"] == 0
    assert by_asset["stories"]["metadata"]["new"] == 0 and by_asset["stories"]["metadata"]["embedded"] == 0
    # events come from the memo of the first run: no article is derived again
    assert by_asset["prediction_events"]["metadata"]["articles_derived"] == 0
    assert by_asset["prediction_events"]["metadata"]["articles_considered"] == n_articles
    con = duckdb.connect(str(isolated_home / "warehouse.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT max(updated_at) FROM raw_articles").fetchall()[0][0] == updated_before
        assert con.execute("SELECT * EXCLUDE (updated_at) FROM stories ORDER BY id").fetchall() == stories_before
    finally:
        con.close()

    status = _invoke("status")
    assert status["counts"]["raw_articles"] == n_raw
    assert {a["asset"] for a in status["assets"]} >= {"raw_articles", "articles"}
    assert all(a["last_run"] and a["last_run"]["status"] == "SUCCESS" for a in status["assets"]), status["assets"]
    assert status["feeds"] and all(f["error"] is None for f in status["feeds"])
    assert any(c["check"] == "published_matches_warehouse" and c["passed"] for c in status["checks"])
    # every check ran after its asset's last materialization, and the API would serve a complete snapshot
    assert not any(c["stale"] for c in status["checks"]) and all(c["evaluated_at"] for c in status["checks"])
    assert status["serving"]["complete"] and status["serving"]["current"].startswith(("snapshot-", "set-"))

    # What analysts do next: export a curated table, read it back with polars; query with `cryptowire sql`.
    import polars as pl

    out = isolated_home / "exports"
    out.mkdir(exist_ok=True)  # export and plot write into a directory that exists
    parquet = _invoke("export", "--table", "articles", "--format", "parquet", "--out", str(out / "a.parquet"))
    frame = pl.read_parquet(out / "a.parquet")
    assert parquet["rows"] == frame.height == n_raw
    assert frame.schema["tickers"] == pl.List(pl.String)
    _invoke("export", "--table", "prediction_events", "--format", "csv", "--out", str(out / "e.csv"))
    events_csv = pl.read_csv(out / "e.csv")
    assert events_csv.height > 0 and json.loads(events_csv["options"][0]) == ["Yes", "No"]
    rows = _invoke("sql", "SELECT source_name, count(*) AS n FROM articles GROUP BY ALL ORDER BY n DESC")
    assert sum(r["n"] for r in rows) == n_raw
    snap_rows = _invoke("sql", "--snapshot", "SELECT count(*) AS n FROM news")
    assert snap_rows == [{"n": n_raw}]
    refused = runner.invoke(app, ["sql", "DELETE FROM articles"])
    assert refused.exit_code != 0 and "read-only" in refused.output

    # Sentiment over time: the second run found nothing to recompute; the API's buckets for the most mentioned
    # ticker sum to a plain count on the warehouse, per day and per hour; the chart renders from the snapshot.
    assert by_asset["asset_sentiment"]["metadata"]["changed"] == 0
    top = _invoke("sql", """SELECT t.ticker, count(*) AS n, min(a.published_at)::DATE::VARCHAR AS lo,
                                   max(a.published_at)::DATE::VARCHAR AS hi
                            FROM article_tickers t JOIN articles a ON a.id = t.article_id
                            WHERE NOT a.date_inferred GROUP BY ALL ORDER BY n DESC, 1 LIMIT 1""")[0]
    from api.access import StaticKeys
    from api.app import create_app
    from tests.support.apiserver import ApiServer
    from warehouse.config import get_settings

    query = """query S($t: String!, $i: SentimentInterval, $s: DateTime, $u: DateTime) {
      assetSentiment(ticker: $t, interval: $i, since: $s, until: $u) { buckets { articles positive neutral negative } } }"""
    with ApiServer(create_app(get_settings(), access=StaticKeys(["k"]))) as srv:
        for interval, since in (("DAY", top["lo"]), ("HOUR", top["hi"])):
            r = httpx.post(srv.url("/crypto-news/k"), timeout=30, json={"query": query, "variables": {
                "t": top["ticker"], "i": interval, "s": since, "u": top["hi"]}})
            assert r.status_code == 200 and "errors" not in r.json(), r.text
            buckets = r.json()["data"]["assetSentiment"]["buckets"]
            counted = _invoke("sql", f"""SELECT count(*) AS n FROM article_tickers t JOIN articles a ON a.id = t.article_id
                WHERE t.ticker = '{top["ticker"]}' AND NOT a.date_inferred
                  AND a.published_at >= '{since}' AND a.published_at < '{top["hi"]}'::DATE + 1""")[0]["n"]
            assert sum(b["articles"] for b in buckets) == counted > 0, interval
            assert all(b["positive"] + b["neutral"] + b["negative"] == b["articles"] for b in buckets)
    chart = _invoke("plot", "sentiment", "--ticker", top["ticker"], "--out", str(out / "top.png"), "--since", top["lo"])
    assert chart["articles"] == top["n"] and (out / "top.png").read_bytes()[:4] == b"\x89PNG"

    # A blocking check that fails (an event id of the wrong form) fails the run, stops the snapshot and says so
    # once: the summary named no failed asset ("see assets") and listed the check twice.
    con = duckdb.connect(str(isolated_home / "warehouse.duckdb"))
    try:
        con.execute("UPDATE prediction_events SET id = 'not-an-id' WHERE id = (SELECT min(id) FROM prediction_events)")
    finally:
        con.close()
    current = (isolated_home / "snapshots" / "CURRENT").read_text()
    result = runner.invoke(app, ["materialize", "--select", "prediction_events,serving_snapshot", "--json"])
    doc = json.loads(result.output)
    assert result.exit_code == 1 and "a blocking check failed (prediction_events.id_format)" in doc["error"], doc
    assert [(c["check"], c["passed"], c["severity"]) for c in doc["checks"]
            if c["check"] == "id_format"] == [("id_format", False, "ERROR")]
    assert (isolated_home / "snapshots" / "CURRENT").read_text() == current
    # status named the check but not the rows, and advised the run that fails again (a Dagster review, s47)
    text = runner.invoke(app, ["status"]).output
    assert "FAILED prediction_events.id_format (blocking)" in text and "1 row(s), e.g. not-an-id" in text, text
    assert "BLOCKED: the blocking check prediction_events.id_format failed" in text, text


def test_materialize_rejects_unknown_asset(isolated_home: Path) -> None:
    result = runner.invoke(app, ["materialize", "--select", "no_such_asset"])
    assert result.exit_code != 0
    assert "unknown asset" in result.output and "raw_articles" in result.output


def test_status_before_anything_ran(isolated_home: Path) -> None:
    report = _invoke("status")
    assert report["exists"] is False and "materialize" in report["hint"]


def test_the_cli_imports_no_heavy_code_until_a_command_needs_it() -> None:
    """`cryptowire serve` must start fast and small: loading the CLI loads no torch, transformers or dagster."""
    code = (
        "import sys, pipeline.cli; "
        "print([m for m in ('torch', 'transformers', 'dagster', 'matplotlib', 'celery') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_step_that_opens_the_warehouse_takes_the_writer_pool() -> None:
    """DuckDB refuses a second process while one writes, readers included: a check run beside a writer step of a
    daemon's multiprocess run failed with WarehouseLocked and held back the snapshot (a review on 2026-11-27)."""
    from pipeline.assets.ingest import POOL
    from pipeline.definitions import build_definitions

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    opens = {"warehouse"}  # the resource that connects to the warehouse file
    steps = [*graph.assets_defs, *defs.asset_checks]
    using = [s for s in steps if opens & set(s.required_resource_keys)]
    assert using and all(s.node_def.pool == POOL for s in using), [
        s.node_def.name for s in using if s.node_def.pool != POOL
    ]
