"""From an operator's review that broke a data home the ways machines do (s47): damaged bytes, full and read-only
disks, damaged databases. Real DuckDB and SQLite files, the real CLI in processes of its own, no mocks.

- a ``snapshots/CURRENT`` holding bytes that are not UTF-8 stopped `doctor`, `materialize` and `up` with a
  UnicodeDecodeError traceback, though `status` sent the user to `doctor`;
- a CURRENT naming a part's file (not a set's manifest) was "nothing to repair" for `doctor`, and not servable;
- a warehouse damaged on disk (a block overwritten, a file emptied) was "nothing to repair" for `doctor` while every
  run failed on DuckDB's checksum error, and `export` blamed --out for a block it could not read;
- a keys database damaged on disk gave tracebacks (`keys list`, `usage`, `serve`), and an emptied one answered "no
  keys yet": every key lost without a word;
- on a read-only data home `status` gave a traceback (and, with the Dagster instance unreadable, hid the tables),
  `keys list` and `usage` failed writing the plans they had already recorded, `materialize` gave a traceback;
- after `doctor` found no complete snapshot (a damaged part), `status` said "nothing published yet".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.support.newsdata import Data, build, make_articles, make_events, republish
from warehouse.published import POINTER, current_snapshot
from warehouse.repair import repair_snapshots

CLI = str(Path(sys.executable).parent / "cryptowire")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    return {**env, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "false", "CRYPTOWIRE_PRICE_SOURCE_URL": ""}


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], env=_env(home), capture_output=True, text=True, timeout=300)


def test_a_current_of_damaged_bytes_is_repointed_by_doctor(tmp_path: Path) -> None:
    build(tmp_path, Data(make_articles(30, 3), make_events(4)), parts=True)
    newest = republish(tmp_path)
    pointer = tmp_path / "snapshots" / POINTER
    pointer.write_bytes(b"\xff\xfe\x00garbage\n")
    check = _run(tmp_path, "doctor", "--check", "--json")
    assert check.returncode == 1, check.stderr
    assert "not the name of a snapshot" in json.dumps(json.loads(check.stdout)), check.stdout
    fixed = _run(tmp_path, "doctor")
    assert fixed.returncode == 0, fixed.stderr
    assert "Traceback" not in fixed.stderr and newest.name in fixed.stdout, fixed.stdout
    assert current_snapshot(tmp_path / "snapshots") == newest
    assert _run(tmp_path, "doctor", "--check").returncode == 0


def test_a_current_naming_a_part_is_repointed_at_the_newest_set(tmp_path: Path) -> None:
    build(tmp_path, Data(make_articles(30, 3), make_events(4)), parts=True)
    newest = republish(tmp_path)
    snapshots = tmp_path / "snapshots"
    part = next(p for p in sorted(snapshots.glob("part-*.duckdb")))
    (snapshots / POINTER).write_text(part.name + "\n")
    (line,) = repair_snapshots(snapshots, fix=False)
    assert "not the name of a snapshot" in line and newest.name in line
    repair_snapshots(snapshots)
    assert current_snapshot(snapshots) == newest
    assert repair_snapshots(snapshots) == []


def _damage_table(warehouse: Path, table: str) -> None:
    """Overwrite bytes inside a block that holds ``table``'s data, as a disk's bad sector would."""
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        (block,) = con.execute(f"SELECT min(block_id) FROM pragma_storage_info('{table}') WHERE block_id >= 0").fetchone()
        (size,) = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    finally:
        con.close()
    assert block is not None
    with open(warehouse, "r+b") as f:
        f.seek(3 * 4096 + block * size + 64)  # three header pages, then the blocks
        f.write(os.urandom(4096))


def test_a_warehouse_damaged_on_disk_is_named_by_doctor_and_export(tmp_path: Path) -> None:
    build(tmp_path, Data(make_articles(400, 4), make_events(4)))
    warehouse = tmp_path / "warehouse.duckdb"
    _damage_table(warehouse, "articles")
    check = _run(tmp_path, "doctor", "--check", "--json")
    assert check.returncode == 1, check.stderr
    (line,) = json.loads(check.stdout)["damaged"]
    assert "is damaged (table articles" in line and "move it aside" in line, line
    plain = _run(tmp_path, "doctor")
    assert plain.returncode == 1 and "cannot repair: the warehouse" in plain.stdout, plain.stdout + plain.stderr
    out = tmp_path / "articles.csv"
    export = _run(tmp_path, "export", "--table", "articles", "--out", str(out))
    assert export.returncode == 1 and "Traceback" not in export.stderr
    assert "from the warehouse" in export.stderr and "cryptowire doctor" in export.stderr, export.stderr
    assert "--out" not in export.stderr and not out.exists()


def test_an_emptied_warehouse_is_said_by_doctor_status_and_export(tmp_path: Path) -> None:
    build(tmp_path, Data(make_articles(20, 2), make_events(2)))
    (tmp_path / "warehouse.duckdb").write_bytes(b"")
    doctor = _run(tmp_path, "doctor", "--check")
    assert doctor.returncode == 1 and "does not open" in doctor.stdout, doctor.stdout + doctor.stderr
    status = _run(tmp_path, "status")
    assert "cryptowire doctor" in status.stdout + status.stderr and "Traceback" not in status.stderr
    export = _run(tmp_path, "export", "--table", "articles", "--out", str(tmp_path / "a.parquet"))
    assert export.returncode == 1 and "cannot open the warehouse" in export.stderr, export.stderr
    assert "Traceback" not in export.stderr


@pytest.fixture
def keys_home(tmp_path: Path) -> Path:
    for n in range(12):  # enough rows that a cut file loses pages SQLite needs
        made = _run(tmp_path, "keys", "create", "--plan", "free", "--name", f"key-{n}")
        assert made.returncode == 0, made.stderr
    return tmp_path


def test_a_damaged_keys_database_is_one_line_everywhere(keys_home: Path) -> None:
    platform = keys_home / "platform.sqlite"
    for extra in keys_home.glob("platform.sqlite-*"):
        extra.unlink()  # the WAL was checkpointed at close; only the main file matters
    with open(platform, "r+b") as f:
        f.truncate(8192)
    for args in (("keys", "list"), ("usage",), ("serve", "--port", "1")):
        done = _run(keys_home, *args)
        assert done.returncode == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr and "is damaged" in done.stderr, (args, done.stderr)
    doctor = _run(keys_home, "doctor", "--check", "--json")
    assert doctor.returncode == 1
    assert any("platform database" in line for line in json.loads(doctor.stdout)["damaged"]), doctor.stdout


def test_an_emptied_keys_database_is_not_taken_for_a_fresh_start(keys_home: Path) -> None:
    platform = keys_home / "platform.sqlite"
    for extra in keys_home.glob("platform.sqlite-*"):
        extra.unlink()
    platform.write_bytes(b"")
    listed = _run(keys_home, "keys", "list")
    assert listed.returncode == 1 and "is empty (0 bytes" in listed.stderr, listed.stdout + listed.stderr
    assert platform.stat().st_size == 0  # nothing was written over it
    doctor = _run(keys_home, "doctor", "--check")
    assert doctor.returncode == 1 and "is empty (0 bytes" in doctor.stdout, doctor.stdout


def test_a_read_only_data_home_is_one_line_and_status_still_reads(tmp_path: Path) -> None:
    """A data home whose file system went read-only (a disk remounted after errors): readers say what they can,
    writers say why they cannot, none prints a traceback. Needs root, as mount does."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {made.stderr.strip()}")
    try:
        home = mnt / "home"
        build(home, Data(make_articles(20, 2), make_events(2)))
        assert _run(home, "keys", "create", "--plan", "free", "--name", "reader").returncode == 0
        assert _run(home, "doctor").returncode == 0  # the Dagster instance exists
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        status = _run(home, "status")
        assert status.returncode == 1 and "Traceback" not in status.stderr, status.stderr
        assert "tables:" in status.stdout and "runs: UNAVAILABLE, cannot open the Dagster instance" in status.stdout
        for args in (("keys", "list"), ("usage",)):  # they only read: the plans already recorded are not rewritten
            done = _run(home, *args)
            assert done.returncode == 0 and "reader" in done.stdout, (args, done.stdout + done.stderr)
        for args in (("materialize",), ("doctor", "--check"), ("keys", "create", "--plan", "free", "--name", "w")):
            done = _run(home, *args)
            assert done.returncode == 1 and "Traceback" not in done.stderr, (args, done.stderr)
            (line,) = [x for x in done.stderr.splitlines() if x.startswith("error: ")]
            assert "read-only" in line, (args, line)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_status_after_doctor_found_no_complete_snapshot_says_so(tmp_path: Path) -> None:
    build(tmp_path, Data(make_articles(30, 3), make_events(4)), parts=True)
    part = next(iter(sorted((tmp_path / "snapshots").glob("part-*.duckdb"))))
    with open(part, "r+b") as f:
        f.truncate(part.stat().st_size - 4096)  # a part cut short: its set is not complete
    assert _run(tmp_path, "doctor").returncode == 0
    assert not (tmp_path / "snapshots" / POINTER).exists()
    text = _run(tmp_path, "status").stdout
    # it said "nothing published yet", with the set still on disk
    assert "no complete snapshot to serve (1 on disk, none complete" in text, text


def test_the_keys_database_is_created_on_a_file_system_without_hard_links(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Created under a temporary name and linked into place; vfat and some network mounts have no hard links
    (os.link raises EPERM there), where it is renamed instead (a diff review, s47)."""
    import errno

    from accounts.sqlite import SqliteStore

    def no_links(src, dst):  # noqa: ANN001, ANN202  (the file system, not the code under test)
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    store = SqliteStore(tmp_path / "platform.sqlite")
    try:
        assert store.schema_version() > 0
    finally:
        store.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("platform.sqlite-")) == [
        "platform.sqlite"]


def test_a_creation_killed_before_its_link_leaves_nothing_for_long(tmp_path: Path) -> None:
    from accounts.sqlite import SqliteStore

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f".platform.sqlite.{dead.stdout.strip()}-abcd1234.new"  # a process that is gone
    left.write_bytes(b"SQLite format 3\x00")
    SqliteStore(tmp_path / "platform.sqlite").close()
    assert not left.exists()


def test_a_set_published_after_the_clock_went_back_is_still_the_newest(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Sets are named by their publication time and taken in name order (pruning, doctor's choice of the newest):
    one published after the clock went back was named before the older ones, and a doctor run pointed CURRENT back
    at an older set (a chaos review with faketime, s47). Its name now sorts after the newest one's."""
    from datetime import UTC, datetime

    from warehouse.parts import publish as parts_publish
    from warehouse.publish import list_snapshots

    build(tmp_path, Data(make_articles(30, 3), make_events(4)), parts=True)
    first = current_snapshot(tmp_path / "snapshots")
    monkeypatch.setattr(parts_publish, "clock", lambda: datetime(2020, 1, 1, tzinfo=UTC))  # years back
    second = republish(tmp_path)
    assert second != first and list_snapshots(tmp_path / "snapshots")[-1] == second
    (tmp_path / "snapshots" / POINTER).unlink()
    repair_snapshots(tmp_path / "snapshots")
    assert current_snapshot(tmp_path / "snapshots") == second
