"""Session 41 fixes: `export --out newdir/` names a directory (refused, nothing written, not a file `newdir`);
`plot sentiment`'s range errors exit 2 with the usage when the command line alone is wrong (a reversed or too wide
`--since`/`--until`) and 1 when they depend on the snapshot; a feed whose url redirects to an error names where it
was sent, so that its url is fixed rather than looked for at the url in the feeds file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.ingest import Feed, ingest
from tests.support.feedgen import item, rss
from tests.support.httpserver import LocalServer, Reply, redirect, static
from tests.support.newsdata import Data, build, make_articles
from warehouse.config import PROJECT_ROOT, Settings

runner = CliRunner()
NEWEST = datetime(2026, 11, 20, 8, 0)


def _cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.output


def _process(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed `cryptowire` command in its own process (pipeline.cli.main)."""
    command = Path(sys.executable).parent / "cryptowire"
    return subprocess.run([str(command), *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "CRYPTOWIRE_HOME": str(home), "PYTHONPATH": str(PROJECT_ROOT)},
                          timeout=120)


@pytest.fixture
def home(data_home: Path) -> Path:
    """A real warehouse of 60 articles up to 2026-11-20 08:00 and its snapshot."""
    build(data_home, Data(make_articles(60, 0, start=NEWEST), []))
    return data_home


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- 1: export --out ending in / -----------------------------------------------------------------------------------
def test_export_out_ending_in_a_slash_names_a_directory_and_writes_nothing(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    (work / "realdir").mkdir(parents=True)
    (work / "afile").write_bytes(b"keep")
    monkeypatch.chdir(work)
    before = _tree(work)
    cases = [
        ("newdir/", "error: --out newdir/ names a directory (it ends in /), and newdir does not exist: name the "
         "file to write, e.g. --out newdir/articles.parquet, in a directory that exists (mkdir -p newdir first)"),
        (f"{work}/newdir/", f"error: --out {work}/newdir/ names a directory (it ends in /), and {work}/newdir does "
         f"not exist: name the file to write, e.g. --out {work}/newdir/articles.parquet"),
        ("newdir/.", "error: --out newdir/. names a directory (it ends in /.), and newdir does not exist"),
        ("realdir/", "error: --out realdir/ is a directory: name the file to write, e.g. --out "
         "realdir/articles.parquet"),
        ("afile/", "error: --out afile/ names a directory (it ends in /), but afile is not one: name the file to "
         "write without the /, e.g. --out afile"),
    ]
    for out, message in cases:
        code, text = _cli("export", "--table", "articles", "--out", out)
        assert code == 1 and text.startswith(message) and text.count("\n") == 1, (out, text)
        assert _tree(work) == before, out  # no file `newdir`, no .newdir.partial
    assert (work / "afile").read_bytes() == b"keep"

    # The command as installed, under --json: one JSON error on stdout, nothing written either.
    res = _process(["export", "--table", "articles", "--out", "newdir/", "--json"], home, work)
    assert res.returncode == 1, res
    assert json.loads(res.stdout)["error"].startswith("--out newdir/ names a directory"), res.stdout
    assert _tree(work) == before

    # A file named in that directory, once it exists, is written as before.
    (work / "newdir").mkdir()
    code, text = _cli("export", "--table", "articles", "--out", "newdir/articles.parquet")
    assert code == 0 and text == "wrote 60 rows of articles to newdir/articles.parquet\n", text
    assert (work / "newdir" / "articles.parquet").read_bytes()[:4] == b"PAR1"


# --- 2: plot's range errors: usage (exit 2) or data (exit 1) -------------------------------------------------------
def _plot(out: Path, *args: str) -> tuple[int, str]:
    return _cli("plot", "sentiment", "--ticker", "BTC", "--out", str(out), *args)


def test_plot_reversed_range_is_a_usage_error(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    code, text = _plot(out, "--since", "2026-11-10", "--until", "2026-11-01")
    assert code == 2, text
    assert text.startswith("Usage: cryptowire plot sentiment [OPTIONS]\n"), text
    assert ("Error: Invalid value for '--since' / '--until': --since 2026-11-10 is after --until 2026-11-01: swap "
            "them") in text, text
    # The same instant on both sides is a range of one instant, not a reversed one; a day covers its whole day.
    code, text = _plot(out, "--since", "2026-11-19T08:00:00Z", "--until", "2026-11-19T08:00:00Z")
    assert code == 0 and "1 buckets, 1 articles" in text, text
    code, text = _plot(out, "--since", "2026-11-20T06:00", "--until", "2026-11-20")
    assert code == 0 and "1 articles" in text, text
    out.unlink()

    # Wrong whatever the data: refused before the snapshot is read, even where there is none.
    empty = tmp_path / "empty"
    res = _process(["plot", "sentiment", "--ticker", "BTC", "--out", str(out), "--since", "2026-11-10", "--until",
                    "2026-11-01", "--json"], empty, tmp_path)
    assert res.returncode == 2, res
    assert json.loads(res.stdout)["exitCode"] == 2 and "swap them" in res.stdout, res.stdout
    assert "Usage: cryptowire plot sentiment" in res.stderr, res.stderr
    assert not out.exists() and not empty.exists()


def test_plot_range_errors_exit_2_when_the_command_line_is_wrong_and_1_when_the_data_decides(
    home: Path, tmp_path: Path
) -> None:
    out = tmp_path / "x.png"
    # --since and --until both given: the range is the command line's alone.
    code, text = _plot(out, "--interval", "day", "--since", "2024-11-01", "--until", "2026-11-20")
    assert code == 2 and "Usage: cryptowire plot sentiment" in text, text
    assert "Invalid value for '--since' / '--until' / '--interval'" in text and "holds 750" in text, text
    assert "--interval week fits this range, or leave out --interval to pick it" in text, text
    code, text = _plot(out, "--since", "2016-01-01", "--until", "2026-11-20")  # no interval fits
    assert code == 2 and "Usage: cryptowire plot sentiment" in text, text
    assert "interval WEEK returns at most 262 buckets" in text and "narrow it: pass --since" in text, text
    # --since alone: the range ends at the snapshot's newest dated article, so the data decides (exit 1).
    code, text = _plot(out, "--interval", "day", "--since", "2024-11-01")
    assert code == 1 and text.startswith("error: ") and "holds 750" in text and "Usage:" not in text, text
    code, text = _plot(out, "--since", "2026-12-01")
    assert code == 1 and text.startswith("error: --since 2026-12-01 is after the newest dated article"), text
    assert not out.exists()


# --- 3: a feed redirected to an error -----------------------------------------------------------------------------
RSS = "application/rss+xml; charset=utf-8"


def _ingest_one(con: duckdb.DuckDBPyConnection, settings: Settings, server: LocalServer, path: str
                ) -> tuple[int | None, str | None]:
    """Ingest ``path`` beside a healthy feed; its status and error, as recorded in feed_fetches too."""
    server.routes["/healthy.xml"] = static(rss(item("Healthy", "https://healthy.example.com/1")), RSS)
    report = ingest(con, [Feed("Faulty", server.url(path)), Feed("Healthy", server.url("/healthy.xml"))], settings)
    faulty, healthy = report.results
    assert healthy.error is None
    recorded = con.execute("SELECT http_status, error FROM feed_fetches WHERE feed_name = 'Faulty' AND run_id = ?",
                           [report.run_id]).fetchall()
    assert recorded == [(faulty.http_status, faulty.error)]
    return faulty.http_status, faulty.error


def test_a_feed_redirected_to_a_missing_url_names_where_it_was_sent(
    con: duckdb.DuckDBPyConnection, settings: Settings, local_server: LocalServer
) -> None:
    local_server.routes["/old.xml"] = redirect("/gone.xml", 301)  # /gone.xml: no route, 404
    status, error = _ingest_one(con, settings, local_server, "/old.xml")
    assert (status, error) == (404, (
        f"redirected (HTTP 301) to {local_server.url('/gone.xml')}, which answered HTTP 404 Not Found: the redirect "
        "leads to no feed; fix the feed's url in the feeds file (or tell the publisher its redirect is broken), or "
        "set enabled: false"))
    assert local_server.hits("/old.xml") == 1 and local_server.hits("/gone.xml") == 1

    # Two hops to a 410; and other errors reached through a redirect keep their own advice.
    local_server.routes["/a.xml"] = redirect("/b.xml", 302)
    local_server.routes["/b.xml"] = redirect("/removed.xml", 308)
    local_server.routes["/removed.xml"] = lambda req: Reply(410, b"gone")
    status, error = _ingest_one(con, settings, local_server, "/a.xml")
    assert status == 410 and error is not None
    assert error.startswith(f"redirected (HTTP 302, 308) to {local_server.url('/removed.xml')}, which answered "
                            "HTTP 410 Gone: the redirect leads to no feed"), error
    local_server.routes["/moved.xml"] = redirect("/private.xml", 301)
    local_server.routes["/private.xml"] = lambda req: Reply(403, b"no")
    assert _ingest_one(con, settings, local_server, "/moved.xml") == (403, (
        f"redirected (HTTP 301) to {local_server.url('/private.xml')}, which answered HTTP 403 Forbidden: the "
        "publisher refuses this client; check the url, or set enabled: false"))
    local_server.routes["/to-down.xml"] = redirect("/down.xml", 301)
    local_server.routes["/down.xml"] = static("oops", "text/plain", 503)
    once = settings.model_copy(update={"fetch_retries": 1})
    assert _ingest_one(con, once, local_server, "/to-down.xml") == (503, (
        f"redirected (HTTP 301) to {local_server.url('/down.xml')}, which answered HTTP 503 Service Unavailable "
        "(after 2 attempts)"))

    # Without a redirect the message is as before.
    assert _ingest_one(con, settings, local_server, "/missing.xml") == (
        404, "HTTP 404 Not Found: the feed is no longer at this url; fix it in the feeds file or set enabled: false")
