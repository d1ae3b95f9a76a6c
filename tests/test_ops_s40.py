"""Operators' view of two quiet failures: a feed answering with an empty channel (its publisher moved it), and
a serving snapshot behind the warehouse (articles merged after the last publish). Real feeds on 127.0.0.1,
real warehouse files and snapshot sets, real `cryptowire` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline.ingest import Feed, ingest
from tests.support.feedgen import item, rss
from tests.support.httpserver import LocalServer, conditional, static
from tests.support.newsdata import Data, build, make_articles, make_events
from tests.support.servers import free_port
from warehouse.config import Settings
from warehouse.db import connect

CLI = str(Path(sys.executable).parent / "cryptowire")
RSS = "application/rss+xml; charset=utf-8"
EMPTY_FEED = "feed answered with no items: check that the URL still is the publisher's feed"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    return {
        **env,
        "CRYPTOWIRE_HOME": str(home),
        "CRYPTOWIRE_PDF_PREWARM": "false",
        "CRYPTOWIRE_PRICE_SOURCE_URL": "",
    }


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], env=_env(home), capture_output=True, text=True, timeout=600)


def _feed_lines(text: str) -> dict[str, str]:
    """The feed rows of `cryptowire status`, by feed name."""
    lines = text.splitlines()
    rows = lines[lines.index("feeds (last fetch):") + 2 :]
    return {line.split()[0]: line for line in rows if line.startswith("  ") and not line.startswith("   ")}


# --- a feed with no items -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_an_empty_feed_warns_in_the_run_summary_and_in_status(
    tmp_path: Path, local_server: LocalServer
) -> None:
    """An empty channel answered 200 and showed as `ok`, like a healthy feed. Now it is a warning (the run
    goes on) in the step's metadata, the run's summary and status, and stays one on a 304."""
    local_server.routes["/moved.xml"] = conditional(rss(), etag='"empty-1"')  # a channel with no <item>
    local_server.routes["/fine.xml"] = static(rss(item("Fine", "https://fine.example.com/1")), RSS)
    feeds = tmp_path / "feeds.yaml"
    feeds.write_text(
        f"feeds:\n  - name: Moved\n    url: {local_server.url('/moved.xml')}\n"
        f"  - name: Fine\n    url: {local_server.url('/fine.xml')}\n"
    )
    home = tmp_path / "home"

    first = _cli(home, "materialize", "--select", "raw_articles", "--feeds", str(feeds), "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout)
    (raw,) = summary["assets"]
    assert summary["ok"] and raw["ok"], summary
    meta = raw["metadata"]
    health = {h["feed"]: h for h in meta["feed_health"]}
    assert (health["Moved"]["status"], health["Moved"]["error"], health["Moved"]["seen"]) == (200, None, 0)
    assert health["Moved"]["warning"] == EMPTY_FEED and health["Moved"].get("empty") is True
    assert health["Fine"]["warning"] is None and health["Fine"].get("empty") is False
    assert (meta["feeds_failed"], meta.get("feeds_empty"), meta["new"]) == (0, 1, 1)
    assert (
        "(Moved)" in meta.get("warning", "")
        and "check that their URLs still are the publishers' feeds" in meta["warning"]
    )

    text = _cli(home, "status").stdout
    rows = _feed_lines(text)
    assert rows["Moved"].endswith(f"  ok (warning: {EMPTY_FEED})"), text
    assert rows["Fine"].endswith("  ok"), text

    # Unchanged since (304): still the empty channel, still a warning, in the text summary too.
    second = _cli(home, "materialize", "--select", "raw_articles", "--feeds", str(feeds))
    assert second.returncode == 0, second.stderr[-3000:]
    assert [s.headers.get("if-none-match") for s in local_server.seen if s.path == "/moved.xml"] == [
        None,
        '"empty-1"',
    ]
    (line,) = [x for x in second.stdout.splitlines() if x.strip().startswith("raw_articles")]
    assert (
        "feeds_failed=0" in line
        and "feeds_empty=1" in line
        and "warning=1 feed(s) answered with no items (Moved)" in line
    ), second.stdout
    report = json.loads(_cli(home, "status", "--json").stdout)
    shown = {f["feed"]: (f["not_modified"], f["warning"]) for f in report["feeds"]}
    assert shown == {"Moved": (True, EMPTY_FEED), "Fine": (False, None)}, shown
    text = _cli(home, "status").stdout
    assert _feed_lines(text)["Moved"].endswith(f"  unchanged (warning: {EMPTY_FEED})"), text


def test_an_empty_feed_stays_flagged_until_it_lists_items_again(
    settings: Settings, local_server: LocalServer, tmp_path: Path
) -> None:
    """A 304 carries the warning only while the last document read was empty; a 304 after a document with
    items does not; a document with items clears it. Other warnings come after it (status cuts long ends)."""
    con = connect(tmp_path / "warehouse.duckdb")
    try:
        local_server.routes["/a.xml"] = conditional(rss(), etag='"a1"')
        local_server.routes["/b.xml"] = conditional(rss(item("B", "https://b.example/1")), etag='"b1"')
        feeds = [Feed("A", local_server.url("/a.xml")), Feed("B", local_server.url("/b.xml"))]

        def seen() -> list[tuple[Any, ...]]:
            got = ingest(con, feeds, settings).results
            return [(r.http_status, r.items_seen, getattr(r, "empty", None), r.warning, r.error) for r in got]

        assert seen() == [(200, 0, True, EMPTY_FEED, None), (200, 1, False, None, None)]
        assert seen() == [(304, 0, True, EMPTY_FEED, None), (304, 0, False, None, None)]
        assert seen() == [(304, 0, True, EMPTY_FEED, None), (304, 0, False, None, None)]  # 304 after a 304
        local_server.routes["/a.xml"] = conditional(rss(item("Back", "https://a.example/1")), etag='"a2"')
        assert seen()[0] == (200, 1, False, None, None)
        assert seen()[0] == (304, 0, False, None, None)

        # an empty channel in a document read leniently: both said, the empty feed first
        local_server.routes["/a.xml"] = static(rss().replace("</channel>", ""), RSS)
        (a, _) = ingest(con, feeds, settings).results
        assert getattr(a, "empty", None) and a.error is None and a.warning is not None
        assert a.warning.startswith(f"{EMPTY_FEED}; ") and "malformed XML" in a.warning, a.warning
    finally:
        con.close()


# --- a serving snapshot behind the warehouse ----------------------------------------------------------------
def _status(home: Path) -> tuple[dict[str, Any], str]:
    got = _cli(home, "status", "--json")
    assert got.returncode == 0, got.stderr[-3000:]
    text = _cli(home, "status")
    assert text.returncode == 0, text.stderr[-3000:]
    return json.loads(got.stdout), text.stdout


def _serving_lines(text: str) -> list[str]:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("serving snapshot:"))
    return [lines[at], *[x for x in lines[at + 1 : at + 3] if x.startswith(("  BEHIND", "  (a run"))]]


@pytest.mark.slow
def test_status_says_when_the_served_snapshot_is_behind_the_warehouse(
    settings: Settings, local_server: LocalServer
) -> None:
    """Articles merged after the last publish (the publish failed, or has not run yet): status was silent, and
    API clients read older news than analysts saw in DuckDB. Now it names the snapshot (time, tag), what the
    warehouse holds beyond it, and what to run; right after a publish it says nothing more."""
    from warehouse.parts import publish_set, read_manifest
    from warehouse.published import current_snapshot

    home = settings.home
    home.mkdir(parents=True)
    # a set of parts, as the serving_snapshot asset publishes
    build(home, Data(make_articles(40, 4), make_events(6)), parts=True)
    manifest = read_manifest(current_snapshot(home / "snapshots"))  # type: ignore[arg-type]

    report, text = _status(home)
    serving = report["serving"]
    assert serving["complete"] and serving.get("tag") == manifest["tag"], serving
    assert serving.get("published_at") == manifest["created_at"][:19] + "Z", serving
    assert serving.get("behind") == {} and serving.get("lag") is None, serving
    shown = f"{manifest['created_at'][:10]} {manifest['created_at'][11:19]} UTC"
    assert _serving_lines(text) == [
        f"serving snapshot: {serving['current']} (complete), published {shown}, tag {manifest['tag']}"
    ], text

    # Two new articles merged into the warehouse, nothing enriched or published since.
    local_server.routes["/news.xml"] = static(
        rss(
            item("ETH ETF approved", "https://news.example.com/eth-etf"),
            item("BTC hits a high", "https://news.example.com/btc-high"),
        ),
        RSS,
    )
    con = connect(settings.warehouse_path)
    try:
        assert ingest(con, [Feed("News", local_server.url("/news.xml"))], settings).new == 2
    finally:
        con.close()
    report, text = _status(home)
    assert report["serving"].get("behind") == {"raw_articles": 2}, report["serving"]
    first, behind = _serving_lines(text)
    assert first.startswith(f"serving snapshot: {serving['current']} (complete), published {shown}"), text
    assert behind.startswith(
        "  BEHIND: the warehouse holds what this snapshot does not serve: 2 articles ingested "
        "and not enriched yet;"
    ), text
    assert "API clients read older news" in behind and behind.endswith(
        "run `cryptowire materialize` to enrich and publish them"
    ), text

    # Enriched into `articles` (the enrichment's own sync statement), still not published.
    from pipeline.enrich import SYNC_SQL

    con = connect(settings.warehouse_path)
    try:
        con.execute(SYNC_SQL)
    finally:
        con.close()
    report, text = _status(home)
    assert report["serving"].get("behind") == {"articles": 2}, report["serving"]
    (_, behind) = _serving_lines(text)
    assert "rows written after its publication (articles 2)" in behind, text
    # the whole job, not the snapshot alone: the stories step brings what each news row says of its story in step
    assert "run `cryptowire materialize` to publish them" in behind and "--select" not in behind, text

    # While a run holds the warehouse, status neither waits for it nor guesses: the snapshot is still named.
    holder = connect(settings.warehouse_path)
    try:
        report, text = _status(home)
    finally:
        holder.close()
    assert "is held by another process" in text and report["serving"].get("behind") is None, text
    assert _serving_lines(text)[0].startswith(
        f"serving snapshot: {serving['current']} (complete), published"
    ), text

    # Published: nothing behind any more.
    con = connect(settings.warehouse_path)
    try:
        publish_set(con, home / "snapshots")
    finally:
        con.close()
    report, text = _status(home)
    assert report["serving"]["current"] != serving["current"], report["serving"]
    assert report["serving"].get("behind") == {} and report["serving"].get("lag") is None, report["serving"]
    assert "BEHIND" not in text and len(_serving_lines(text)) == 1, text


def test_a_single_file_snapshot_is_compared_by_its_creation_time(settings: Settings) -> None:
    """The older layout (one file, no watermarks): its snapshot_info's time and tag stand in."""
    import duckdb

    from pipeline.status import collect
    from warehouse.published import current_snapshot

    home = settings.home
    home.mkdir(parents=True)
    build(home, Data(make_articles(12, 2), make_events(3)), parts=False)
    path = current_snapshot(home / "snapshots")
    assert path is not None and path.name.endswith(".duckdb")
    with duckdb.connect(str(path), read_only=True) as snap:
        tag, created = snap.execute("SELECT tag, created_at FROM snapshot_info").fetchall()[0]
    serving = collect(settings)["serving"]
    assert (serving.get("tag"), serving.get("published_at"), serving.get("behind")) == (
        tag,
        created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        {},
    ), serving

    con = connect(settings.warehouse_path)
    try:  # a story regrouped after the publish: a change of a served table
        con.execute(
            "INSERT INTO stories (id, title, first_seen, last_seen, articles, sources, tickers, topics, "
            "updated_at) VALUES ('s_late', 'Late', now(), now(), 1, 1, [], [], now() + INTERVAL 1 SECOND)"
        )
    finally:
        con.close()
    serving = collect(settings)["serving"]
    assert serving.get("behind") == {"stories": 1} and "(stories 1)" in (serving.get("lag") or ""), serving


def test_dev_opens_the_ui_on_the_port_asked(tmp_path: Path) -> None:
    """`cryptowire dev --port`: port 3000 is often taken (another UI, a web app being built)."""
    project = Path(__file__).resolve().parent.parent
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(project), CRYPTOWIRE_HOME=str(tmp_path / "home"), CRYPTOWIRE_PRICE_SOURCE_URL="")
    log = (tmp_path / "dev.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "dev", "--port", str(port)], env=env, cwd=project,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, up = time.monotonic() + 180, False
        while time.monotonic() < deadline and not up:
            assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-2000:]
            try:
                up = httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=2).status_code == 200
            except httpx.HTTPError:
                time.sleep(1)
        assert up, (tmp_path / "dev.log").read_text()[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
