"""Opening the warehouse and applying migrations (numbered SQL files, each applied once)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import duckdb

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# How long an open waits for another process's lock on the file to go: a writer outwaits a short query
# (`cryptowire sql`), a reader a writer that opens the file only between assets.
WRITER_LOCK_WAIT = 30.0
READER_LOCK_WAIT = 2.0


class WarehouseLocked(duckdb.IOException):
    """Another process holds the warehouse file. A subclass of DuckDB's own error, so existing handlers still
    catch it; its message says who holds the file and what to do."""


class WarehouseLogCorrupt(duckdb.IOException, ValueError):
    """The warehouse's write-ahead log is damaged on disk and DuckDB cannot replay it, so the warehouse cannot be
    opened at all. One line naming the file and what to do; ``reason`` is DuckDB's own. An IOException (as
    DuckDB's failed opens: ``cryptowire sql`` and ``status`` report those) and a ValueError (``cryptowire
    materialize`` reports those in one line); not a ``WarehouseLocked``, which callers wait out or retry."""

    def __init__(self, wal: Path, reason: str) -> None:
        self.wal, self.reason = wal, reason
        super().__init__(
            f"the warehouse's write-ahead log {wal} cannot be replayed ({reason}), so the warehouse does not open: "
            f"run `cryptowire doctor`, which moves the log aside as {wal.name}.corrupt-<UTC time> (the commits it "
            "holds are lost; the next `cryptowire materialize` fetches and scores again what the feeds still list)"
        )


def wal_path(path: Path) -> Path:
    """DuckDB's write-ahead log of the database file ``path``."""
    return Path(f"{path}.wal")


def _corrupt_log(path: Path, exc: duckdb.Error) -> WarehouseLogCorrupt | None:
    """DuckDB's "Failure while replaying WAL file ...: Corrupt WAL file: ... checksum ..." as our error."""
    text = str(exc)
    if "replaying WAL" not in text:
        return None
    reason = text.split('": ', 1)[-1].strip() if '": ' in text else text.strip()
    return WarehouseLogCorrupt(wal_path(path), reason)


def migrations() -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for every file in ``migrations/``, in order."""
    out = []
    for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        out.append((int(path.name[:4]), path.stem, path.read_text()))
    return out


class WarehouseTooNew(ValueError):
    """The warehouse records migrations this cryptowire does not know: a newer cryptowire migrated it. Opening it
    read-write (which migrates) is refused, as ``platform.sqlite`` is (``accounts.sqlite``); read-only opens go
    on. A ValueError: ``cryptowire materialize`` reports it in one line."""

    def __init__(self, path: Path | str | None, version: int, known: int) -> None:
        self.version, self.known = version, known
        where = f"the warehouse {path}" if path is not None else "the warehouse"
        super().__init__(
            f"{where} has schema version {version}, newer than this cryptowire knows ({known}): upgrade cryptowire "
            "(a newer cryptowire migrated it; an older one must not write it), or point CRYPTOWIRE_HOME elsewhere; "
            "reading it (`cryptowire sql`, `status`, `export`) still works"
        )


def latest_version() -> int:
    """The newest migration this cryptowire knows."""
    return max((version for version, _, _ in migrations()), default=0)


def schema_state(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[int]]:
    """``(pending, unknown)``: the names of the migrations this database lacks (the next read-write open applies
    them), and the versions it records that this cryptowire does not know (a newer one applied them). Reads only:
    a read-only connection will do."""
    has_table = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
    ).fetchall()[0][0]
    done = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()} if has_table else set()
    known = migrations()
    return [name for version, name, _ in known if version not in done], sorted(done - {v for v, _, _ in known})


def migrate(con: duckdb.DuckDBPyConnection, path: Path | str | None = None) -> list[str]:
    """Apply the migrations this database lacks, each in its own transaction; return their names.

    Raises ``WarehouseTooNew`` (applying nothing) when it records a migration this cryptowire does not know.
    ``path``: the database's file, named in that error."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP)"
    )
    _, unknown = schema_state(con)
    if unknown:
        raise WarehouseTooNew(path, max(unknown), latest_version())
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


def _is_pipeline_step(pid: int) -> bool:
    """Whether ``pid`` runs Dagster (a step or the CLI's run): then it is not an analyst's connection to close."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return any("dagster" in a for a in args) or bool({"materialize", "backfill", "doctor"} & set(args))


def _locked(path: Path, read_only: bool, exc: duckdb.IOException, waited: float) -> WarehouseLocked:
    found = re.search(r"PID (\d+)", str(exc))
    holder = f"another process (PID {found.group(1)})" if found else "another process"
    if found and _is_pipeline_step(int(found.group(1))):
        holder = f"a step of a pipeline run (PID {found.group(1)})"
    if holder.startswith("a step"):
        advice = ("retry when that run has finished (`cryptowire status` shows it), or read the latest serving "
                  "snapshot instead (`cryptowire sql --snapshot ...`)")
    elif read_only:
        advice = ("it is being written, most likely by a running materialization; retry when the run has finished, "
                  "or read the latest serving snapshot instead (`cryptowire sql --snapshot ...`)")
    else:
        advice = ("DuckDB lets no process write while another has the file open, even read-only; close that "
                  "connection (a notebook, the duckdb CLI), then retry. To query while the pipeline runs, read the "
                  "latest serving snapshot instead (`cryptowire sql --snapshot ...`, or in Python "
                  "`warehouse.parts.connect_snapshot(path)` with the manifest snapshots/CURRENT names)")
    return WarehouseLocked(f"the warehouse {path} is held by {holder} (waited {waited:.0f} s): {advice}")


def _open(path: Path, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
    started = time.monotonic()
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            corrupt = _corrupt_log(path, exc)
            if corrupt is not None:  # from None: a 55-line traceback said neither what the log is nor what to do
                raise corrupt from None
            if not isinstance(exc, duckdb.IOException) or "lock" not in str(exc).lower():
                raise
            waited = time.monotonic() - started
            if waited >= wait:
                # from None: DuckDB's own text advises the *reader's* fix (-readonly), and run summaries show the
                # innermost cause; ours names the holder (its PID) and what to do.
                raise _locked(path, read_only, exc, waited) from None
            time.sleep(min(delay, max(0.0, wait - waited)))
            delay = min(1.0, delay * 2)


def connect(
    path: Path | str, *, read_only: bool = False, lock_wait: float | None = None
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse; read-write connections are migrated to the latest schema first (refused with
    ``WarehouseTooNew`` when a newer cryptowire migrated it; read-only connections open it all the same).

    While another process holds the file, the open retries for ``lock_wait`` seconds (default: 30 for a writer,
    2 for a reader), then raises ``WarehouseLocked`` naming the holder and what to do. A write-ahead log DuckDB
    cannot replay raises ``WarehouseLogCorrupt`` (``cryptowire doctor`` moves it aside).
    """
    path = Path(path)
    if read_only:
        if not path.exists():
            raise FileNotFoundError(
                f"no warehouse at {path}: run `cryptowire materialize` first (or set CRYPTOWIRE_HOME)"
            )
        con = _open(path, True, READER_LOCK_WAIT if lock_wait is None else lock_wait)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = _open(path, False, WRITER_LOCK_WAIT if lock_wait is None else lock_wait)
        try:
            migrate(con, path)
        except BaseException:  # WarehouseTooNew: refused, the file is not held open
            con.close()
            raise
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


def naive_utc(at: datetime) -> datetime:
    """A time as the warehouse stores it: UTC, naive (an aware time is converted, a naive one taken as UTC)."""
    return at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo is not None else at
