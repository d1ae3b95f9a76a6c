"""Analyst commands from an analyst-level review: `plot` choosing its interval (and the README's examples running as
written), `sql` refusing writes and reading in UTC in both modes, `sql --json` always valid JSON, clean errors for an
--out that cannot be written, `connect_snapshot` taking a str, and the chart's title naming the days shown."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import matplotlib
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.support.newsdata import Data, build, make_articles
from warehouse.config import PROJECT_ROOT
from warehouse.parts import connect_snapshot
from warehouse.published import current_snapshot

runner = CliRunner()
NEWEST = datetime(2026, 11, 20, 8, 0)  # as the bundled sample: its newest dated article is of 2026-11-20


def _cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.output


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`cryptowire` in its own process, for what is read at start-up (TZ)."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=PROJECT_ROOT,
                          env={**os.environ, **env}, timeout=120)


@pytest.fixture(params=[True, False], ids=["set", "single-file"])
def home(data_home: Path, request: pytest.FixtureRequest) -> Path:
    """A real warehouse of 60 articles up to 2026-11-20 08:00 and its snapshot, a set of parts or a single file."""
    build(data_home, Data(make_articles(60, 0, start=NEWEST), []), parts=request.param)
    return data_home


# --- plot: the interval, the README's examples, the title ------------------------------------------------------
def test_readme_plot_examples_run_as_written(home: Path, tmp_path: Path) -> None:
    readme = (PROJECT_ROOT / "README.md").read_text()
    examples = [shlex.split(line, comments=True)[1:] for line in readme.splitlines()
                if line.startswith(".venv/bin/cryptowire plot ")]
    assert len(examples) >= 2
    for args in examples:
        args[args.index("--out") + 1] = str(tmp_path / args[args.index("--out") + 1])
        code, out = _cli(*args)
        assert code == 0, (args, out)
    assert (tmp_path / "btc-since.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_picks_the_finest_interval_that_fits_unless_told(home: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "c.png")
    for since, interval in (("2026-11-10", "hour"), ("2026-01-01", "day"), ("2024-11-01", "week")):
        code, text = _cli("plot", "sentiment", "--ticker", "BTC", "--out", out, "--since", since)
        assert code == 0, text
        assert f"per {interval} (no --interval: the finest whose buckets fit the range)" in text, text
        code, text = _cli("plot", "sentiment", "--ticker", "BTC", "--out", out, "--since", since, "--json")
        assert code == 0 and json.loads(text)["interval"] == interval.upper(), text
    code, text = _cli("plot", "sentiment", "--ticker", "BTC", "--out", out)  # without --since: 30 days per day
    assert code == 0 and "per day (no --interval: the default without --since)" in text, text

    # Told an interval too fine for the range: an error naming the one that fits.
    code, text = _cli("plot", "sentiment", "--ticker", "BTC", "--out", out, "--interval", "day", "--since",
                      "2024-11-01")
    assert code == 1, text
    assert "holds 750" in text and "--interval week fits this range, or leave out --interval to pick it" in text
    code, text = _cli("plot", "sentiment", "--ticker", "BTC", "--out", out, "--interval", "hour", "--since",
                      "2026-01-01")
    assert code == 1 and "--interval day fits this range" in text, text
    code, text = _cli("plot", "sentiment", "--ticker", "BTC", "--out", out, "--since", "2016-01-01")
    assert code == 1 and "interval WEEK returns at most 262 buckets" in text and "fits this range" not in text


def test_plot_title_names_the_last_day_shown_not_the_exclusive_end(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(matplotlib.rcParams, "svg.fonttype", "none")  # the title as text in the SVG
    out = tmp_path / "c.svg"
    code, text = _cli("plot", "sentiment", "--ticker", "BTC", "--out", str(out), "--interval", "day", "--since",
                      "2026-11-18", "--until", "2026-11-19")
    assert code == 0, text
    assert "(2026-11-18 to 2026-11-19, UTC)" in text, text
    assert "sentiment per day (UTC), 2026-11-18 to 2026-11-19<" in out.read_text()
    code, text = _cli("plot", "sentiment", "--ticker", "BTC", "--out", str(out), "--interval", "week")
    assert code == 0, text
    assert "to 2026-11-22</" in out.read_text()  # the week of 2026-11-20 ends on Sunday the 22nd


# --- sql: read-only and UTC in both modes --------------------------------------------------------------------------
REFUSED = [
    "DELETE FROM {sentiment}",
    "CREATE TABLE t AS SELECT 1",
    "ATTACH '{attach}' AS n",
    "COPY (SELECT 1) TO '{copy}'",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{copy}'",
    "EXPLAIN ANALYZE DELETE FROM {sentiment}",
    "WITH d AS (DELETE FROM {sentiment} RETURNING *) SELECT count(*) FROM d",
    "SET TimeZone = 'America/New_York'",
    "PRAGMA table_info('{news}')",
    "INSTALL json",  # DuckDB types it LOAD: the refusal names both
    "UPDATE EXTENSIONS",  # a statement type the Python API has no name for: refused, not a traceback
]
READ = [
    "SELECT count(*) FROM {news}",
    "WITH n AS (SELECT * FROM {news}) SELECT count(*) FROM n",
    "FROM {sentiment} LIMIT 1",
    "DESCRIBE {news}",
    "SHOW TABLES",
    "SUMMARIZE {sentiment}",
    "EXPLAIN SELECT count(*) FROM {news}",
    "EXPLAIN ANALYZE SELECT count(*) FROM {news}",
    "SELECT * FROM pragma_table_info('{news}')",
]


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "warehouse"])
def test_sql_refuses_what_writes_and_runs_what_reads_in_both_modes(home: Path, tmp_path: Path, snapshot: bool) -> None:
    mode = ["--snapshot"] if snapshot else []
    names = {"news": "news" if snapshot else "articles", "sentiment": "sentiment" if snapshot else "asset_sentiment",
             "attach": tmp_path / "new.duckdb", "copy": tmp_path / "out.csv"}
    count = f"SELECT count(*) AS n FROM {names['sentiment']}"
    code, out = _cli("sql", count, "--json", *mode)
    before = json.loads(out)[0]["n"]
    assert code == 0 and before > 0, out
    for query in REFUSED:
        code, out = _cli("sql", query.format(**names), *mode)
        assert code == 1, (query, out)
        assert out.startswith("error: cryptowire sql is read-only and does not run ") and out.count("\n") == 1, out
        assert "use one that reads" in out or "as a table function in a SELECT" in out, out
    assert not (tmp_path / "new.duckdb").exists() and not (tmp_path / "out.csv").exists()
    assert json.loads(_cli("sql", count, "--json", *mode)[1])[0]["n"] == before
    for query in READ:
        code, out = _cli("sql", query.format(**names), *mode)
        assert code == 0, (query, out)


def test_sql_and_snapshot_readers_use_utc_whatever_the_machines_zone(home: Path) -> None:
    env = {"CRYPTOWIRE_HOME": str(home), "TZ": "America/New_York"}
    query = "SELECT current_setting('TimeZone') AS tz, TIMESTAMP '2024-01-01 00:00'::TIMESTAMPTZ AS at"
    for mode in (["--snapshot"], []):
        res = _run(["-m", "pipeline.cli", "sql", query, "--json", *mode], env)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == [{"tz": "UTC", "at": "2024-01-01T00:00:00+00:00"}], mode
    # Every reader of the snapshot, the API's cursors included.
    path = current_snapshot(home / "snapshots")
    script = ("import sys; from warehouse.parts import connect_snapshot; con = connect_snapshot(sys.argv[1]); "
              "print(con.cursor().sql(\"SELECT current_setting('TimeZone')\").fetchall()[0][0])")
    res = _run(["-c", script, str(path)], env)
    assert res.returncode == 0 and res.stdout.strip() == "UTC", res.stderr


# --- sql --json: valid JSON for every type ---------------------------------------------------------------------
def test_sql_json_is_valid_json_for_every_type(home: Path) -> None:
    code, out = _cli("sql", "SELECT ticker, articles * 0.5 AS half FROM asset_sentiment ORDER BY ALL LIMIT 1", "--json")
    assert code == 0, out
    assert isinstance(json.loads(out)[0]["half"], float)
    query = """SELECT 1.25::DECIMAL(5, 2) AS dec, INTERVAL 90 MINUTE AS iv, '\\xAA\\x00'::BLOB AS blob,
                      '0f8fad5b-d9cb-469f-a165-70867728950e'::UUID AS id, TIME '12:34:56' AS t, DATE '2024-01-02' AS d,
                      'nan'::DOUBLE AS nan, 'inf'::FLOAT AS inf, ['-inf'::DOUBLE, 2.5] AS list,
                      {'a': 'nan'::DOUBLE, 'b': 1.5::DECIMAL(3, 1)} AS struct, MAP {DATE '2024-01-01': 1} AS map"""
    for mode in (["--snapshot"], []):
        code, out = _cli("sql", query, "--json", *mode)
        assert code == 0, out

        def no_constant(name: str) -> None:
            raise AssertionError(f"{name} is not JSON")

        assert json.loads(out, parse_constant=no_constant) == [{
            "dec": 1.25, "iv": 5400.0, "blob": "qgA=", "id": "0f8fad5b-d9cb-469f-a165-70867728950e", "t": "12:34:56",
            "d": "2024-01-02", "nan": None, "inf": None, "list": [None, 2.5], "struct": {"a": None, "b": 1.5},
            "map": {"2024-01-01": 1},
        }]
    code, out = _cli("sql", "--help")
    help_text = " ".join(out.split())
    assert "DECIMAL as a number, INTERVAL as seconds, BLOB as base64" in help_text, out


# --- --out that cannot be written ------------------------------------------------------------------------------
def test_an_out_that_cannot_be_written_is_one_error_line(home: Path, tmp_path: Path) -> None:
    taken = tmp_path / "ex"
    (taken / "dir.png").mkdir(parents=True)
    cases = [
        (["export", "--table", "stories", "--out", str(taken)],
         f"error: --out {taken} is a directory: name the file to write, e.g. --out {taken / 'stories.parquet'}"),
        (["plot", "sentiment", "--ticker", "BTC", "--out", str(taken / "dir.png")],
         f"error: --out {taken / 'dir.png'} is a directory: name the file to write, e.g. --out "
         f"{taken / 'dir.png' / 'btc.png'}"),
    ]
    if Path("/proc/self").is_dir():  # a directory no one can create files in, not even root
        cases += [
            (["export", "--table", "stories", "--out", "/proc/x.parquet"],
             "error: --out /proc/x.parquet: cannot write it ("),
            (["plot", "sentiment", "--ticker", "BTC", "--out", "/proc/x.png"], "error: --out /proc/x.png: cannot write it ("),
        ]
    for args, message in cases:
        code, out = _cli(*args)
        assert code == 1 and out.startswith(message) and out.count("\n") == 1, (args, out)
        assert re.search(r"\): name a file in a directory you can write to$|\.(parquet|png)$", out.strip()), out


# --- connect_snapshot ------------------------------------------------------------------------------------------
def test_connect_snapshot_takes_a_str_or_a_path(home: Path) -> None:
    path = current_snapshot(home / "snapshots")
    assert path is not None
    for given in (path, str(path)):
        with connect_snapshot(given) as con:
            assert con.sql("SELECT count(*) FROM news").fetchall() == [(60,)]
