"""Crash review of partitioned snapshots and the warehouse log (three defects, each test seen failing without its
fix):

- a publish that fails (a full disk) removes the parts it wrote, and doctor / the repair a run does first remove
  parts no set references (a publish killed before its manifest), but never while a publish runs;
- a part overwritten in place (same size) is found by its checksum: doctor reports it, the next publish builds
  its period anew, and the API serves every page;
- a write-ahead log DuckDB cannot replay is a one-line error pointing at `cryptowire doctor`, which moves it
  aside (kept) so that the warehouse opens again.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
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
from warehouse import db
from warehouse.config import Settings
from warehouse.parts import HEAD, publish_set, read_manifest, set_parts
from warehouse.publish import list_parts, list_snapshots
from warehouse.published import current_snapshot
from warehouse.repair import repair_snapshots, replay_warehouse_wal, valid_snapshot
from warehouse.sentiment import refresh_asset_sentiment

PROJECT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "cryptowire"
NOW = datetime(2025, 3, 10, 14, 30)  # closed months to Feb 2025, days Mar 1-9, hours of Mar 10, the head
KEY = "review-key"


def dataset() -> Data:
    return Data(make_articles(400, 30, seed=5, start=NOW - timedelta(minutes=20)),
                make_events(40, start=NOW - timedelta(minutes=10)))


def _warehouse(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    con = db.connect(home / "warehouse.duckdb")
    try:
        con.execute("BEGIN")
        write(con, dataset())
        con.execute("COMMIT")
        refresh_asset_sentiment(con)
    finally:
        con.close()


def _publish(home: Path, keep: int = 3) -> Path:
    con = db.connect(home / "warehouse.duckdb")
    try:
        return publish_set(con, home / "snapshots", keep=keep, now=NOW)
    finally:
        con.close()


def _insert(home: Path, article_id: str, at: datetime) -> None:
    con = db.connect(home / "warehouse.duckdb")
    try:
        con.execute(
            """INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories,
                   published_at, fetched_at, content_hash, sentiment, sentiment_score, tickers, topics)
               VALUES (?, 'Late', 'f', ?, 't', 's', [], [], ?, now()::TIMESTAMP, 'h', 'neutral', 0.0, [], [])""",
            [article_id, f"https://late.example/{article_id}", at],
        )
    finally:
        con.close()


def _files(snapshots: Path) -> dict[str, bytes]:
    """Every file of the directory but the publish lock, with its content."""
    return {p.name: p.read_bytes() for p in sorted(snapshots.iterdir()) if p.name != ".publish.lock"}


def _parts(manifest: Path) -> dict[str, str]:
    return {e["period"]: e["name"] for e in read_manifest(manifest)["parts"]}


def _all_referenced(snapshots: Path) -> None:
    referenced = {n for m in list_snapshots(snapshots) for n in set_parts(m)}
    assert {p.name for p in list_parts(snapshots)} == referenced
    assert {p.name for p in snapshots.glob("part-*.json")} == {n.removesuffix(".duckdb") + ".json" for n in referenced}


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "false"}
    return subprocess.run([str(CLI), *args], env=env, capture_output=True, text=True, timeout=120)


# ------------------------------------------------------------------------------------------ A: a failed publish


class DiskFull:
    """The ``nth`` JSON document a publish writes (a part's sidecar, then the manifest) hits a full disk half
    way: the temp file exists, part written, when the write raises ENOSPC."""

    def __init__(self, nth: int) -> None:
        self.nth, self.calls = nth, 0
        self.real = json.dump

    def __call__(self, obj: Any, fp: Any, **kw: Any) -> None:
        self.calls += 1
        if self.calls == self.nth:
            fp.write(json.dumps(obj)[:10])
            raise OSError(errno.ENOSPC, "No space left on device")
        self.real(obj, fp, **kw)


def test_a_first_publish_failing_on_a_full_disk_leaves_no_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    _warehouse(home)
    (home / "snapshots").mkdir()
    full = DiskFull(nth=5)  # four closed periods' parts complete, the fifth's sidecar fails
    monkeypatch.setattr(json, "dump", full)
    with pytest.raises(OSError) as failed:
        _publish(home)
    assert failed.value.errno == errno.ENOSPC and full.calls == 5
    monkeypatch.undo()
    assert _files(home / "snapshots") == {}  # no part, sidecar, temp or .partial file stays

    manifest = _publish(home)  # the retry has the whole disk
    assert current_snapshot(home / "snapshots") == manifest and valid_snapshot(manifest)
    _all_referenced(home / "snapshots")


@pytest.mark.parametrize("where", ["part", "head", "manifest", "current"])
def test_an_incremental_publish_that_fails_leaves_the_directory_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    home = tmp_path / "home"
    _warehouse(home)
    first = _publish(home)
    _insert(home, "a_late_feb_0000001", datetime(2025, 2, 26, 5, 0))  # the next set builds February and the head
    before = _files(home / "snapshots")
    if where == "current":
        def no_space(*_args: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr("warehouse.parts.publish.point_to", no_space)
    else:  # JSON documents written in order: February's sidecar, the head's, the manifest
        monkeypatch.setattr(json, "dump", DiskFull(nth={"part": 1, "head": 2, "manifest": 3}[where]))
    with pytest.raises(OSError, match="No space left"):
        _publish(home)
    monkeypatch.undo()
    assert _files(home / "snapshots") == before  # CURRENT still names the first set; nothing new stays
    assert repair_snapshots(home / "snapshots", fix=False) == []

    again = _publish(home)
    assert again != first and current_snapshot(home / "snapshots") == again
    _all_referenced(home / "snapshots")
    con, reader = open_reader(again)
    try:
        assert reader.counts["news"] == 401
    finally:
        con.close()


CRASHER = textwrap.dedent("""
    import sys
    from datetime import datetime
    from pathlib import Path
    from warehouse.db import connect
    from warehouse.parts import publish_set
    home = Path(sys.argv[1])
    con = connect(home / "warehouse.duckdb")
    publish_set(con, home / "snapshots", now=datetime.fromisoformat(sys.argv[2]))
""")

LOCK_HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from warehouse.parts import publish_lock
    with publish_lock(Path(sys.argv[1])):
        print("held", flush=True)
        sys.stdin.read()
""")


def test_doctor_reports_and_removes_parts_no_set_references_unless_a_publish_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    snapshots = home / "snapshots"
    _warehouse(home)
    first = _publish(home)
    _insert(home, "a_late_feb_0000001", datetime(2025, 2, 26, 5, 0))
    env = {**os.environ, "CRYPTOWIRE_CRASH_AT": "parts:written", "PYTHONPATH": str(PROJECT)}
    killed = subprocess.run([sys.executable, "-c", CRASHER, str(home), NOW.isoformat()], env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    orphan = set(p.name for p in list_parts(snapshots)) - set(set_parts(first))
    assert len(orphan) == 1  # February's new part, complete, in no manifest

    # A publish in progress (another process holds its lock): its parts are not orphans yet.
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(snapshots)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert repair_snapshots(snapshots) == [] and orphan <= {p.name for p in list_parts(snapshots)}
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)

    check = _cli(home, "doctor", "--check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "needs repair: would remove 1 part file(s)" in check.stdout and "no snapshot set references" in check.stdout
    (line,) = repair_snapshots(snapshots)  # what `cryptowire doctor` and the start of every run do
    assert line.startswith("removed 1 part file(s)")
    assert set(set_parts(first)) == {p.name for p in list_parts(snapshots)}
    _all_referenced(snapshots)
    assert _cli(home, "doctor", "--check").returncode == 0


# ------------------------------------------------------------------------------ B: a part damaged in place


def _inside_news_titles(path: Path) -> int:
    """A file offset inside a block the part's news titles are stored in: damage there is what a read hits
    (DuckDB's file: three 4 KiB headers, then blocks, each an 8-byte checksum and its payload). The middle of a
    part this small is unused space, which damages nothing a query reads."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        block, offset = con.execute("SELECT block_id, block_offset FROM pragma_storage_info('news') "
                                    "WHERE column_name = 'title' AND block_id >= 0 LIMIT 1").fetchall()[0]
        block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchall()[0][0]
    finally:
        con.close()
    return 3 * 4096 + block * block_size + 8 + offset


def test_a_part_overwritten_in_place_is_reported_rebuilt_and_served(tmp_path: Path) -> None:
    home = tmp_path / "home"
    snapshots = home / "snapshots"
    _warehouse(home)
    first = _publish(home)
    entries = [e for e in read_manifest(first)["parts"] if e["period"] != HEAD]
    damaged = max(entries, key=lambda e: e["counts"]["news"])  # a closed period's part holding most articles
    path = snapshots / damaged["name"]
    size = path.stat().st_size
    at = _inside_news_titles(path)
    with open(path, "r+b") as f:  # disk trouble that keeps the size: 256 bytes overwritten
        f.seek(at)
        f.write(bytes(range(256)))
    assert path.stat().st_size == size

    assert not valid_snapshot(first)
    (found,) = repair_snapshots(snapshots, fix=False)  # what `cryptowire doctor --check` says
    assert damaged["name"] in found and "SHA-256" in found, found

    second = _publish(home)  # no repair first: the publish itself refuses to reuse the part
    rebuilt = _parts(second)
    assert rebuilt[damaged["period"]] != damaged["name"]
    unchanged = {p: n for p, n in _parts(first).items() if p not in (HEAD, damaged["period"])}
    assert {p: rebuilt[p] for p in unchanged} == unchanged  # only the damaged period was built anew
    assert valid_snapshot(second) and repair_snapshots(snapshots, fix=False) == []
    con, _ = open_reader(second)
    try:  # what the published_matches_warehouse check reads: every row of every table (it failed on a checksum)
        for table in ("news", "stories", "events", "sentiment"):
            con.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        con.close()

    settings = Settings(home=home, snapshot_poll_seconds=0.05, pdf_prewarm=False)
    query = ("query($after: String) { cryptoNews(after: $after, first: 50) { pageInfo { hasNextPage endCursor } "
             "edges { node { id title } } } }")
    seen: list[str] = []
    with ApiServer(create_app(settings, access=StaticKeys([KEY]))) as srv:
        assert httpx.get(srv.url("/readyz")).json().get("snapshot") == second.name
        after = None
        while True:
            r = httpx.post(srv.url(f"/crypto-news/{KEY}"), json={"query": query, "variables": {"after": after}},
                           timeout=30)
            assert r.status_code == 200 and "errors" not in r.json(), r.text
            page = r.json()["data"]["cryptoNews"]
            seen += [e["node"]["id"] for e in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
    assert seen == dataset().news_order()


def test_a_part_written_before_checksums_is_served_and_built_once_more(tmp_path: Path) -> None:
    home = tmp_path / "home"
    snapshots = home / "snapshots"
    _warehouse(home)
    first = _publish(home)
    for sidecar in snapshots.glob("part-*.json"):  # as the previous version wrote them
        data = json.loads(sidecar.read_text())
        del data["sha256"]
        sidecar.write_text(json.dumps(data))
    assert valid_snapshot(first) and repair_snapshots(snapshots, fix=False) == []  # still served
    second = _publish(home)
    assert not set(_parts(first).values()) & set(_parts(second).values())
    third = _publish(home)  # now checkable: reused
    assert {p: n for p, n in _parts(third).items() if p != HEAD} == {p: n for p, n in _parts(second).items()
                                                                   if p != HEAD}


# ------------------------------------------------------------------------------ C: a write-ahead log corrupted


WRITER = textwrap.dedent("""
    import os, signal, sys, duckdb
    con = duckdb.connect(sys.argv[1])
    con.execute("SET checkpoint_threshold = '1GB'")  # the commit stays in the log only
    con.execute("UPDATE articles SET title = 'lost with the log'")
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_corrupt_warehouse_log_is_one_line_and_doctor_moves_it_aside(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _warehouse(home)
    warehouse = home / "warehouse.duckdb"
    wal = home / "warehouse.duckdb.wal"
    out = subprocess.run([sys.executable, "-c", WRITER, str(warehouse)], capture_output=True, text=True)
    assert out.returncode == -signal.SIGKILL, out.stderr
    size = wal.stat().st_size
    with open(wal, "r+b") as f:  # 48 bytes overwritten in the middle: a checksum fails on replay
        f.seek(size // 2)
        f.write(b"\x5a" * 48)
    corrupt = wal.read_bytes()

    for read_only in (True, False):
        with pytest.raises(duckdb.Error) as raised:
            db.connect(warehouse, read_only=read_only, lock_wait=0)
        message = str(raised.value)
        assert "\n" not in message and str(wal) in message and "`cryptowire doctor`" in message, message
        assert isinstance(raised.value, ValueError | duckdb.IOException)  # what `materialize` and `sql` report
        assert not isinstance(raised.value, db.WarehouseLocked)  # not waited out nor retried
    (would,) = replay_warehouse_wal(warehouse, fix=False)  # doctor --check: says so, changes nothing
    assert would.startswith("would move warehouse.duckdb.wal aside: Corrupt WAL file"), would
    assert wal.read_bytes() == corrupt

    for args in (["status"], ["sql", "SELECT count(*) FROM articles"],
                 ["export", "--table", "articles", "--out", str(tmp_path / "a.parquet")]):
        done = _cli(home, *args)
        assert "Traceback" not in done.stderr and "cryptowire doctor" in done.stdout + done.stderr, done
    sql = _cli(home, "sql", "SELECT count(*) FROM articles")
    assert sql.returncode == 1 and len(sql.stderr.strip().splitlines()) == 1, sql.stderr
    check = _cli(home, "doctor", "--check")
    assert check.returncode == 1 and "needs repair: would move warehouse.duckdb.wal aside" in check.stdout, check

    fixed = _cli(home, "doctor")
    assert fixed.returncode == 0 and "repaired: moved warehouse.duckdb.wal aside as warehouse.duckdb.wal.corrupt-" \
        in fixed.stdout, fixed
    (aside,) = home.glob("warehouse.duckdb.wal.corrupt-*")
    assert aside.read_bytes() == corrupt and not wal.exists()  # kept, never deleted
    con = db.connect(warehouse, read_only=True)
    try:  # as of the last checkpoint: the update the log held is gone, the rest is there
        assert con.execute("SELECT count(*), count(*) FILTER (WHERE title = 'lost with the log') FROM articles"
                           ).fetchall() == [(400, 0)]
    finally:
        con.close()
    assert _cli(home, "doctor", "--check").returncode == 0


def test_a_backfill_on_a_corrupt_warehouse_log_is_one_line(tmp_path: Path, redis_url_server: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`backfill` printed WarehouseLogCorrupt's traceback (a diff review, s47: materialize's one-line errors were
    narrowed to the user's, and the log's damage was left out)."""
    home = tmp_path / "home"
    _warehouse(home)
    out = subprocess.run([sys.executable, "-c", WRITER, str(home / "warehouse.duckdb")], capture_output=True, text=True)
    assert out.returncode == -signal.SIGKILL, out.stderr
    wal = home / "warehouse.duckdb.wal"
    with open(wal, "r+b") as f:
        f.seek(wal.stat().st_size // 2)
        f.write(b"\x5a" * 48)
    monkeypatch.setenv("CRYPTOWIRE_REDIS_URL", redis_url_server)
    done = _cli(home, "backfill", "--since", "2024-12-01", "--until", "2024-12-02")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "cryptowire doctor" in done.stderr.strip().splitlines()[-1], done.stderr
