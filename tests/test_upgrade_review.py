"""From a review that upgraded data homes made by older commits to the newest code (s42): what the first commands
after a pull did on such a home. Real DuckDB files built with the project's own migrations, the real CLI in
processes of its own (each with its own environment), no mocks.

- `status` on a warehouse from before migration 0005 died in a BinderException (`withdrawn_at`), `--json` printed
  nothing; it now reports, migrating nothing, and says what an upgrade left to do: migrations pending, articles
  scored or tagged by another model or tagger version, with the command that does it.
- a snapshot set of a newer format was taken for damage: `doctor` and `materialize` pointed CURRENT back at an older
  set. A warehouse a newer cryptowire migrated was opened read-write and written.
- `export` of a documented table an old warehouse lacks: a DuckDB traceback (or a parser error for CSV).
- `keys list` and `usage` on a data home that does not exist created it and said "no keys yet".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.support.newsdata import Data, build, make_articles, make_events
from warehouse import db

CLI = str(Path(sys.executable).parent / "cryptowire")
OLD_MODEL, OLD_TAGGER = "da65c4de96f9", "8513d1aaaa58c24e"  # what commit 789df36 scored and tagged with


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    return {**env, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "false", "CRYPTOWIRE_PRICE_SOURCE_URL": ""}


def _run(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], env=_env(home), capture_output=True, text=True, timeout=300, cwd=cwd)


def _old_warehouse(path: Path, before: int, articles: int = 3) -> None:
    """A warehouse as a cryptowire whose last migration was ``before - 1`` left it: those migrations applied with
    the project's own files, ``articles`` articles scored and tagged by an older model and tagger, one event."""
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP)")
        for version, name, sql in db.migrations():
            if version < before:
                con.execute(sql)
                con.execute("INSERT INTO schema_migrations VALUES (?, ?, now()::TIMESTAMP)", [version, name])
        for i in range(articles):
            con.execute(
                """INSERT INTO raw_articles VALUES (?, 'CoinDesk', 'https://feeds.example/rss', ?, NULL, ?, '', NULL,
                   [], [], NULL, ?, false, ?, ?, 'en', ?)""",
                [f"a_{i:016x}", f"https://news.example/{i}", f"Bitcoin headline {i}", datetime(2024, 12, 3, 8, i),
                 datetime(2024, 12, 3, 9), datetime(2024, 12, 3, 9), f"h{i}"],
            )
        con.execute(
            """INSERT INTO articles (id, source_name, feed_url, url, title, summary, content_html, authors, categories,
                   image_url, published_at, fetched_at, language, content_hash, sentiment, sentiment_score,
                   model_version, enriched_at, tickers, topics, tagger_version, tagged_at)
               SELECT id, source_name, feed_url, url, title, summary, content_html, authors, categories, image_url,
                   published_at, fetched_at, language, content_hash, 'positive', 0.5, ?, fetched_at, ['BTC'], [], ?,
                   fetched_at FROM raw_articles""",
            [OLD_MODEL, OLD_TAGGER],
        )
        # written after the snapshot below was published: status shows it as BEHIND
        con.execute(
            """INSERT INTO prediction_events VALUES ('pevt_AAAAAAAAAAAAAAAAAAAA', 'Will Bitcoin close above $100,000?',
                   'd', NULL, NULL, 'a_0000000000000000', '2024-12-03 08:00', '2024-12-03 10:00', '2024-12-03 10:00',
                   '2025-01-01', ['Yes', 'No'], ['BTC'], 'BTC', 'price_threshold', NULL, 'above', 100000, 'USD',
                   'r', 's', 'open')"""
        )
    finally:
        con.close()


def _single_file_snapshot(snapshots: Path, created: datetime) -> str:
    """A published single-file snapshot (the layout those commits served), named by ``CURRENT``."""
    snapshots.mkdir(parents=True)
    name = f"snapshot-{created:%Y%m%dT%H%M%S%f}Z-abc123.duckdb"
    con = duckdb.connect(str(snapshots / name))
    con.execute("CREATE TABLE snapshot_info AS SELECT 'oldtag' AS tag, ?::TIMESTAMP AS created_at", [created])
    con.close()
    (snapshots / "CURRENT").write_text(name + "\n")
    return name


def _latest() -> int:
    return max(version for version, _, _ in db.migrations())


def _versions(path: Path) -> list[int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]
    finally:
        con.close()


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    return lines[0]


# 1 and 5: status on a home an older cryptowire made


def test_status_on_a_warehouse_from_before_migration_0005_reports_what_the_upgrade_left(data_home: Path) -> None:
    from models.sentiment.model import int8_model_version
    from models.tagging import get_tagger

    data_home.mkdir()
    warehouse = data_home / "warehouse.duckdb"
    _old_warehouse(warehouse, before=5, articles=3)
    served = _single_file_snapshot(data_home / "snapshots", datetime(2024, 12, 3, 9, 30))
    pending = [name for version, name, _ in db.migrations() if version >= 5]

    got = _run(data_home, "status", "--json")
    assert got.returncode == 0, got.stderr[-3000:]
    assert "Traceback" not in got.stderr, got.stderr[-3000:]
    report: dict[str, Any] = json.loads(got.stdout)
    upgrade = report["upgrade"]
    assert upgrade["pending_migrations"] == pending, upgrade
    assert upgrade["latest_migration"] == _latest()
    assert "newer_migrations" not in upgrade
    # the shipped versions, as `articles` compares them (pipeline.enrich), and the articles of other versions
    assert upgrade["model_version"] == int8_model_version() != OLD_MODEL
    assert upgrade["tagger_version"] == get_tagger().version != OLD_TAGGER
    assert (upgrade["articles_other_model"], upgrade["articles_other_tagger"]) == (3, 3), upgrade
    steps = upgrade["steps"]
    assert len(steps) == 3, steps
    assert steps[0].startswith(f"{len(pending)} schema migrations pending ({pending[0]} to {pending[-1]}): ")
    assert "the next `cryptowire materialize` applies them" in steps[0]
    assert f"3 of 3 articles not scored by the shipped sentiment model ({int8_model_version()})" in steps[1]
    assert "the next `cryptowire materialize` re-scores them" in steps[1]
    assert f"3 of 3 articles not tagged by the shipped tagger ({get_tagger().version})" in steps[2]
    assert "the next `cryptowire materialize` re-tags them" in steps[2]
    # the served snapshot and what it lacks, with the columns this warehouse has (no withdrawn_at before 0005)
    assert report["serving"]["current"] == served and report["serving"]["complete"], report["serving"]
    assert report["serving"]["behind"] == {"prediction_events": 1}, report["serving"]

    text = _run(data_home, "status")
    assert text.returncode == 0, text.stderr[-3000:]
    lines = text.stdout.splitlines()
    at = lines.index("UPGRADE PENDING:")
    assert lines[at + 1:at + 4] == [f"  {step}" for step in steps], text.stdout
    assert "BEHIND" in text.stdout

    assert _versions(warehouse) == [1, 2, 3, 4]  # status only reads: nothing was migrated


def test_status_of_an_up_to_date_warehouse_shows_no_upgrade(data_home: Path) -> None:
    """Once materialize has run (migrations applied, articles of the shipped versions) nothing is said."""
    from models.sentiment.model import int8_model_version
    from models.tagging import get_tagger

    data_home.mkdir()
    con = db.connect(data_home / "warehouse.duckdb")
    con.execute("INSERT INTO articles (id, source_name, feed_url, title, summary, authors, categories, published_at, "
                "fetched_at, content_hash, model_version, tagger_version) VALUES ('a1', 's', 'f', 't', '', [], [], "
                "now()::TIMESTAMP, now()::TIMESTAMP, 'h', ?, ?)", [int8_model_version(), get_tagger().version])
    con.close()
    got = _run(data_home, "status", "--json")
    assert got.returncode == 0, got.stderr[-3000:]
    upgrade = json.loads(got.stdout)["upgrade"]
    assert upgrade["pending_migrations"] == [] and upgrade["steps"] == [], upgrade
    assert (upgrade["articles_other_model"], upgrade["articles_other_tagger"]) == (0, 0)
    assert "UPGRADE" not in _run(data_home, "status").stdout


# 2a: a snapshot set written by a newer cryptowire


def _two_sets(home: Path) -> tuple[Path, Path]:
    """Two published sets (the newest named by CURRENT)."""
    from warehouse.parts import publish_set
    from warehouse.published import current_snapshot

    home.mkdir()
    first = build(home, Data(make_articles(20, 2), make_events(3)), parts=True)
    con = db.connect(home / "warehouse.duckdb")
    try:
        con.execute("UPDATE articles SET fetched_at = now()::TIMESTAMP WHERE id = (SELECT min(id) FROM articles)")
        second = publish_set(con, home / "snapshots")
    finally:
        con.close()
    assert current_snapshot(home / "snapshots") == second != first
    return first, second


def _rewrite(manifest: Path, **changes: Any) -> None:
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, **changes}))


def test_a_set_of_a_newer_format_is_refused_never_rolled_back(data_home: Path) -> None:
    from warehouse.parts import SET_FORMAT, publish_set

    first, second = _two_sets(data_home)
    _rewrite(second, format=SET_FORMAT + 1)  # what a newer cryptowire publishes
    pointer = data_home / "snapshots" / "CURRENT"
    before = sorted(p.name for p in (data_home / "snapshots").iterdir())
    said = (f"the snapshot set {second.name} was written by a newer cryptowire (format {SET_FORMAT + 1}; this one "
            f"reads up to {SET_FORMAT}): upgrade cryptowire")

    for args in (["doctor", "--check"], ["doctor"], ["materialize"]):
        got = _run(data_home, *args)
        assert got.returncode == 1, (args, got.stdout, got.stderr[-3000:])
        assert _one_error_line(got.stderr) == f"error: {said}", args
        assert "repaired" not in got.stdout + got.stderr and "pointed" not in got.stdout + got.stderr
        assert pointer.read_text().strip() == second.name, args  # not rolled back to the older set
    got = _run(data_home, "doctor", "--json")
    assert got.returncode == 1 and json.loads(got.stdout) == {"error": said, "exitCode": 1}, got.stdout
    assert sorted(p.name for p in (data_home / "snapshots").iterdir() if p.name != ".publish.lock") == [
        n for n in before if n != ".publish.lock"]  # no part taken for an orphan either

    # status says so (it showed "NOT SERVABLE ... run `cryptowire doctor`", which rolled it back)
    got = _run(data_home, "status", "--json")
    assert got.returncode == 0, got.stderr[-3000:]
    serving = json.loads(got.stdout)["serving"]
    assert serving["current"] == second.name and serving["problem"] == said and serving["newer"], serving
    assert "doctor" not in _run(data_home, "status").stdout.split("serving snapshot:")[1].splitlines()[0]
    # and so do the snapshot's readers (they called its manifest damaged and sent the user to doctor: s47)
    for args in (["sql", "--snapshot", "SELECT count(*) FROM news"], ["plot", "sentiment", "--ticker", "BTC",
                                                                        "--out", str(data_home / "c.png")]):
        got = _run(data_home, *args)
        assert got.returncode == 1 and _one_error_line(got.stderr) == f"error: {said}", (args, got.stderr[-2000:])

    # a scheduled run's publish (no repair before it) does not publish over it either
    from warehouse.parts import NewerFormat

    con = db.connect(data_home / "warehouse.duckdb")
    try:
        with pytest.raises(NewerFormat):
            publish_set(con, data_home / "snapshots")
    finally:
        con.close()
    assert pointer.read_text().strip() == second.name


def test_a_damaged_manifest_is_still_repaired(data_home: Path) -> None:
    """Unreadable JSON, or a format no cryptowire wrote: damage, repaired as before (CURRENT to the older set)."""
    first, second = _two_sets(data_home)
    pointer = data_home / "snapshots" / "CURRENT"
    for damage in ("{\"format\": 3, \"parts\": [", json.dumps({"format": "three", "parts": []})):
        second.write_text(damage)
        pointer.write_text(second.name + "\n")
        got = _run(data_home, "doctor")
        assert got.returncode == 0, got.stderr[-3000:]
        assert f"pointed it at {first.name}" in got.stdout, got.stdout
        assert pointer.read_text().strip() == first.name


# 2b: a warehouse a newer cryptowire migrated


def test_a_warehouse_of_a_newer_schema_is_not_opened_read_write(data_home: Path) -> None:
    data_home.mkdir()
    warehouse = data_home / "warehouse.duckdb"
    db.connect(warehouse).close()
    con = duckdb.connect(str(warehouse))
    con.execute("INSERT INTO schema_migrations VALUES (99, '0099_future', now()::TIMESTAMP)")
    con.close()
    known = _latest()
    said = f"has schema version 99, newer than this cryptowire knows ({known}): upgrade cryptowire"

    with pytest.raises(ValueError, match=r"newer than this cryptowire knows") as raised:
        db.connect(warehouse)
    assert type(raised.value).__name__ == "WarehouseTooNew"
    duckdb.connect(str(warehouse)).close()  # the refused open let go of the file
    db.connect(warehouse, read_only=True).close()  # analysts go on reading it

    got = _run(data_home, "materialize")
    assert got.returncode == 1, got.stderr[-3000:]
    line = _one_error_line(got.stderr)
    assert line.startswith(f"error: the warehouse {warehouse} {said}"), line
    assert _versions(warehouse) == [*range(1, known + 1), 99]  # nothing applied, nothing written

    got = _run(data_home, "status", "--json")
    assert got.returncode == 0, got.stderr[-3000:]
    upgrade = json.loads(got.stdout)["upgrade"]
    assert upgrade["newer_migrations"] == [99] and len(upgrade["steps"]) == 1, upgrade
    assert f"schema version 99, newer than this cryptowire knows ({known}): upgrade cryptowire" in upgrade["steps"][0]
    got = _run(data_home, "sql", "SELECT max(version) AS v FROM schema_migrations", "--json")
    assert got.returncode == 0 and "99" in got.stdout, got.stderr[-3000:]


# 3: export of a documented table an old warehouse lacks


@pytest.mark.parametrize(("table", "out"), [("stories", "stories.parquet"), ("story_merges", "merges.csv")])
def test_export_of_a_table_an_old_warehouse_lacks(data_home: Path, tmp_path: Path, table: str, out: str) -> None:
    data_home.mkdir()
    _old_warehouse(data_home / "warehouse.duckdb", before=5)
    target = tmp_path / out
    said = (f"error: the table {table} does not exist in this warehouse ({data_home / 'warehouse.duckdb'}) yet: it "
            "was made by an older cryptowire; run `cryptowire materialize`")

    got = _run(data_home, "export", "--table", table, "--out", str(target))
    assert got.returncode == 1, got.stderr[-3000:]
    assert _one_error_line(got.stderr).startswith(said)
    got = _run(data_home, "export", "--table", table, "--out", str(target), "--json")
    assert got.returncode == 1, got.stderr[-3000:]
    doc = json.loads(got.stdout)
    assert doc["exitCode"] == 1 and ("error: " + doc["error"]).startswith(said), doc
    assert not target.exists() and not any(tmp_path.glob(f".{out}*"))  # nothing written, no partial left

    got = _run(data_home, "export", "--table", "articles", "--out", str(tmp_path / "articles.csv"))
    assert got.returncode == 0 and "wrote 3 rows of articles" in got.stdout, got.stderr[-3000:]
    assert _versions(data_home / "warehouse.duckdb") == [1, 2, 3, 4]  # export only reads


# 6: keys and usage on a data home that does not exist


def test_keys_and_usage_on_a_missing_home_create_nothing(data_home: Path, tmp_path: Path) -> None:
    assert not data_home.exists()
    where = f"no data home at {data_home.resolve()}, so "
    # listing: said as status says it (exit 0), nothing created; --json still gets its (empty) document
    for args in (["keys", "list"], ["usage"]):
        got = _run(data_home, *args)
        assert got.returncode == 0, (args, got.stdout, got.stderr[-3000:])
        assert got.stdout.startswith(where + "no keys yet: point CRYPTOWIRE_HOME at your data home"), got.stdout
        assert len(got.stdout.splitlines()) == 1, got.stdout
        got = _run(data_home, *args, "--json")
        assert got.returncode == 0 and json.loads(got.stdout) == [], (args, got.stdout)
        assert got.stderr.startswith(where + "no keys yet: ") and "CRYPTOWIRE_HOME" in got.stderr, got.stderr
        assert not data_home.exists(), args  # created nothing (it created the home and platform.sqlite)
    # a command about one key: an error, nothing created
    for args in (["keys", "revoke", "k_x"], ["keys", "rotate", "k_x"], ["keys", "set-plan", "k_x", "pro"],
                 ["usage", "k_x"]):
        got = _run(data_home, *args)
        assert got.returncode == 1, (args, got.stdout, got.stderr[-3000:])
        line = _one_error_line(got.stderr)
        assert line.startswith(f"error: {where}no key 'k_x'") and "CRYPTOWIRE_HOME" in line, line
        got = _run(data_home, *args, "--json")
        assert got.returncode == 1 and json.loads(got.stdout)["error"] == line.removeprefix("error: "), got.stdout
        assert not data_home.exists(), args

    # the default home, ./.cryptowire, is relative to where the command runs: said with its absolute path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in _env(data_home).items() if k != "CRYPTOWIRE_HOME"}
    got = subprocess.run([CLI, "keys", "list"], env=env, capture_output=True, text=True, timeout=120, cwd=elsewhere)
    assert got.returncode == 0 and got.stdout.startswith(f"no data home at {elsewhere / '.cryptowire'}"), got.stdout
    assert not (elsewhere / ".cryptowire").exists()

    # keys create starts a data home, as the docs say; then list and usage show its key
    got = _run(data_home, "keys", "create", "--plan", "free", "--name", "first", "--json")
    assert got.returncode == 0, got.stderr[-3000:]
    key_id = json.loads(got.stdout)["id"]
    assert (data_home / "platform.sqlite").is_file()
    got = _run(data_home, "keys", "list", "--json")
    assert got.returncode == 0 and [k["id"] for k in json.loads(got.stdout)] == [key_id], got.stdout
    got = _run(data_home, "usage", "--json")
    assert got.returncode == 0 and [r["id"] for r in json.loads(got.stdout)] == [key_id], got.stdout
