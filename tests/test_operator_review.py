"""Operator commands from a data-engineer-level review: feed warnings shown by `status` and `materialize --json`,
a run queued with no daemon to launch it, a model build left by a killed process, read-only commands in a data
home that does not exist. Real CLI processes, real feeds on 127.0.0.1, a real Dagster webserver, real kill -9."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.feedgen import item, rss
from tests.support.httpserver import LocalServer, static
from tests.support.servers import free_port, wait_serving

pytestmark = pytest.mark.slow

CLI = str(Path(sys.executable).parent / "cryptowire")
RSS = "application/rss+xml; charset=utf-8"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    return {**env, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "false",
            "CRYPTOWIRE_PRICE_SOURCE_URL": "", **extra}


def _cli(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], env=_env(home, **extra), capture_output=True, text=True, timeout=600)


def test_feed_warnings_show_in_status_and_in_materialize_json(tmp_path: Path, local_server: LocalServer) -> None:
    broken = rss(item("Placeholder", "https://bad.example.com/1"), item("Second", "https://bad.example.com/2"),
                 item(None, None, description=""))  # the last has no link, guid or title
    local_server.routes["/broken.xml"] = static(broken.replace("Placeholder", "Bare & ampersand")
                                                .replace("</channel>", ""), RSS)
    items = [item(f"Story {n}", f"https://big.example.com/{n}", description="x" * 400) for n in range(200)]
    local_server.routes["/big.xml"] = static(rss(*items), RSS)  # ~100 KB, cut at the 32 KB cap below
    local_server.routes["/fine.xml"] = static(rss(item("Fine", "https://fine.example.com/1")), RSS)
    feeds = tmp_path / "feeds.yaml"
    feeds.write_text("feeds:\n" + "".join(f"  - name: {n}\n    url: {local_server.url(f'/{p}.xml')}\n"
                                         for n, p in (("Broken", "broken"), ("Big", "big"), ("Fine", "fine"))))
    home = tmp_path / "home"
    cap = {"CRYPTOWIRE_FETCH_MAX_BYTES": str(32 * 1024)}

    out = _cli(home, "materialize", "--select", "raw_articles", "--feeds", str(feeds), "--json", **cap)
    assert out.returncode == 0, out.stderr[-3000:]
    (raw,) = json.loads(out.stdout)["assets"]
    health = {h["feed"]: h for h in raw["metadata"]["feed_health"]}
    assert "malformed XML" in health["Broken"]["warning"], health
    assert "1 items skipped: no title" in health["Broken"]["warning"], health
    assert health["Big"]["warning"].startswith("body cut at the size cap; kept the "), health
    assert health["Fine"]["warning"] is None and health["Big"]["error"] is None

    report = json.loads(_cli(home, "status", "--json").stdout)
    shown = {f["feed"]: f["warning"] for f in report["feeds"]}
    assert shown == {f: h["warning"] for f, h in health.items()}

    text = _cli(home, "status").stdout
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and "http" not in line}
    assert lines["Fine"].endswith("  ok"), text
    assert lines["Big"].endswith(f"  ok (warning: {health['Big']['warning']})"), text
    # the lenient-parse warning is long: one line, the parser's details left out, the JSON named for them
    assert lines["Broken"].endswith(
        "  ok (warning: malformed XML (…); read leniently by feedparser; 1 items skipped: no title)"
    ), text
    assert "`cryptowire status --json` has them whole" in text, text


def test_a_long_warning_without_details_is_cut_on_one_line() -> None:
    from pipeline.status import WARNING_SHOWN, render

    feed = {"feed": "Odd", "url": "u", "at": None, "status": 200, "seen": 1, "new": 1, "not_modified": False,
            "error": None, "warning": "word " * 40 + "\nnext line"}
    report = {"home": "h", "warehouse": "w", "snapshots": "s", "feeds_file": "f", "exists": True, "counts": {},
              "newest_article": None, "feeds": [feed], "runs_in_progress": [], "assets": [], "checks": [],
              "serving": {"current": "news-x.duckdb", "complete": True, "problem": None}}
    (line,) = [x for x in render(report).splitlines() if x.startswith("  Odd ")]
    shown = line.split("ok (warning: ", 1)[1]
    assert shown.endswith("word…)") and len(shown) == WARNING_SHOWN + 1, line


def test_a_run_queued_by_the_webserver_without_a_daemon_shows_as_queued(tmp_path: Path) -> None:
    from warehouse.db import connect

    home = tmp_path / "home"
    home.mkdir()
    connect(home / "warehouse.duckdb").close()  # an empty warehouse: status shows its tables and assets
    port = free_port()
    web = subprocess.Popen([CLI, "webserver", "--port", str(port)], env=_env(home), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_serving(f"http://127.0.0.1:{port}/server_info", web, 120, "the webserver")
        launch = ('mutation { launchRun(executionParams: {selector: {repositoryLocationName: "pipeline.definitions",'
                  ' repositoryName: "__repository__", jobName: "ingest_feeds"}, runConfigData: "{}"})'
                  ' { __typename ... on LaunchRunSuccess { run { runId status } } } }')
        got = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": launch}, timeout=60).json()
        run = got["data"]["launchRun"]["run"]
        assert run["status"] == "QUEUED", got
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(timeout=30)

    report = json.loads(_cli(home, "status", "--json").stdout)
    (raw,) = [a for a in report["assets"] if a["asset"] == "raw_articles"]
    assert raw["last_run"] == {"run_id": run["runId"], "outcome": "queued", "status": "QUEUED",
                               "process_gone": False}
    assert report["runs_queued"][0]["run_id"] == run["runId"] and report["daemon_running"] is False

    text = _cli(home, "status").stdout
    (line,) = [x for x in text.splitlines() if x.startswith("  raw_articles ") and "never" in x]  # not the count
    assert line.split()[-3:] == ["queued", run["runId"][:8], "QUEUED"], line
    assert f"runs queued: {run['runId'][:8]} ingest_feeds" in text, text
    assert "no Dagster daemon is running: they start when it runs (`cryptowire daemon`, or `make dev`)" in text


BUILDER = """
import sys
from pathlib import Path
from models.sentiment import build_model
build_model(cache_dir=Path(sys.argv[1]))
"""


def _wait_for_build(models: Path, proc: subprocess.Popen) -> Path:
    """The build's temp directory once the fp32 export is being written in it."""
    deadline = time.monotonic() + 300
    while not (found := list(models.glob("sentiment-onnx-*/fp32.onnx"))):
        assert proc.poll() is None and time.monotonic() < deadline, "no build started"
        time.sleep(0.1)
    return found[0].parent


def test_a_model_build_killed_midway_is_removed_by_doctor_and_by_the_next_materialize(tmp_path: Path) -> None:
    home = tmp_path / "home"
    models = home / "models"
    # a first materialize killed while it builds the int8 graph
    first = subprocess.Popen([CLI, "materialize"], env=_env(home), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        left = _wait_for_build(models, first)
    finally:
        first.kill()
        first.wait()

    check = _cli(home, "doctor", "--check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"needs repair: would remove {left.name}/ (" in check.stdout, check.stdout
    fixed = _cli(home, "doctor")
    assert f"repaired: removed {left.name}/ (" in fixed.stdout, fixed.stdout
    assert not left.exists()

    # a live build (another process: a worker, `cryptowire sentiment eval`) is not touched
    builder = subprocess.Popen([sys.executable, "-c", BUILDER, str(models)], env=_env(home), stderr=subprocess.DEVNULL)
    try:
        live = _wait_for_build(models, builder)
        check = _cli(home, "doctor", "--check")
        assert live.name not in check.stdout and live.exists(), check.stdout
    finally:
        builder.kill()  # SIGKILL mid-build: now it is a leftover
        builder.wait()
    assert live.exists()

    again = _cli(home, "materialize", "--select", "raw_articles")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"repaired: removed {live.name}/ (" in again.stderr, again.stderr
    assert not list(models.glob("sentiment-onnx-*"))
    check = _cli(home, "doctor", "--check")
    assert check.returncode == 0 and "nothing to repair" in check.stdout, check.stdout


def test_status_and_doctor_check_create_nothing_where_there_is_no_data_home(tmp_path: Path) -> None:
    home = tmp_path / "nothing"
    text = _cli(home, "status")
    assert text.returncode == 0 and "no data home yet: `cryptowire materialize`" in text.stdout, text.stdout
    report = json.loads(_cli(home, "status", "--json").stdout)
    assert report["home_exists"] is False and "no data home yet" in report["hint"]
    check = _cli(home, "doctor", "--check")
    assert check.returncode == 0 and "no data home at" in check.stdout, check.stdout
    assert not home.exists()

    home.mkdir()  # a data home without a Dagster instance yet: looking at it creates nothing in it either
    assert _cli(home, "doctor", "--check").returncode == 0 and _cli(home, "status", "--json").returncode == 0
    assert list(home.iterdir()) == []


HOLDER = """
import sys, time
from warehouse.db import connect
con = connect(sys.argv[1])
print("holding", flush=True)
time.sleep(120)
"""


def test_status_shows_assets_and_runs_while_a_run_holds_the_warehouse(tmp_path: Path) -> None:
    """Text status showed only the paths and the lock while a run held the warehouse (a slow feed holds it up to
    two minutes): the assets, runs and checks, which the instance knows, were left out (--json had them)."""
    from warehouse.db import connect

    home = tmp_path / "home"
    home.mkdir()
    connect(home / "warehouse.duckdb").close()
    done = _cli(home, "materialize", "--select", "crypto_assets")  # one run in the instance
    assert done.returncode == 0, done.stderr[-2000:]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home / "warehouse.duckdb")], env=_env(home),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        text = _cli(home, "status").stdout
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert "is held by another process" in text, text
    assert "serving snapshot:" in text and "assets:" in text, text
    (line,) = [x for x in text.splitlines() if x.startswith("  crypto_assets ")]
    assert "SUCCESS" in line, text


def test_status_says_when_the_url_names_postgres_but_the_instance_is_still_sqlite(tmp_path: Path) -> None:
    """Moving a data home to Postgres by setting the URL: status (which never rewrites dagster.yaml) kept showing
    SQLite's runs without a word."""
    from warehouse.db import connect

    home = tmp_path / "home"
    home.mkdir()
    connect(home / "warehouse.duckdb").close()
    done = _cli(home, "materialize", "--select", "crypto_assets")
    assert done.returncode == 0, done.stderr[-2000:]
    url = "postgresql://cw:s3cret@127.0.0.1:1/cryptowire"
    report = json.loads(_cli(home, "status", "--json", CRYPTOWIRE_DATABASE_URL=url).stdout)
    note = report["instance_note"]
    assert "127.0.0.1:1/cryptowire" in note and "still in SQLite" in note and "s3cret" not in note
    assert report["assets"] and "dagster.yaml" not in str(report.get("runs_error"))
    assert "note: CRYPTOWIRE_DATABASE_URL names Postgres" in _cli(home, "status", CRYPTOWIRE_DATABASE_URL=url).stdout
    assert "instance_note" not in json.loads(_cli(home, "status", "--json").stdout)


def test_up_refuses_a_port_in_use_before_it_materializes_or_revokes_a_key(tmp_path: Path) -> None:
    """`make run` while another one still served: it materialized, revoked the key the running server had printed,
    printed a new one, then failed to bind; the running server kept going with its key revoked."""
    home = tmp_path / "home"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = _cli(home, "up", CRYPTOWIRE_PORT=str(port))
    assert out.returncode == 1, out
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr and "CRYPTOWIRE_PORT" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not (home / "warehouse.duckdb").exists()  # nothing materialized
    keys = json.loads(_cli(home, "keys", "list", "--json").stdout)
    assert keys == [] or all(k["name"] != "cryptowire up" for k in keys), keys


def one_feed_home(tmp_path: Path, built_models: Path) -> tuple[Path, Path]:
    """A data home with the session's int8 graph (no build in the run), and a feeds file of one local feed
    (``tmp_path / "one.xml"``, one article; rewrite it to add more). Returns (home, feeds file)."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(built_models, home / "models")
    (tmp_path / "one.xml").write_text(rss(item("Bitcoin rises 2% as ETF inflows return", "https://one.example.com/1")))
    feeds = tmp_path / "feeds.yaml"
    feeds.write_text("feeds:\n  - name: One\n    url: one.xml\n")
    return home, feeds


def test_up_no_serve_stops_after_the_summary_and_names_its_feeds_file(tmp_path: Path, built_models: Path) -> None:
    """`up --feeds F --no-serve` said F was "what runs without --feeds read" (those read the configured file)."""
    home, feeds = one_feed_home(tmp_path, built_models)
    out = _cli(home, "up", "--no-serve", "--feeds", str(feeds))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"feeds file: {feeds} (this run's --feeds" in out.stdout, out.stdout
    assert "access key" not in out.stdout and "curl" not in out.stdout
    assert json.loads(_cli(home, "keys", "list", "--json").stdout) == []
