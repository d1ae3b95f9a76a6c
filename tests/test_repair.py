"""What a crash can leave in the data home's files, and its repair (warehouse/repair.py), on real DuckDB files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

from tests.support.newsdata import Data, build, make_articles, make_events, republish
from warehouse.publish import list_snapshots
from warehouse.published import POINTER, current_snapshot
from warehouse.repair import repair_snapshots, replay_warehouse_wal, valid_snapshot


def _published(home: Path, times: int = 2) -> list[Path]:
    paths = [build(home, Data(make_articles(40, 4), make_events(5)))]
    paths += [republish(home) for _ in range(times - 1)]
    return paths


def test_an_intact_data_home_needs_nothing(tmp_path: Path) -> None:
    _published(tmp_path)
    assert repair_snapshots(tmp_path / "snapshots") == []
    assert replay_warehouse_wal(tmp_path / "warehouse.duckdb") == []


def test_a_dangling_current_points_at_the_newest_complete_snapshot(tmp_path: Path) -> None:
    first, second = _published(tmp_path)
    snapshots = tmp_path / "snapshots"
    second.unlink()  # CURRENT now names a file that is gone
    assert repair_snapshots(snapshots, fix=False) and current_snapshot(snapshots) == second  # --check changes nothing
    (line,) = repair_snapshots(snapshots)
    assert "not a complete snapshot" in line and first.name in line
    assert current_snapshot(snapshots) == first


def test_a_missing_current_and_leftovers_of_a_publish(tmp_path: Path) -> None:
    first, second = _published(tmp_path)
    snapshots = tmp_path / "snapshots"
    (snapshots / POINTER).unlink()
    (snapshots / f".{POINTER}.abcd1234.tmp").write_text("snapshot-x.duckdb\n")
    half = snapshots / (second.name.replace(".duckdb", "9.duckdb") + ".partial")
    half.write_bytes(second.read_bytes()[: 100_000])  # a snapshot cut off while written
    newest_broken = snapshots / "snapshot-99991231T000000000000Z-ffffff.duckdb"
    newest_broken.write_bytes(b"not a database")  # complete name, broken content: never pointed to
    lines = repair_snapshots(snapshots)
    assert len(lines) == 3, lines
    assert not half.exists() and not list(snapshots.glob(f".{POINTER}.*"))
    assert current_snapshot(snapshots) == second and valid_snapshot(second) and not valid_snapshot(newest_broken)
    assert repair_snapshots(snapshots) == []  # a second pass finds nothing
    assert list_snapshots(snapshots)[-1] == newest_broken  # left for the normal pruning


def test_a_dangling_current_with_no_snapshot_left_is_removed(tmp_path: Path) -> None:
    (path,) = _published(tmp_path, times=1)
    path.unlink()
    (line,) = repair_snapshots(tmp_path / "snapshots")
    assert "no complete snapshot" in line and not (tmp_path / "snapshots" / POINTER).exists()


def test_the_log_of_a_killed_writer_is_replayed(tmp_path: Path) -> None:
    _published(tmp_path, times=1)
    warehouse = tmp_path / "warehouse.duckdb"
    # A real writer process commits a row and is killed before it checkpoints: the row lives only in the log.
    script = textwrap.dedent(f"""
        import os, signal, duckdb
        con = duckdb.connect({str(warehouse)!r})
        con.execute("SET checkpoint_threshold = '1GB'")
        con.execute("UPDATE articles SET title = 'committed before the kill' WHERE id = (SELECT min(id) FROM articles)")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == -signal.SIGKILL, out.stderr
    assert os.path.exists(f"{warehouse}.wal")
    (line,) = replay_warehouse_wal(warehouse)
    assert "replayed" in line and not os.path.exists(f"{warehouse}.wal")
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM articles WHERE title = 'committed before the kill'").fetchall() == [(1,)]
    finally:
        con.close()
