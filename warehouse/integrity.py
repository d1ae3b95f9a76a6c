"""Reading the warehouse whole, for ``cryptowire doctor`` (``accounts.sqlite.platform_damage`` checks the keys).

Damage a crash does not cause (a disk's bad blocks, a file cut short or overwritten by another program) shows only
when a damaged block is read: every run after it fails in whichever step reads it first, with DuckDB's checksum
error. Nothing here repairs: what the file held cannot be rebuilt from it, so the line says what to do.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from warehouse import db

# What DuckDB says of a file damaged on disk (a block's checksum, a file cut short or overwritten).
DAMAGE = ("Corrupt database file", "is not a valid DuckDB database file", "attempted to read")
DAMAGE_HINT = "a database file is damaged on disk: run `cryptowire doctor`, which names it and says what to do"


def is_damage(message: str) -> bool:
    return any(mark in message for mark in DAMAGE)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def warehouse_advice(path: Path) -> str:
    return (f"cryptowire cannot repair it: move it aside (keep it: a DuckDB expert may recover rows from it) and run "
            f"`cryptowire materialize`, which builds a new warehouse at {path} from the feeds (articles they no "
            "longer list are lost; access keys and usage live elsewhere and are kept), or put back a copy of it")


def warehouse_damage(path: Path) -> str | None:
    """Why the warehouse at ``path`` cannot be read whole, or None (also when there is none yet). Every table is
    read, every column (DuckDB checks each block's checksum as it reads it). Raises ``db.WarehouseLocked`` when a
    writer holds the file."""
    if not path.exists():
        return None
    try:
        con = db.connect(path, read_only=True, lock_wait=0)
    except (db.WarehouseLocked, db.WarehouseLogCorrupt):
        raise
    except duckdb.Error as exc:
        if not is_damage(str(exc)):  # no permission, a newer DuckDB's file: not damage, and nothing to move aside
            return f"cannot read the warehouse {path}: {_first_line(exc)}"
        return f"the warehouse {path} does not open ({_first_line(exc)}): {warehouse_advice(path)}"
    try:
        tables = [t for (t,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY table_name"
        ).fetchall()]
        for table in tables:
            try:
                # a hash of every whole row: every block of every column is read (20x faster than writing CSV)
                con.execute(f'SELECT bit_xor(hash(r)) FROM "{table}" AS r').fetchall()
            except duckdb.Error as exc:
                return f"the warehouse {path} is damaged (table {table}: {_first_line(exc)}): {warehouse_advice(path)}"
    finally:
        con.close()
    return None
