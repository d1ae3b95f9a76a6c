"""CLI fixes from a review that killed real processes: `export` killed mid-write leaves no truncated file under the
final name and no temporary the next export does not take over; `sql --snapshot` and `plot` give one error line
for a damaged snapshot; a full disk under the data home is one error line from `materialize`, not a traceback."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.support.newsdata import Data, build, make_articles
from warehouse import db
from warehouse.config import PROJECT_ROOT

runner = CliRunner()
ROWS = 200_000  # raw_articles rows: an export writes for a few tenths of a second, long enough to be killed in


def partial_path(out: Path) -> Path:
    """Where an export to ``out`` writes before the rename: a name the next export (and a user) can find."""
    return out.with_name(f".{out.name}.partial")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`cryptowire` in a process of its own, with the test's environment (CRYPTOWIRE_HOME)."""
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=120)


# --- export killed mid-write -------------------------------------------------------------------------------------
@pytest.fixture
def big_warehouse(data_home: Path) -> Path:
    """A real, migrated warehouse whose raw_articles holds ROWS rows (CSV: about 70 MB)."""
    con = db.connect(data_home / "warehouse.duckdb")
    try:
        con.execute("""
            INSERT INTO raw_articles BY NAME
            SELECT 'a_' || range AS id, 'Test' AS source_name, 'http://127.0.0.1/f' AS feed_url,
                   'Bitcoin headline ' || range AS title,
                   concat_ws(' ', md5(range::VARCHAR), md5((range + 1)::VARCHAR), md5((range + 2)::VARCHAR),
                             md5((range + 3)::VARCHAR), md5((range + 4)::VARCHAR)) AS summary,
                   [] AS authors, ['markets'] AS categories, TIMESTAMP '2026-01-01' + to_seconds(range) AS published_at,
                   false AS date_inferred, TIMESTAMP '2026-01-01' AS fetched_at, TIMESTAMP '2026-01-01' AS updated_at,
                   md5(range::VARCHAR) AS content_hash
            FROM range(?)""", [ROWS])
    finally:
        con.close()
    return data_home


def _kill_mid_write(out: Path) -> None:
    """Start `export --table raw_articles --out out` and SIGKILL it once a file it writes in out's directory (the
    temporary, or out itself) has grown past 64 KiB."""
    before = {p.name: p.stat().st_size for p in out.parent.iterdir()}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "export", "--table", "raw_articles",
                             "--out", str(out)], cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            written = [p for p in out.parent.iterdir() if p.name not in before or p.stat().st_size != before[p.name]]
            if any(p.stat().st_size >= 64 * 1024 for p in written if p.exists()):
                break
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the export ended before it could be killed mid-write"


def test_a_killed_export_leaves_no_file_under_the_final_name(big_warehouse: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "raw.csv"
    _kill_mid_write(out)
    assert not out.exists(), "a truncated export under the final name"
    assert partial_path(out).exists()  # what the kill left, under the predictable name

    res = _cli("export", "--table", "raw_articles", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == ["raw.csv"]  # the killed one's temporary was taken over
    assert pl.read_csv(out).height == ROWS


def test_a_killed_export_over_a_file_keeps_it_and_leaves_nothing_beside_it(
    big_warehouse: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "raw.parquet"
    res = _cli("export", "--table", "feed_fetches", "--out", str(out))  # a complete file (of an empty table)
    assert res.returncode == 0, res.stderr
    old = out.read_bytes()
    _kill_mid_write(out)
    assert out.read_bytes() == old
    # what the kill left has the name the next export looks for (DuckDB's own would be tmp_raw.parquet)
    assert sorted(p.name for p in out_dir.iterdir()) == [partial_path(out).name, "raw.parquet"]

    res = _cli("export", "--table", "raw_articles", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == ["raw.parquet"], "a killed export's temporary is left"
    assert pl.read_parquet(out).height == ROWS


def test_an_export_refuses_a_temporary_another_export_is_writing(big_warehouse: Path, tmp_path: Path) -> None:
    out = tmp_path / "raw.csv"
    partial = partial_path(out)
    with open(partial, "w") as held:  # as a running export holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        res = runner.invoke(app, ["export", "--table", "feed_fetches", "--out", str(out), "--json"])
        assert res.exit_code == 1
        assert json.loads(res.stdout)["error"].startswith(f"--out {out}: another export to it is running")
        assert res.stderr.count("\n") == 1
        assert partial.exists() and not out.exists()


# --- a damaged snapshot ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def published_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data home with a real warehouse and its published snapshot, a set of parts; tests damage copies."""
    home = tmp_path_factory.mktemp("published") / "home"
    build(home, Data(make_articles(60, 0, start=datetime(2026, 11, 20, 8, 0)), []), parts=True)
    return home


def _truncate_manifest(snapshots: Path) -> None:
    manifest = snapshots / (snapshots / "CURRENT").read_text().strip()
    manifest.write_bytes(manifest.read_bytes()[:100])


def _garbage_pointer(snapshots: Path) -> None:
    (snapshots / "CURRENT").write_text("set-garbage\n")


def _dangling_pointer(snapshots: Path) -> None:
    (snapshots / "CURRENT").write_text("set-20990101T000000000000Z-abcdef.json\n")


def _cut_part(snapshots: Path) -> None:
    part = sorted(snapshots.glob("part-d*.duckdb"))[-1]
    os.truncate(part, part.stat().st_size // 3)


def _corrupt_part(snapshots: Path) -> None:
    """Overwrite a block in the middle of the newest day's part: its size stays, its checksums no longer match."""
    part = sorted(snapshots.glob("part-d*.duckdb"))[-1]
    with open(part, "r+b") as f:
        f.seek(270_000)
        f.write(b"\xff" * 8192)


DAMAGE = {
    "manifest cut to 100 bytes": (_truncate_manifest, "its manifest is damaged (not valid JSON"),
    "CURRENT names garbage": (_garbage_pointer, "CURRENT names 'set-garbage', which is not a snapshot file"),
    "CURRENT names a missing file": (_dangling_pointer, "which does not exist"),
    "a part cut short": (_cut_part, "IO Error: Could not read enough bytes from file"),
    "a part corrupt": (_corrupt_part, "Corrupt database file"),
}
COMMANDS = {
    "sql": ["sql", "--snapshot", "SELECT count(*) FROM news"],
    "plot": ["plot", "sentiment", "--ticker", "BTC", "--since", "2026-11-01", "--until", "2026-11-20"],
}


@pytest.fixture
def damaged_home(published_set: Path, data_home: Path) -> Path:
    shutil.copytree(published_set, data_home)
    return data_home


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_snapshot_is_one_error_line(damaged_home: Path, tmp_path: Path, damage: str, command: str) -> None:
    do_damage, says = DAMAGE[damage]
    do_damage(damaged_home / "snapshots")
    args = [*COMMANDS[command], "--json"] + (["--out", str(tmp_path / "btc.png")] if command == "plot" else [])
    res = runner.invoke(app, args)
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    assert says in res.stderr and "`cryptowire doctor`" in res.stderr, res.stderr
    assert json.loads(res.stdout) == {"error": res.stderr.removeprefix("error: ").strip(), "exitCode": 1}


# --- a full disk under the data home ----------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 6 MiB file system (tmpfs); needs root, as mount does."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_a_full_disk_mid_run_is_one_error_line(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = small_disk / "home"
    monkeypatch.setenv("CRYPTOWIRE_HOME", str(home))
    monkeypatch.delenv("CRYPTOWIRE_FEEDS_FILE", raising=False)
    res = _cli("materialize", "--select", "crypto_assets")  # the instance's SQLite files and the warehouse exist
    assert res.returncode == 0, res.stderr
    free = shutil.disk_usage(small_disk).free
    with open(small_disk / "filler", "wb") as f:  # 100 KiB left: the run starts, then its event log fills it
        os.posix_fallocate(f.fileno(), 0, free - 100 * 1024)

    res = _cli("materialize", "--select", "crypto_assets", "--json")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and res.stderr.splitlines()[-1] == errors[0], res.stderr
    # SQLite says one or the other, depending on the write that found no room
    assert re.match(rf"error: cannot write to the data home {re.escape(str(home))} \((database or disk is full|disk "
                    r"I/O error); 0\.\d MiB free there\)", errors[0]), errors[0]
    assert "free space on it (or set CRYPTOWIRE_HOME to a disk with room)" in errors[0]
    assert json.loads(res.stdout) == {"error": errors[0].removeprefix("error: "), "exitCode": 1}
