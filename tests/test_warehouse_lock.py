"""Another process holding the warehouse file: opens wait a little, then fail with an error that says what to do."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from warehouse import db

HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "ro")
print("holding", flush=True)
time.sleep(float(sys.argv[3]))
"""


def hold(path: Path, mode: str, seconds: float) -> subprocess.Popen[str]:
    """Another process (DuckDB locks are per process) that opens the file and keeps it open."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), mode, str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


@pytest.fixture()
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse.duckdb"
    db.connect(path).close()  # created and migrated
    return path


def test_a_reader_in_another_process_makes_the_writer_fail_with_advice(warehouse: Path) -> None:
    reader = hold(warehouse, "ro", 60)
    try:
        started = time.monotonic()
        with pytest.raises(db.WarehouseLocked) as err:
            db.connect(warehouse, lock_wait=0.5)
        assert time.monotonic() - started >= 0.5  # it waited before giving up
        message = str(err.value)
        assert f"PID {reader.pid}" in message
        assert "close that connection" in message and "--snapshot" in message
    finally:
        reader.kill()
        reader.wait()


def test_a_run_summary_shows_our_advice_not_duckdbs(warehouse: Path) -> None:
    from dagster._utils.error import serializable_error_info_from_exc_info

    from pipeline.jobs import root_cause

    reader = hold(warehouse, "ro", 60)
    try:
        try:
            db.connect(warehouse, lock_wait=0.2)
        except db.WarehouseLocked:
            info = serializable_error_info_from_exc_info(sys.exc_info())  # what Dagster records for a failed step
        shown = root_cause(info)
        assert shown.startswith("WarehouseLocked:") and "close that connection" in shown, shown
        assert "-readonly" not in shown  # DuckDB's advice is for the reader, not for the run that failed
    finally:
        reader.kill()
        reader.wait()


def test_the_writer_proceeds_once_the_reader_lets_go(warehouse: Path) -> None:
    reader = hold(warehouse, "ro", 1.0)
    try:
        con = db.connect(warehouse, lock_wait=30)  # waits out the reader, then opens and migrates
        assert con.execute("SELECT count(*) FROM schema_migrations").fetchall()[0][0] >= 1
        con.close()
    finally:
        reader.kill()
        reader.wait()


def test_a_reader_during_a_write_is_told_to_read_the_snapshot(warehouse: Path) -> None:
    writer = hold(warehouse, "rw", 60)
    try:
        with pytest.raises(db.WarehouseLocked) as err:
            db.connect(warehouse, read_only=True, lock_wait=0.2)
        assert f"PID {writer.pid}" in str(err.value) and "running materialization" in str(err.value)
    finally:
        writer.kill()
        writer.wait()


def test_cryptowire_sql_during_a_write_says_it_once(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app
    from warehouse.config import get_settings

    monkeypatch.setenv("CRYPTOWIRE_HOME", str(warehouse.parent))
    get_settings.cache_clear()
    writer = hold(warehouse, "rw", 60)
    try:
        res = CliRunner().invoke(app, ["sql", "SELECT 1"])
        assert res.exit_code != 0
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and f"PID {writer.pid}" in lines[0], lines
        assert lines[0].count("--snapshot") == 1 and lines[0].count("running materialization") == 1
    finally:
        writer.kill()
        writer.wait()
        get_settings.cache_clear()


def test_materialize_waits_for_a_reader_once_then_stops_before_the_run(warehouse: Path) -> None:
    """A notebook holding the file: the run says so once, after --wait-timeout, instead of every asset waiting
    out the same reader in turn; nothing is launched."""
    import os

    env = {**os.environ, "CRYPTOWIRE_HOME": str(warehouse.parent)}
    env.pop("CRYPTOWIRE_FEEDS_FILE", None)
    env.pop("DAGSTER_HOME", None)
    reader = hold(warehouse, "ro", 120)
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "materialize", "--wait-timeout", "2"],
                              env=env, capture_output=True, text=True, timeout=300)
        took = time.monotonic() - started
    finally:
        reader.kill()
        reader.wait()
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"PID {reader.pid}" in errors[0] and "close that connection" in errors[0], done.stderr
    assert "run " not in done.stdout  # no Dagster run was started
    assert took < 60, took  # one wait of 2 s, not one per asset
