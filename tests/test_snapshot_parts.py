"""Partitioned serving snapshots (warehouse/parts/): sets of immutable period parts and a small head.

- a set serves exactly what a single file serves (every page, both directions, with filters);
- unchanged parts are reused (same file, never rewritten); a changed, late-filled or re-scored period, a period
  holding an article of a changed story, and a period that closes get new parts;
- paging through cryptoNews over HTTP while sets are published visits every article once, in order;
- a publish killed at each crash point leaves a home the next publish recovers;
- pruning removes the parts no kept set references, but not one another process has open;
- a home with single-file snapshots moves to sets, cursors included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from api.access import StaticKeys
from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, make_articles, make_events, open_reader, write
from warehouse.config import Settings
from warehouse.cursors import decode_news_cursor, decode_story_cursor, parse_instant
from warehouse.db import connect
from warehouse.parts import HEAD, SET_FORMAT, open_set, publish_set, read_manifest, set_parts
from warehouse.publish import list_parts, list_snapshots, publish_snapshot
from warehouse.published import PARTIAL, current_snapshot
from warehouse.read import EventFilters, NewsFilters, PageRequest, SnapshotReader, StoryFilters
from warehouse.repair import repair_snapshots, valid_snapshot
from warehouse.sentiment import refresh_asset_sentiment

NOW = datetime(2025, 3, 10, 14, 30)  # parts: months to Feb 2025, days Mar 1-9, hours of Mar 10 before 14:00, head
KEY = "parts-key"


def dataset() -> Data:
    # 3 articles every 3 hours back from the head hour, over ~15 days; a burst of 30 at one second in Nov 2024
    articles = make_articles(400, 30, seed=5, start=NOW - timedelta(minutes=20))
    return Data(articles, make_events(40, start=NOW - timedelta(minutes=10)))


def _warehouse(home: Path, data: Data) -> None:
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("BEGIN")
        write(con, data)
        con.execute("COMMIT")
        refresh_asset_sentiment(con)
    finally:
        con.close()


def _publish(home: Path, now: datetime = NOW, keep: int = 3) -> Path:
    con = connect(home / "warehouse.duckdb")
    try:
        refresh_asset_sentiment(con)
        return publish_set(con, home / "snapshots", keep=keep, now=now)
    finally:
        con.close()


def _insert(home: Path, article_id: str, at: datetime, source: str = "Late", tickers: list[str] | None = None) -> None:
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute(
            """INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories,
                   published_at, fetched_at, content_hash, sentiment, sentiment_score, tickers, topics)
               VALUES (?, ?, 'f', ?, ?, 's', [], [], ?, now()::TIMESTAMP, 'h', 'neutral', 0.0, ?, ['markets'])""",
            [article_id, source, f"https://late.example/{article_id}", f"Title {article_id}", at, tickers or []],
        )
    finally:
        con.close()


def _parts(manifest: Path) -> dict[str, str]:
    """period -> part file name."""
    return {e["period"]: e["name"] for e in read_manifest(manifest)["parts"]}


def _identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def _strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "_cursor"} for r in rows]


# --------------------------------------------------------------------------------------------- same answers


def _walk(reader: SnapshotReader, kind: str, size: int, filters: Any, backwards: bool) -> list[tuple]:
    """Every page of a list, following cursors; each page as (rows without cursors, hasNext, hasPrevious)."""
    pages: list[tuple] = []
    cursor = None
    for _ in range(1000):
        if kind == "news":
            req = PageRequest(last=size, before=cursor) if backwards else PageRequest(first=size, after=cursor)
            page = reader.news_page(req, filters)
        elif kind == "stories":
            req = PageRequest(last=size, before=cursor) if backwards else PageRequest(first=size, after=cursor)
            page = reader.stories_page(req, filters)
        else:
            req = PageRequest(last=size, before=cursor) if backwards else PageRequest(first=size, after=cursor)
            page = reader.events_page(req, filters, now=NOW)
        pages.append((_strip(page.rows), page.has_next, page.has_previous))
        more = page.has_previous if backwards else page.has_next
        if not page.rows or not more:
            return pages
        edge = page.rows[0] if backwards else page.rows[-1]
        if kind == "news":
            cursor = decode_news_cursor(edge["_cursor"])
        elif kind == "stories":
            cursor = decode_story_cursor(edge["_cursor"])
        else:
            cursor = parse_instant(edge["createdAt"])
    raise AssertionError("paging did not end")


def test_a_set_serves_what_a_single_file_serves(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    data = dataset()
    _warehouse(home, data)
    con = connect(home / "warehouse.duckdb")
    try:  # a story spanning the Feb/Mar boundary, so that stories are paged across parts too
        ids = data.news_order()
        con.execute("""INSERT INTO stories SELECT 'st_' || id, title, published_at, published_at, 1, 1, NULL, [], [],
                       TIMESTAMP '2025-03-10' FROM articles""")
        con.execute("""INSERT INTO story_articles SELECT id, 'st_' || id, published_at, TIMESTAMP '2025-03-10'
                       FROM articles""")
        single = publish_snapshot(con, tmp_path / "single")
        manifest = publish_set(con, home / "snapshots", now=NOW)
    finally:
        con.close()
    periods = [e["period"] for e in read_manifest(manifest)["parts"]]
    assert periods[0] == HEAD and {p[0] for p in periods[1:]} == {"m", "d", "h"}, periods
    fcon, file_reader = open_reader(single)
    scon, set_reader = open_reader(manifest)
    try:
        assert set_reader.layout is not None and len(set_reader.layout["news"]) > 10
        assert [r[0] for r in scon.execute("SELECT id FROM news ORDER BY pos").fetchall()] == ids
        assert scon.execute("SELECT count(*), count(DISTINCT pos), max(pos) FROM news").fetchall()[0] == (
            len(ids), len(ids), len(ids) - 1)
        since, until = parse_instant("2025-03-02"), parse_instant("2025-03-09T07:00:00")
        news_filters = [NewsFilters(), NewsFilters(tickers=("ETH",)), NewsFilters(since=since, until=until),
                        NewsFilters(sources=("coindesk",), since=since), NewsFilters(collapse_stories=True)]
        for size in (3, 100):
            for filters in news_filters:
                for backwards in (False, True):
                    assert _walk(set_reader, "news", size, filters, backwards) == _walk(
                        file_reader, "news", size, filters, backwards), (size, filters, backwards)
            for backwards in (False, True):
                for sf in (StoryFilters(), StoryFilters(since=since)):
                    assert _walk(set_reader, "stories", size, sf, backwards) == _walk(
                        file_reader, "stories", size, sf, backwards)
                for ef in (EventFilters(), EventFilters(tickers=("BTC",))):
                    assert _walk(set_reader, "events", size, ef, backwards) == _walk(
                        file_reader, "events", size, ef, backwards)
        for kind in ("newsSources", "newsTopics", "tickers"):
            assert set_reader.filter_values(kind) == file_reader.filter_values(kind)
        for sql in ("SELECT * FROM sentiment ORDER BY ALL", "SELECT articles, events FROM snapshot_info",
                    "SELECT * EXCLUDE (text) FROM news ORDER BY pos"):
            assert scon.execute(sql).fetchall() == fcon.execute(sql).fetchall(), sql
    finally:
        fcon.close()
        scon.close()


# --------------------------------------------------------------------------------------------- reuse


def test_unchanged_parts_are_reused_and_changed_periods_rebuilt(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _warehouse(home, dataset())
    first = _publish(home)
    parts1 = _parts(first)
    ident = {p: _identity(home / "snapshots" / n) for p, n in parts1.items()}

    second = _publish(home)  # nothing changed: every closed part reused, the head rebuilt
    parts2 = _parts(second)
    assert {p: n for p, n in parts2.items() if p != HEAD} == {p: n for p, n in parts1.items() if p != HEAD}
    assert parts2[HEAD] != parts1[HEAD]
    for p, n in parts2.items():
        if p != HEAD:
            assert _identity(home / "snapshots" / n) == ident[p], p  # the very file, never rewritten

    # A late article dated in February (a closed month), one at the head, and a re-scored article of a past day.
    _insert(home, "a_late_feb_0000001", datetime(2025, 2, 26, 5, 0))
    _insert(home, "a_head_0000000001", NOW - timedelta(minutes=5))
    con = connect(home / "warehouse.duckdb")
    try:
        rescored = con.execute("""SELECT id FROM articles WHERE published_at >= '2025-03-05' AND published_at
                                  < '2025-03-06' LIMIT 1""").fetchall()[0][0]
        con.execute("UPDATE articles SET sentiment = 'negative', sentiment_score = -0.9, enriched_at = now() "
                    "WHERE id = ?", [rescored])
    finally:
        con.close()
    third = _publish(home)
    parts3 = _parts(third)
    changed = {p for p in parts3 if parts3[p] != parts2.get(p)}
    assert changed == {HEAD, "m202502", "d20250305"}, changed
    con, reader = open_reader(third)
    try:
        late = reader.news_page(PageRequest(first=10), NewsFilters(sources=("late",))).rows
        assert [r["id"] for r in late] == ["a_head_0000000001", "a_late_feb_0000001"]
        assert con.execute("SELECT sentiment, sentiment_score FROM news WHERE id = ?", [rescored]).fetchall() == [
            ("Negative", -0.9)]
    finally:
        con.close()

    # An hour later the head hour has closed (an hour part), and the next day the hours close into a day part.
    fourth = _publish(home, now=NOW + timedelta(hours=1))
    parts4 = _parts(fourth)
    assert "h20250310T14" in parts4 and all(parts4[p] == parts3[p] for p in parts3 if p != HEAD)
    fifth = _publish(home, now=NOW + timedelta(days=1))
    parts5 = _parts(fifth)
    assert "d20250310" in parts5 and not any(p.startswith("h") for p in parts5 if p != HEAD)
    assert all(parts5[p] == parts4[p] for p in parts4 if p.startswith(("m", "d")))
    # ... and a month later March is one month part.
    sixth = _publish(home, now=datetime(2025, 4, 2, 9, 0))
    parts6 = _parts(sixth)
    assert "m202503" in parts6 and not any(p.startswith(("d", "h")) for p in parts6 if p != HEAD)
    assert all(parts6[p] == parts5[p] for p in parts5 if p.startswith("m"))
    con, reader = open_reader(sixth)
    try:
        assert reader.counts["news"] == 402
    finally:
        con.close()
    # A clock that goes back (a publish placed earlier than the last): March splits into days and hours again.
    seventh = _publish(home, now=NOW)
    con, reader = open_reader(seventh)
    try:
        assert reader.counts["news"] == 402 and "m202503" not in _parts(seventh)
        assert [r[0] for r in con.execute("SELECT id FROM news ORDER BY pos").fetchall()] == [
            r[0] for r in con.execute("SELECT id FROM news ORDER BY published_at DESC, id DESC").fetchall()]
    finally:
        con.close()


def test_changes_no_stamp_shows_are_found_by_the_whole_table_check(tmp_path: Path) -> None:
    """A deleted article and a corrected date (the sync copies dates without touching any stamp): the count and
    time sums of the whole tables differ from the parts', so every period is compared and those two rebuilt."""
    home = tmp_path / "home"
    home.mkdir()
    data = dataset()
    _warehouse(home, data)
    first = _publish(home)
    con = connect(home / "warehouse.duckdb")
    try:
        gone = con.execute("SELECT id FROM articles WHERE published_at >= '2025-03-04' AND published_at < '2025-03-05' "
                           "LIMIT 1").fetchall()[0][0]
        moved = con.execute("SELECT id FROM articles WHERE published_at >= '2025-02-01' AND published_at < '2025-03-01' "
                            "LIMIT 1").fetchall()[0][0]
        con.execute("DELETE FROM article_tickers WHERE article_id = ?", [gone])
        con.execute("DELETE FROM articles WHERE id = ?", [gone])
        con.execute("UPDATE articles SET published_at = published_at - INTERVAL 1 SECOND WHERE id = ?", [moved])
    finally:
        con.close()
    second = _publish(home)
    p1, p2 = _parts(first), _parts(second)
    changed = {p for p in p2 if p2[p] != p1.get(p)}
    assert {HEAD, "d20250304", "m202502"} <= changed and len(changed) <= 5, changed  # + sentiment's own buckets
    con, reader = open_reader(second)
    try:
        assert reader.counts["news"] == 399
        assert con.execute("SELECT count(*) FROM news WHERE id = ?", [gone]).fetchall()[0][0] == 0
    finally:
        con.close()


def test_a_changed_story_rebuilds_the_periods_of_its_articles(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _warehouse(home, dataset())
    con = connect(home / "warehouse.duckdb")
    try:
        feb = [r[0] for r in con.execute("SELECT id FROM articles WHERE published_at < '2025-03-01' AND "
                                         "published_at >= '2025-02-01' ORDER BY published_at LIMIT 2").fetchall()]
        con.execute("""INSERT INTO stories SELECT 'st_one', title, published_at, published_at, 1, 1, NULL, [], [],
                       TIMESTAMP '2025-03-01' FROM articles WHERE id = ?""", [feb[0]])
        con.execute("INSERT INTO story_articles SELECT id, 'st_one', published_at, TIMESTAMP '2025-03-01' "
                    "FROM articles WHERE id = ?", [feb[0]])
    finally:
        con.close()
    first = _publish(home)
    # The story grows by an article of the head hour: its summary in the February article changes.
    _insert(home, "a_joins_story_0001", NOW - timedelta(minutes=1))
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("INSERT INTO story_articles VALUES ('a_joins_story_0001', 'st_one', ?, TIMESTAMP '2025-03-10 14:29')",
                    [NOW - timedelta(minutes=1)])
        con.execute("UPDATE stories SET articles = 2, sources = 2, updated_at = TIMESTAMP '2025-03-10 14:29' "
                    "WHERE id = 'st_one'")
    finally:
        con.close()
    second = _publish(home)
    p1, p2 = _parts(first), _parts(second)
    assert {p for p in p2 if p2[p] != p1.get(p)} == {HEAD, "m202502"}
    con, reader = open_reader(second)
    try:
        at = con.execute("SELECT published_at FROM news WHERE id = ?", [feb[0]]).fetchall()[0][0]
        rows = reader.news_page(PageRequest(first=100), NewsFilters(since=parse_instant(at.isoformat()),
                                                                    until=parse_instant(at.isoformat()))).rows
        story = {r["id"]: r["story"] for r in rows}[feb[0]]
        assert story["id"] == "st_one" and story["articleCount"] == 2
    finally:
        con.close()


# --------------------------------------------------------------------------------------------- paging over HTTP

NEWS = ("query($after: String) { cryptoNews(after: $after, first: 7) { pageInfo { hasNextPage endCursor } "
        "edges { node { id date } } } }")


def test_paging_visits_every_article_once_while_sets_are_published(tmp_path: Path) -> None:
    """Page through cryptoNews over HTTP; between pages, publish sets that add articles at the head, fill a closed
    month late, re-score a past day, close the head hour and then the day, and delete nothing the cursor has not
    passed. Every article older than the first page's start is seen exactly once, in serving order."""
    home = tmp_path / "home"
    home.mkdir()
    data = dataset()
    _warehouse(home, data)
    _publish(home)
    settings = Settings(home=home, snapshot_poll_seconds=0.05, pdf_prewarm=False)
    late: list[tuple[datetime, str]] = []
    steps = [
        lambda: _insert(home, "a_new_head_000001", NOW - timedelta(minutes=2)),  # newer than the start: not seen
        lambda: (_insert(home, "a_late_nov_000001", datetime(2024, 11, 20, 12, 0, 0)),  # inside the burst's month
                 late.append((datetime(2024, 11, 20, 12, 0, 0), "a_late_nov_000001"))),
        lambda: (_insert(home, "a_late_mar3_00001", datetime(2025, 3, 3, 1, 0)),
                 late.append((datetime(2025, 3, 3, 1, 0), "a_late_mar3_00001"))),
        "close-hour",
        "close-day",
        "close-month",
    ]
    # what each set must have rebuilt or closed (a period whose part file is new)
    wanted = [HEAD, "m202411", "d20250303", "h20250310T14", "d20250310", "m202503"]
    seen: list[tuple[str, str]] = []
    switches = 0
    manifest = current_snapshot(home / "snapshots")
    with ApiServer(create_app(settings, access=StaticKeys([KEY]))) as srv:
        after = None
        now = NOW
        for i in range(200):
            r = httpx.post(srv.url(f"/crypto-news/{KEY}"), json={"query": NEWS, "variables": {"after": after}},
                           timeout=30)
            assert r.status_code == 200 and "errors" not in r.json(), r.text
            conn = r.json()["data"]["cryptoNews"]
            seen += [(e["node"]["date"], e["node"]["id"]) for e in conn["edges"]]
            if not conn["pageInfo"]["hasNextPage"]:
                break
            after = conn["pageInfo"]["endCursor"]
            if i % 4 == 1 and steps:  # publish a new set every few pages
                step = steps.pop(0)
                if step == "close-hour":
                    now = NOW + timedelta(hours=1)
                elif step == "close-day":
                    now = NOW + timedelta(days=1)
                elif step == "close-month":
                    now = datetime(2025, 4, 2)
                else:
                    step()
                before = _parts(manifest)
                manifest = _publish(home, now=now)
                name = manifest.name
                assert _parts(manifest)[wanted[switches]] != before.get(wanted[switches]), (switches, _parts(manifest))
                deadline = time.monotonic() + 20
                while httpx.get(srv.url("/readyz")).json().get("snapshot") != name:
                    assert time.monotonic() < deadline, "the API did not switch to the new set"
                    time.sleep(0.05)
                switches += 1
    assert not steps and switches == 6
    ids = [i for _, i in seen]
    assert len(ids) == len(set(ids)), "an article was served twice"
    start = max((a["published_at"], a["id"]) for a in data.articles)
    everything = [(a["published_at"], a["id"]) for a in data.articles] + late
    expected = [i for _, i in sorted((k for k in everything if k <= start), reverse=True)]
    assert ids == expected


# --------------------------------------------------------------------------------------------- crashes

CRASHER = textwrap.dedent("""
    import sys
    from datetime import datetime
    from pathlib import Path
    from warehouse.db import connect
    from warehouse.parts import publish_set
    home = Path(sys.argv[1])
    con = connect(home / "warehouse.duckdb")
    publish_set(con, home / "snapshots", keep=2, now=datetime.fromisoformat(sys.argv[2]))
    con.close()
""")


@pytest.mark.parametrize("point", ["parts:writing", "parts:written", "snapshot:writing", "snapshot:written",
                                   "snapshot:published"])
def test_a_publish_killed_at_each_point_is_recovered(tmp_path: Path, point: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _warehouse(home, dataset())
    first = _publish(home, keep=2)
    _insert(home, "a_late_feb_0000001", datetime(2025, 2, 26, 5, 0))  # the next set rebuilds February
    env = {**os.environ, "CRYPTOWIRE_CRASH_AT": point, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    killed = subprocess.run([sys.executable, "-c", CRASHER, str(home), NOW.isoformat()], env=env,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    snapshots = home / "snapshots"
    repairs = repair_snapshots(snapshots)
    current = current_snapshot(snapshots)
    assert current is not None and valid_snapshot(current), (repairs, current)
    assert current == (first if point not in ("snapshot:published",) else list_snapshots(snapshots)[-1])
    assert not list(snapshots.glob(f"*{PARTIAL}")) and not list(snapshots.glob(".*.tmp"))
    con, layout = open_set(current)  # the API can open what CURRENT names
    try:
        assert con.execute("SELECT count(*) FROM news").fetchall()[0][0] in (400, 401)
    finally:
        con.close()
    again = _publish(home, keep=2)  # the next publish completes, and pruning collects what the crash left
    assert current_snapshot(snapshots) == again
    referenced = {n for m in list_snapshots(snapshots) for n in set_parts(m)}
    assert {p.name for p in list_parts(snapshots)} == referenced
    sidecars = {p.name for p in snapshots.glob("part-*.json")}
    assert sidecars == {n.removesuffix(".duckdb") + ".json" for n in referenced}
    con, reader = open_reader(again)
    try:
        assert reader.counts["news"] == 401 and repair_snapshots(snapshots, fix=False) == []
    finally:
        con.close()


# --------------------------------------------------------------------------------------------- pruning


def test_pruning_keeps_the_parts_of_kept_sets_and_spares_open_ones(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _warehouse(home, dataset())
    snapshots = home / "snapshots"
    first = _publish(home, keep=2)
    first_parts = _parts(first)
    holder = subprocess.Popen(  # another process (an API worker) serving the first set
        [sys.executable, "-c", "import sys; from pathlib import Path; from warehouse.parts import open_set; "
         "c, _ = open_set(Path(sys.argv[1])); print(c.execute('SELECT count(*) FROM news').fetchall()[0][0], "
         "flush=True); sys.stdin.read()", str(first)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "400"
        first_head = home / "snapshots" / first_parts[HEAD]
        for i in range(3):  # each set rebuilds February and the head
            _insert(home, f"a_late_feb_{i:07d}", datetime(2025, 2, 20 + i, 5, 0))
            _publish(home, keep=2)
        kept = list_snapshots(snapshots)
        assert len(kept) == 2 and first not in kept
        referenced = {n for m in kept for n in set_parts(m)}
        assert first_head.exists()  # held open by the other process: spared
        assert {p.name for p in list_parts(snapshots)} == referenced | {first_head.name, first_parts["m202502"]}
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    _publish(home, keep=2)
    referenced = {n for m in list_snapshots(snapshots) for n in set_parts(m)}
    assert {p.name for p in list_parts(snapshots)} == referenced and not first_head.exists()


# --------------------------------------------------------------------------------------------- migration


def test_a_home_of_single_files_moves_to_sets(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    data = dataset()
    _warehouse(home, data)
    con = connect(home / "warehouse.duckdb")
    try:
        old = [publish_snapshot(con, home / "snapshots", keep=3) for _ in range(2)]
    finally:
        con.close()
    fcon, reader = open_reader(old[-1])
    page = reader.news_page(PageRequest(first=50))
    cursor = page.rows[-1]["_cursor"]
    fcon.close()
    manifest = _publish(home, keep=2)
    assert list_snapshots(home / "snapshots") == [old[-1], manifest]  # the older single file pruned
    con, reader = open_reader(manifest)
    try:  # a cursor of the single file goes on in the set
        rest = []
        after = decode_news_cursor(cursor)
        while True:
            p = reader.news_page(PageRequest(first=60, after=after))
            rest += [r["id"] for r in p.rows]
            if not p.has_next:
                break
            after = decode_news_cursor(p.rows[-1]["_cursor"])
        assert [r["id"] for r in page.rows] + rest == data.news_order()
    finally:
        con.close()
    _publish(home, keep=2)
    assert all(p.name.startswith("set-") for p in list_snapshots(home / "snapshots"))
    info = json.loads(manifest.read_text())
    assert info["articles"] == 400 and info["format"] == SET_FORMAT


def test_a_set_of_format_2_is_served_and_the_next_publish_builds_every_part_anew(tmp_path: Path) -> None:
    """Format 3 added the events' change times: a home upgraded with a format-2 set serves it (those times null)
    until the next publish, which reuses none of its parts."""
    home = tmp_path / "home"
    data = dataset()
    _warehouse(home, data)
    manifest = _publish(home)
    info = json.loads(manifest.read_text())
    for entry in info["parts"]:  # what format 2 wrote
        con = duckdb.connect(str(home / "snapshots" / entry["name"]))
        for (index,) in con.execute("SELECT index_name FROM duckdb_indexes() WHERE table_name = 'events'").fetchall():
            con.execute(f"DROP INDEX {index}")
        con.execute("ALTER TABLE events DROP COLUMN updated_at")
        con.execute("ALTER TABLE events DROP COLUMN withdrawn_at")
        con.close()
    manifest.write_text(json.dumps({**info, "format": 2}))
    con, reader = open_reader(manifest)
    try:
        rows = reader.events_page(PageRequest(first=100), EventFilters()).rows
        assert len(rows) == len(data.events) and all(r["updatedAt"] is None for r in rows)
        since = parse_instant("2000-01-01")  # an older set knows only creation times
        assert len(reader.events_page(PageRequest(first=100), EventFilters(updated_since=since)).rows) == len(rows)
    finally:
        con.close()
    again = _publish(home)
    assert json.loads(again.read_text())["format"] == SET_FORMAT
    assert not set(_parts(again).values()) & {e["name"] for e in info["parts"]}
    con, reader = open_reader(again)
    try:
        assert all(r["updatedAt"] for r in reader.events_page(PageRequest(first=100), EventFilters()).rows)
    finally:
        con.close()


def test_readers_keep_a_set_open_across_a_switch_in_one_process(tmp_path: Path) -> None:
    """Two sets sharing part files open at once in one process (the API during a switch)."""
    home = tmp_path / "home"
    home.mkdir()
    _warehouse(home, dataset())
    first = _publish(home)
    _insert(home, "a_head_0000000001", NOW - timedelta(minutes=5))
    second = _publish(home)
    c1, _ = open_set(first)
    c2, _ = open_set(second)
    try:
        assert c1.execute("SELECT count(*) FROM news").fetchall()[0][0] == 400
        assert c2.execute("SELECT count(*) FROM news").fetchall()[0][0] == 401
    finally:
        c1.close()
        c2.close()
    with pytest.raises(duckdb.Error):  # read-only: nothing can write through a reader
        c3, _ = open_set(second)
        try:
            c3.execute("INSERT INTO p1.news SELECT * FROM p1.news LIMIT 1")
        finally:
            c3.close()


def test_a_part_damaged_on_disk_is_found_and_never_reused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _warehouse(home, dataset())
    first = _publish(home)
    snapshots = home / "snapshots"
    day = next(n for p, n in _parts(first).items() if p != HEAD)  # a closed period's part
    with open(snapshots / day, "r+b") as f:  # disk trouble: the file loses its second half
        f.truncate((snapshots / day).stat().st_size // 2)

    assert not valid_snapshot(first)
    found = repair_snapshots(snapshots, fix=False)  # what `cryptowire doctor --check` reports
    assert found and "not a complete snapshot" in found[0], found
    assert repair_snapshots(snapshots) and current_snapshot(snapshots) is None  # no intact set to point at

    second = _publish(home)  # the next run builds every period anew instead of reusing the damaged part
    assert day not in _parts(second).values() and valid_snapshot(second)
    con, reader = open_reader(second)
    try:
        assert reader.counts["news"] == len(dataset().articles)
    finally:
        con.close()
