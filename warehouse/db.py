"""Opening the warehouse and applying migrations (numbered SQL files, each applied once)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import duckdb

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def migrations() -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for every file in ``migrations/``, in order."""
    out = []
    for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        out.append((int(path.name[:4]), path.stem, path.read_text()))
    return out


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply the migrations this database lacks, each in its own transaction; return their names."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP)"
    )
    done = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
    applied = []
    for version, name, sql in migrations():
        if version in done:
            continue
        con.execute("BEGIN")
        try:
            con.execute(sql)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                [version, name, datetime.now(UTC).replace(tzinfo=None)],
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


def connect(path: Path | str, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the warehouse; read-write connections are migrated to the latest schema first."""
    path = Path(path)
    if read_only:
        if not path.exists():
            raise FileNotFoundError(
                f"no warehouse at {path}: run `cryptowire materialize` first (or set CRYPTOWIRE_HOME)"
            )
        con = duckdb.connect(str(path), read_only=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(path))
        migrate(con)
    con.execute("SET TimeZone = 'UTC'")
    return con


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """One transaction: committed when the block ends, rolled back (table as it was) when it raises."""
    con.execute("BEGIN")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def utcnow() -> datetime:
    """Now, UTC, naive (how the warehouse stores time)."""
    return datetime.now(UTC).replace(tzinfo=None)
