"""CLI fixes from a user-level review: flags shown without a value type and help text wrapped by the terminal,
`export` of every table README.md names, `sql --snapshot` naming the snapshot's tables, `sql` refusing an empty or
multi-statement query, and `export` / `plot` refusing an --out in a missing directory or with a suffix that
contradicts the format."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
import typer.main
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.commands.export import TABLES
from tests.support.newsdata import Data, build, make_articles
from warehouse.config import PROJECT_ROOT
from warehouse.db import connect

runner = CliRunner()


def _cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.output


def _command_paths() -> list[list[str]]:
    """Every command and group of `cryptowire`, e.g. ["keys", "set-plan"], the root ([]) included."""

    def walk(cmd: object, path: list[str]) -> list[list[str]]:
        subs = getattr(cmd, "commands", {})
        return [path, *(p for name, sub in subs.items() for p in walk(sub, [*path, name]))]

    return walk(typer.main.get_command(app), [])


# --- help --------------------------------------------------------------------------------------------------------
def test_help_shows_flags_without_a_value_type_and_wraps_at_the_terminal(
    data_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # Click wraps help at the terminal's width less 2
    width = 78
    for path in _command_paths():
        code, out = _cli(*path, "--help")
        assert code == 0, (path, out)
        assert "<bool>" not in out, (path, out)
        assert re.search(r"^  --help {2,}Show this message and exit\.$", out, flags=re.M), (path, out)
        # The description (between the usage line and the first section) is wrapped greedily: no line could
        # have taken the next line's first word, as happens when a docstring's own line breaks are kept.
        lines = out.splitlines()
        end = next(i for i, line in enumerate(lines) if line in ("Arguments:", "Options:", "Commands:"))
        for line, after in zip(lines[1:end], lines[2:end], strict=False):
            if line.strip() and after.strip():
                assert len(line) + 1 + len(after.split()[0]) > width, (path, line, after)

    code, out = _cli("status", "--help")
    assert re.search(r"^  --json {2,}Print the result as JSON", out, flags=re.M), out
    code, out = _cli("sentiment", "eval", "--help")
    assert "--baselines / --no-baselines  Also measure" in out, out


# --- export ------------------------------------------------------------------------------------------------------
@pytest.fixture
def published(data_home: Path) -> Path:
    """A real warehouse (migrated, 60 articles, one story of two of them) and its published snapshot."""
    data = Data(make_articles(60, 0), [])
    build(data_home, data)
    con = connect(data_home / "warehouse.duckdb")
    try:
        first, second = data.articles[0], data.articles[1]
        con.execute("""INSERT INTO stories VALUES ('st_one', 'A story', ?, ?, 2, 2, 0.5, ['BTC', 'ETH'], ['markets'],
                       now())""", [second["published_at"], first["published_at"]])
        for a in (first, second):
            con.execute("INSERT INTO story_articles VALUES (?, 'st_one', ?, now())", [a["id"], a["published_at"]])
    finally:
        con.close()
    return data_home


def test_export_takes_every_table_readme_names(published: Path, tmp_path: Path) -> None:
    readme = (PROJECT_ROOT / "README.md").read_text()
    paragraph = readme[readme.index("Every curated table is in the warehouse"):readme.index("DuckDB lets one")]
    con = duckdb.connect(str(published / "warehouse.duckdb"), read_only=True)
    try:
        warehouse_tables = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables")
                            .fetchall()}
    finally:
        con.close()
    assert set(re.findall(r"`(\w+)`", paragraph)) & warehouse_tables == set(TABLES)

    for table in TABLES:
        code, out = _cli("export", "--table", table, "--out", str(tmp_path / f"{table}.parquet"))
        assert code == 0 and f"of {table} to" in out, out
    assert pl.read_parquet(tmp_path / "story_articles.parquet").height == 2
    code, out = _cli("export", "--table", "stories", "--out", str(tmp_path / "stories.csv"), "--json")
    assert code == 0, out
    assert json.loads(out)["format"] == "csv" and json.loads(out)["rows"] == 1
    assert json.loads(pl.read_csv(tmp_path / "stories.csv")["tickers"][0]) == ["BTC", "ETH"]

    code, out = _cli("export", "--table", "articles; DROP TABLE articles", "--out", str(tmp_path / "x.parquet"))
    assert code == 2 and "unknown table" in out and "stories" in out and "Usage:" in out, out
    code, out = _cli("export", "--table", "articles", "--out", str(tmp_path / "x.bin"), "--format", "xml")
    assert code == 2 and "unknown format 'xml'" in out and "Usage:" in out, out


def test_export_refuses_a_missing_directory_and_a_suffix_that_contradicts_the_format(
    published: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "missing" / "dir"
    code, out = _cli("export", "--table", "articles", "--out", str(missing / "a.parquet"))
    assert code == 1, out
    assert f"the directory {missing} does not exist; create it first (mkdir -p {missing})" in out
    assert not (tmp_path / "missing").exists()
    (tmp_path / "file").write_text("")
    code, out = _cli("export", "--table", "articles", "--out", str(tmp_path / "file" / "a.parquet"))
    assert code == 1 and f"{tmp_path / 'file'} is not a directory" in out, out

    code, out = _cli("export", "--table", "articles", "--format", "csv", "--out", str(tmp_path / "a.parquet"))
    assert code == 1, out
    assert "--format csv but --out" in out and "name it a.csv, or leave out --format" in out
    code, out = _cli("export", "--table", "articles", "--format", "parquet", "--out", str(tmp_path / "a.CSV"))
    assert code == 1 and "name it a.parquet" in out, out
    assert list(tmp_path.glob("a.*")) == []

    # Without --format, the suffix chooses; an unknown or no suffix is Parquet, the default.
    for name, magic in (("a.csv", b"id,"), ("a.parquet", b"PAR1"), ("a.data", b"PAR1"), ("a", b"PAR1")):
        code, out = _cli("export", "--table", "articles", "--out", str(tmp_path / name))
        assert code == 0, out
        assert (tmp_path / name).read_bytes().startswith(magic), name
    # --format agreeing with the suffix, and a quote in the path (the path is an SQL string literal)
    quoted = tmp_path / "it's"
    quoted.mkdir()
    code, out = _cli("export", "--table", "articles", "--format", "csv", "--out", str(quoted / "a.csv"))
    assert code == 0 and pl.read_csv(quoted / "a.csv").height == 60, out


# --- sql ---------------------------------------------------------------------------------------------------------
def test_sql_snapshot_help_names_every_table_of_a_snapshot(published: Path) -> None:
    code, out = _cli("sql", "--snapshot", "SELECT name FROM (SHOW TABLES) ORDER BY name", "--json")
    assert code == 0, out
    tables = [row["name"] for row in json.loads(out)]
    assert {"news", "events", "stories", "sentiment"} <= set(tables)
    code, out = _cli("sql", "--help")
    described = " ".join(out[out.index("--snapshot"):out.index("--json")].split())
    assert all(re.search(rf"\b{t}\b", described) for t in tables), (tables, described)


@pytest.mark.parametrize("query", ["", "   ", "/* only a comment */", ";"])
def test_sql_refuses_an_empty_statement(data_home: Path, query: str) -> None:
    code, out = _cli("sql", query)
    assert code == 1, out
    assert 'the statement is empty: pass one SQL statement, e.g. cryptowire sql "SELECT count(*) FROM articles"' in out
    code, out = _cli("sql", "--snapshot", query)
    assert code == 1 and 'cryptowire sql --snapshot "SELECT count(*) FROM news"' in out, out


def test_sql_refuses_more_than_one_statement(published: Path) -> None:
    code, out = _cli("sql", "SELECT 1; SELECT 2")
    assert code == 1, out
    assert "2 SQL statements given: run them one at a time" in out and "│" not in out
    code, out = _cli("sql", "SELECT 1 AS a; SELECT 2 AS b;", "--snapshot")
    assert code == 1 and "2 SQL statements given" in out, out
    code, out = _cli("sql", "SELECT 'a;b' AS x;", "--json")  # one statement, a trailing ';'
    assert code == 0 and json.loads(out) == [{"x": "a;b"}], out
    code, out = _cli("sql", "SELEC 1")
    assert code == 1 and "syntax error" in out, out


# --- plot --------------------------------------------------------------------------------------------------------
def test_plot_writes_the_format_its_suffix_names_and_refuses_others(published: Path, tmp_path: Path) -> None:
    since = ["--ticker", "BTC", "--since", "2024-11-01"]
    for name, magic in (("c.png", b"\x89PNG"), ("c.svg", b"<?xml"), ("c.PDF", b"%PDF")):
        code, out = _cli("plot", "sentiment", *since, "--out", str(tmp_path / name))
        assert code == 0, out
        assert (tmp_path / name).read_bytes().startswith(magic), name

    for name in ("c.jpg", "c"):
        code, out = _cli("plot", "sentiment", *since, "--out", str(tmp_path / name))
        assert code == 2, out  # a mistake in the command line: the usage, as for the other options
        assert f"{tmp_path / name}: name a .png, .svg or .pdf file" in " ".join(out.split()) and "Usage:" in out
        assert not (tmp_path / name).exists()
    missing = tmp_path / "missing"
    code, out = _cli("plot", "sentiment", *since, "--out", str(missing / "c.png"))
    assert code == 1 and f"the directory {missing} does not exist" in out, out
    assert not missing.exists()


@pytest.mark.parametrize("args", [
    ["sql", "--json", "SELECT 1; SELECT 2"],
    ["sql", "--json", "DELETE FROM articles"],
])
def test_an_error_under_json_is_a_json_document_on_stdout(published: Path, args: list[str]) -> None:
    """A script reading --json output gets the error as JSON (the human line stays on stderr)."""
    res = runner.invoke(app, args)
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["exitCode"] == 1 and doc["error"] and res.stderr.startswith("error: "), (res.stdout, res.stderr)


def test_an_unknown_table_is_a_command_line_mistake_under_json_too(published: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "pipeline.cli", "export", "--json", "--table", "no_such_table",
                          "--out", str(published / "x.parquet")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("Usage: "), (res.stdout, res.stderr)
    doc = json.loads(res.stdout)
    assert doc["exitCode"] == 2 and "unknown table 'no_such_table'" in doc["error"], doc


def test_a_database_error_is_one_line(published: Path) -> None:
    """DuckDB's binder errors carry a second line ("Candidate bindings: ..."): still one error line."""
    res = runner.invoke(app, ["sql", "SELECT titel FROM articles"])
    assert res.exit_code == 1 and res.stderr.startswith("error: ") and len(res.stderr.splitlines()) == 1, res.stderr
    assert "Candidate bindings" in res.stderr


@pytest.mark.parametrize("args", [["usage", "--days", "0"], ["sql"], ["keys", "create", "--plan", "pro"],
                                  ["materialize", "--wait-timeout", "-1"], ["no-such-command"]])
def test_a_usage_error_under_json_is_a_json_document_on_stdout(tmp_path: Path, args: list[str]) -> None:
    """Click's own usage errors (a missing or invalid option) printed nothing on stdout, even under --json."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
    res = subprocess.run([sys.executable, "-m", "pipeline.cli", *args, "--json"], capture_output=True, text=True,
                         env={**env, "CRYPTOWIRE_HOME": str(tmp_path / "home")}, timeout=120)
    assert res.returncode == 2, (res.stdout, res.stderr)
    doc = json.loads(res.stdout)
    assert doc["exitCode"] == 2 and doc["error"] and "Error: " in res.stderr, (res.stdout, res.stderr)
    assert not (tmp_path / "home").exists()
