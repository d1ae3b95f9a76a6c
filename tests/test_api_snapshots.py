"""Publishing serving snapshots from a real warehouse, and switching between them under load.

The tests of the single file's layout, pruning and failure publish single files (``parts=False``); partitioned
sets have their own in tests/test_snapshot_parts.py. The rest follow ``CRYPTOWIRE_TEST_SNAPSHOTS``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import httpx
import pytest

from api.access import StaticKeys
from api.app import create_app
from api.snapshots import SnapshotManager
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_articles, make_events
from warehouse.config import Settings
from warehouse.db import connect
from warehouse.publish import in_use, list_snapshots, publish_snapshot
from warehouse.published import POINTER, current_snapshot
from warehouse.read import PageRequest, SnapshotReader


@pytest.fixture
def data() -> Data:
    return Data(make_articles(80, 30), make_events(12))


def test_publish_writes_serving_tables_in_order(tmp_path: Path, data: Data) -> None:
    home = tmp_path / "home"
    path = build(home, data, parts=False)
    assert current_snapshot(home / "snapshots") == path
    assert (home / "snapshots" / POINTER).read_text().strip() == path.name
    assert not list((home / "snapshots").glob("*.tmp")) and not path.with_name(path.name + ".wal").exists()
    con = duckdb.connect(str(path), read_only=True)
    try:
        ids = [r[0] for r in con.execute("SELECT id FROM news ORDER BY pos").fetchall()]
        assert ids == data.news_order()
        # Physically stored in serving order: a plain scan returns it.
        assert [r[0] for r in con.execute("SELECT id FROM news").fetchall()] == ids
        assert [r[0] for r in con.execute("SELECT pos FROM news").fetchall()] == list(range(len(ids)))
        assert [r[0] for r in con.execute("SELECT id FROM events ORDER BY pos").fetchall()] == data.event_order()
        sentiments = {r[0] for r in con.execute("SELECT DISTINCT sentiment FROM news").fetchall()}
        assert sentiments == {"Positive", "Negative", "Neutral"}
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert tables == {"news", "events", "filter_values", "sentiment", "stories", "snapshot_info", "assets"}
        columns = {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'news'").fetchall()}
        assert "content_html" not in columns and "feed_url" not in columns  # only what the API serves
        tag, articles, events = SnapshotReader.info(con)
        assert (articles, events) == (len(data.articles), len(data.events)) and len(tag) == 8
    finally:
        con.close()


def test_publish_keeps_the_newest_three(tmp_path: Path, data: Data) -> None:
    home = tmp_path / "home"
    first = build(home, data, parts=False)
    con = connect(home / "warehouse.duckdb")
    try:
        published = [first] + [publish_snapshot(con, home / "snapshots", keep=3) for _ in range(4)]
    finally:
        con.close()
    assert list_snapshots(home / "snapshots") == published[-3:]
    assert current_snapshot(home / "snapshots") == published[-1]


def test_publish_spares_a_snapshot_another_process_has_open(tmp_path: Path, data: Data) -> None:
    home = tmp_path / "home"
    first = build(home, data, parts=False)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"import duckdb, sys; c = duckdb.connect({str(first)!r}, read_only=True); print('open', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        assert in_use(first)
        con = connect(home / "warehouse.duckdb")
        try:
            for _ in range(3):
                publish_snapshot(con, home / "snapshots", keep=2)
        finally:
            con.close()
        assert first.exists()  # in use: kept for now
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert not in_use(first)
    con = connect(home / "warehouse.duckdb")
    try:
        publish_snapshot(con, home / "snapshots", keep=2)
    finally:
        con.close()
    assert not first.exists() and len(list_snapshots(home / "snapshots")) == 2


def test_a_failed_publish_leaves_the_current_snapshot(tmp_path: Path, data: Data) -> None:
    home = tmp_path / "home"
    path = build(home, data, parts=False)
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("DROP TABLE prediction_events")  # the copy now fails halfway
        with pytest.raises(duckdb.CatalogException):
            publish_snapshot(con, home / "snapshots")
    finally:
        con.close()
    assert current_snapshot(home / "snapshots") == path
    assert list_snapshots(home / "snapshots") == [path]  # the partial file is gone


def test_a_held_snapshot_stays_usable_after_a_switch(tmp_path: Path, data: Data) -> None:
    home = tmp_path / "home"
    build(home, data)

    async def scenario() -> None:
        manager = SnapshotManager(home / "snapshots", poll_seconds=60)
        await manager.start()
        try:
            with manager.acquire() as old:
                assert old is not None
                con = connect(home / "warehouse.duckdb")
                try:
                    publish_snapshot(con, home / "snapshots")
                finally:
                    con.close()
                assert await manager.refresh() is True
                assert manager.current is not old and old.retired and not old.closed
                with old.reader() as reader:  # the request that holds it still reads it
                    assert len(reader.news_page(PageRequest(first=5)).rows) == 5
            assert old.closed  # released by its last user
            assert await manager.refresh() is False
        finally:
            await manager.stop()

    asyncio.run(scenario())


@pytest.mark.slow
def test_switching_snapshots_under_load_loses_no_request(tmp_path: Path, data: Data) -> None:
    """Clients hammer the API while four newer snapshots are published: every request succeeds, and each answer
    comes from one snapshot (its newest article and its sources agree)."""
    home = tmp_path / "home"
    build(home, data)
    settings = Settings(home=home, snapshot_poll_seconds=0.05)
    query = "{ cryptoNews(first: 2) { edges { node { id sourceName } } } newsSources }"
    failures: list[str] = []
    answers: list[tuple[str, tuple[str, ...]]] = []
    stop = threading.Event()

    def client(url: str) -> None:
        with httpx.Client(timeout=30) as http:
            while not stop.is_set() and len(answers) < 5000:
                r = http.post(url, json={"query": query})
                if r.status_code != 200 or "errors" in r.json():
                    failures.append(f"{r.status_code} {r.text[:200]}")
                    continue
                d = r.json()["data"]
                answers.append((d["cryptoNews"]["edges"][0]["node"]["id"], tuple(d["newsSources"])))

    with ApiServer(create_app(settings, access=StaticKeys(["k"]))) as srv:
        threads = [threading.Thread(target=client, args=(srv.url("/crypto-news/k"),)) for _ in range(6)]
        for t in threads:
            t.start()
        generations = {}
        try:
            for gen in range(4):
                time.sleep(0.4)
                con = connect(home / "warehouse.duckdb")
                try:  # each generation adds a newer article from a new source
                    aid = f"a_gen{gen:013d}"
                    at = datetime(2025, 1, 1) + timedelta(hours=gen)
                    con.execute(
                        """INSERT INTO articles (id, source_name, feed_url, title, summary, authors, categories,
                               published_at, fetched_at, content_hash, tickers, topics)
                           VALUES (?, ?, 'f', 't', 's', [], [], ?, ?, 'h', [], [])""",
                        [aid, f"Gen {gen}", at, at],
                    )
                    publish_snapshot(con, home / "snapshots", keep=3)
                finally:
                    con.close()
                generations[aid] = gen
            deadline = time.monotonic() + 10
            while httpx.get(srv.url("/readyz")).json()["snapshot"] != current_snapshot(home / "snapshots").name:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.3)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        component = srv.server.config.app.state.cw.extras["news"]
        assert component.snapshots.switches == 5  # the first load and four switches
    assert not failures, failures[:5]
    assert len(answers) >= 100
    base_sources = tuple(sorted({a["source_name"] for a in data.articles}))
    seen_generations = set()
    for newest, sources in answers:
        gen = generations.get(newest, -1)
        seen_generations.add(gen)
        assert sources == tuple(sorted(base_sources + tuple(f"Gen {g}" for g in range(gen + 1)))), (newest, sources)
    assert seen_generations == {-1, 0, 1, 2, 3}
    assert len(list_snapshots(home / "snapshots")) == 3
