"""The embedded platform store: keys, plans and daily usage counters in SQLite (WAL mode), under the data home.

Charging happens in ``BEGIN IMMEDIATE`` transactions: an upsert adds the cost only ``WHERE used + cost <= limit``,
and the per-API row is updated in the same transaction. So a charge is either fully recorded or not at all,
concurrent charges (threads or processes) never overdraw the allowance, and ``CHECK (used >= 0)`` keeps balances
non-negative. ``charge_many`` commits many charges at once (group commit, see ``limits.StoreCounters``).
WAL with ``synchronous=NORMAL``: a committed charge survives the process being killed (``kill -9``); only an OS
crash or power loss can drop the last commits.

The schema is versioned (``schema_version``, the same numbering as ``accounts.postgres``); migrations run when a
store is opened, under SQLite's write lock, so two processes starting at once apply each one exactly once.
"""

from __future__ import annotations

import errno
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from accounts import common
from accounts.apis import APIS
from accounts.keys import KeyRecord, new_key_id
from accounts.plans import Plan
from accounts.store import ChargeItem, KeyNotFound, StoreConfigError, Usage

# Version 1: the schema as it was before versioning (IF NOT EXISTS: a database made then is taken over as is).
SCHEMA = """
CREATE TABLE IF NOT EXISTS plans (
    name TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    price_usd TEXT NOT NULL,
    cu_per_day INTEGER NOT NULL,
    requests_per_second REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    plan TEXT NOT NULL,
    apis TEXT NOT NULL,              -- comma-separated API names
    created_at REAL NOT NULL,
    revoked_at REAL
);
-- The secrets of a key: one, or two during a rotation's grace period. Only the SHA-256 is stored.
CREATE TABLE IF NOT EXISTS key_secrets (
    key_hash TEXT PRIMARY KEY,
    key_id TEXT NOT NULL REFERENCES keys(id),
    prefix TEXT NOT NULL,
    last4 TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL
);
CREATE INDEX IF NOT EXISTS key_secrets_by_key ON key_secrets(key_id);
-- One row per key and UTC day: the total the allowance is checked against, and CU and requests per API.
CREATE TABLE IF NOT EXISTS usage_daily (
    key_id TEXT NOT NULL,
    day TEXT NOT NULL,               -- UTC date, YYYY-MM-DD
    used INTEGER NOT NULL CHECK (used >= 0),
{api_columns}
    PRIMARY KEY (key_id, day)
) WITHOUT ROWID;
"""

# The API set is fixed (accounts.apis.APIS); adding an API means adding its two columns (a migration).
_API_COLUMNS = "\n".join(
    f"    {api}_cu INTEGER NOT NULL DEFAULT 0 CHECK ({api}_cu >= 0),\n"
    f"    {api}_requests INTEGER NOT NULL DEFAULT 0 CHECK ({api}_requests >= 0)," for api in APIS
)
SCHEMA = SCHEMA.replace("{api_columns}", _API_COLUMNS)
_COUNTS = ", ".join(f"{api}_cu, {api}_requests" for api in APIS)
# One statement charges: it adds the cost only while the day's total stays within the limit (the WHERE), and
# returns nothing when it does not. A single write statement is atomic on its own (it takes the write lock
# before reading), so it needs no explicit transaction; BEGIN IMMEDIATE only groups several into one commit.
_CHARGE = (
    f"INSERT INTO usage_daily (key_id, day, used, {_COUNTS}) VALUES (?, ?, ?{', ?' * 2 * len(APIS)}) "
    "ON CONFLICT (key_id, day) DO UPDATE SET used = used + excluded.used, "
    + ", ".join(f"{c} = {c} + excluded.{c}" for c in _COUNTS.split(", "))
    + " WHERE used + excluded.used <= ? RETURNING used"
)
_REFUND = {
    api: f"UPDATE usage_daily SET used = used - ?, {api}_cu = {api}_cu - ?, {api}_requests = {api}_requests - 1 "
    f"WHERE key_id = ? AND day = ? AND used >= ? AND {api}_cu >= ? AND {api}_requests >= 1"
    for api in APIS
}
_LOOKUP = (
    "SELECT k.id, k.name, k.plan, k.apis, s.key_hash, k.revoked_at IS NOT NULL, s.expires_at "
    "FROM key_secrets s JOIN keys k ON k.id = s.key_id WHERE s.key_hash = ?"
)


# (version, statements): append new versions, never edit applied ones.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (1, [stmt.strip() for stmt in SCHEMA.split(";") if stmt.strip()]),
]
LATEST_VERSION = MIGRATIONS[-1][0]
_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
)

BUSY_TIMEOUT = 10.0  # seconds a call waits for another process's write lock
# A shorter wait for the calls made within ``SqliteStore.lock_wait`` (a context variable: asyncio.to_thread carries
# it into the worker thread that makes the call).
_WAIT: ContextVar[float | None] = ContextVar("cryptowire_sqlite_wait", default=None)

__all__ = ["KeyNotFound", "LATEST_VERSION", "SqliteStore"]


def _create(path: Path) -> None:
    """A new database is made beside its name and linked into place whole (never replacing one another process
    made meanwhile): a process killed while creating it leaves no empty ``platform.sqlite``, so an empty one is
    damage, never a fresh start."""
    for left in path.parent.glob(f".{path.name}.*.new"):  # a creation killed before its link: never in use again
        pid = left.name.removeprefix(f".{path.name}.").split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            left.unlink(missing_ok=True)
    if path.exists():
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.new")
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # writes the header: the file is a database from here on
        finally:
            db.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError as exc:
            if exc.errno not in NO_LINKS:
                raise
            if not path.exists():  # a file system without hard links (vfat, some network mounts): a rename
                os.rename(tmp, path)
        fsync_dir(path.parent)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            leftover.unlink(missing_ok=True)


NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_dir(path: Path) -> None:
    """As ``warehouse.publish.fsync_path``, which accounts may not import (it imports warehouse.config only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _empty(path: Path) -> str:
    return (f"the platform database {path} is empty (0 bytes; this cryptowire never leaves it so): if this data home "
            "had access keys, they are gone (restore the file from a backup); if it never had any (a cryptowire "
            "before 2026-11-28 stopped while creating it), delete it")


def _damaged(path: Path, said: str) -> str:
    return (f"the platform database {path} is damaged ({said}): restore it from a backup (it holds the access keys, "
            "plans and usage), or move it aside to start with no keys")


def platform_damage(path: Path) -> str | None:
    """For ``cryptowire doctor``: why the database at ``path`` fails SQLite's own check (or is empty), or None
    (also when there is none yet). Opened read-only: nothing is created or changed."""
    if not path.exists():
        return None
    if path.stat().st_size == 0:
        return _empty(path)
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT)
        try:
            found = [str(row[0]) for row in con.execute("PRAGMA quick_check").fetchall()]
        finally:
            con.close()
    except sqlite3.Error as exc:
        found = [str(exc)]
    return None if found == ["ok"] else _damaged(path, "; ".join(found[:3]))


def cannot_use(path: Path, exc: BaseException) -> str:
    """One line for a platform database that cannot be opened: what SQLite said, and what to do."""
    said = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if "malformed" in said or "not a database" in said:
        return _damaged(path, said)
    if "locked" in said:
        return (f"the platform database {path} is locked ({said}): another process holds its write lock (a sqlite3 "
                "shell in a transaction, a stuck cryptowire); close it and run again")
    return (f"cannot open the platform database {path} ({said}): its disk may be full, read-only or failing; free "
            "space on it or make it writable, and run again")


class SqliteStore:
    """One SQLite connection, shared by the threads of one process under a lock (each call is short)."""

    # Async callers run these calls in a worker thread: a call is short, but another process holding the write
    # lock (a sqlite3 shell in BEGIN IMMEDIATE, another server's commit) makes it wait, and on the event loop
    # that wait stalled every request of the server, /healthz included.
    blocking = True

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _create(self.path)
            if self.path.stat().st_size == 0:
                raise StoreConfigError(_empty(self.path))
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT)
            try:
                self._wal()
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("PRAGMA foreign_keys=ON")
                self._migrate()
            except BaseException:
                self._db.close()
                raise
        except (sqlite3.Error, OSError) as exc:
            raise StoreConfigError(cannot_use(self.path, exc)) from exc

    def _wal(self) -> None:
        """Switch to WAL. Two processes creating the file at once can make this fail at once with "database is
        locked" (SQLite does not wait on a busy handler for it), so it is retried until ``BUSY_TIMEOUT``."""
        deadline = time.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _current_version(self) -> int:
        row = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if row is None:
            return 0
        return int(self._db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])

    def _migrate(self) -> None:
        """Bring the schema to LATEST_VERSION; idempotent, and safe when several processes open it at once (the
        version is read again under the write lock, so each migration runs once)."""
        if self._current_version() == LATEST_VERSION:
            return
        with self._locked(), self._tx() as db:
            db.execute(_VERSION_TABLE)
            current = self._current_version()
            if current > LATEST_VERSION:
                raise StoreConfigError(
                    f"the platform database {self.path} has schema version {current}, newer than this cryptowire "
                    f"knows ({LATEST_VERSION}): upgrade cryptowire, or point CRYPTOWIRE_HOME elsewhere"
                )
            common.apply_migrations(db.execute, MIGRATIONS, current, "INSERT INTO schema_version VALUES (?, ?)")

    def schema_version(self) -> int:
        with self._locked():
            return self._current_version()

    @contextmanager
    def lock_wait(self, seconds: float) -> Iterator[None]:
        """Calls made meanwhile (in this context, or in threads started from it) wait at most ``seconds`` in all,
        for this process's other calls and for another process's write lock (not ``BUSY_TIMEOUT``): for a caller
        with a deadline, since a call already in a worker thread cannot be cut short from outside."""
        token = _WAIT.set(max(0.0, seconds))
        try:
            yield
        finally:
            _WAIT.reset(token)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's calls one at a time (one connection); within ``lock_wait``, bounded by its time."""
        wait = _WAIT.get()
        if wait is None:
            with self._lock:
                yield
            return
        deadline = time.monotonic() + wait
        if not self._lock.acquire(timeout=wait):
            raise sqlite3.OperationalError(f"database is locked (this process's other calls held it for {wait:g} s)")
        try:
            left = max(0.0, deadline - time.monotonic())
            self._db.execute(f"PRAGMA busy_timeout = {int(left * 1000)}")
            try:
                yield
            finally:
                self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
        finally:
            self._lock.release()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the database's write lock up front (no lost updates)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        with self._locked():
            self._db.close()

    # --- plans -------------------------------------------------------------------
    def sync_plans(self, plans: Iterable[Plan]) -> None:
        """Record the plans in force (for reporting); the YAML file stays the source of truth. Plans already
        recorded as they are are not written again: commands that only read (``keys list``, ``usage``) work on a
        data home they cannot write (a read-only or full disk)."""
        now = time.time()
        plans = list(plans)
        with self._locked():
            stored = {row[0]: tuple(row) for row in self._db.execute(
                "SELECT name, title, price_usd, cu_per_day, requests_per_second FROM plans").fetchall()}
        if all(stored.get(p.name) == tuple(common.plan_row(p, now)[:5]) for p in plans):
            return
        with self._locked(), self._tx() as db:
            for p in plans:
                db.execute(
                    "INSERT INTO plans VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                    "title = excluded.title, price_usd = excluded.price_usd, cu_per_day = excluded.cu_per_day, "
                    "requests_per_second = excluded.requests_per_second, updated_at = excluded.updated_at",
                    common.plan_row(p, now),
                )

    # --- keys --------------------------------------------------------------------
    def _add_secret(self, db: sqlite3.Connection, key_id: str, now: float) -> str:
        key, row = common.new_secret(key_id, now)
        db.execute(
            "INSERT INTO key_secrets (key_hash, key_id, prefix, last4, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, NULL)",
            row,
        )
        return key

    def create_key(self, name: str, plan: str, apis: Iterable[str]) -> tuple[str, str]:
        """A new key; returns ``(id, key)``. The key itself is not stored and cannot be shown again."""
        key_id, now = new_key_id(), time.time()
        with self._locked(), self._tx() as db:
            db.execute(
                "INSERT INTO keys (id, name, plan, apis, created_at) VALUES (?, ?, ?, ?, ?)",
                (key_id, name, plan, ",".join(apis), now),
            )
            key = self._add_secret(db, key_id, now)
        return key_id, key

    def rotate_key(self, key_id: str, grace_seconds: float) -> str:
        """A new secret for the same key id (same plan, APIs and usage); the old secrets expire after the grace."""
        now = time.time()
        with self._locked(), self._tx() as db:
            row = db.execute("SELECT revoked_at FROM keys WHERE id = ?", (key_id,)).fetchone()
            if row is None or row[0] is not None:
                raise KeyNotFound(key_id)
            until = now + max(0.0, grace_seconds)
            db.execute(
                "UPDATE key_secrets SET expires_at = MIN(COALESCE(expires_at, ?), ?) WHERE key_id = ?",
                (until, until, key_id),
            )
            return self._add_secret(db, key_id, now)

    def revoke_key(self, key_id: str) -> None:
        with self._locked(), self._tx() as db:
            cur = db.execute(
                "UPDATE keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?", (time.time(), key_id)
            )
            if cur.rowcount == 0:
                raise KeyNotFound(key_id)

    def set_plan(self, key_id: str, plan: str) -> str:
        """Move a live key to ``plan`` (the caller checks it is offered); returns the plan it had. Today's usage
        stays with the key, so the new plan's allowance applies to what was already spent."""
        with self._locked(), self._tx() as db:
            row = db.execute("SELECT plan, revoked_at FROM keys WHERE id = ?", (key_id,)).fetchone()
            if row is None or row[1] is not None:
                raise KeyNotFound(key_id)
            db.execute("UPDATE keys SET plan = ? WHERE id = ?", (plan, key_id))
            return str(row[0])

    def lookup(self, key_hash: str) -> KeyRecord | None:
        with self._locked():
            row = self._db.execute(_LOOKUP, (key_hash,)).fetchone()
        return None if row is None else common.key_record(row)

    def keys(self, key_id: str | None = None) -> list[dict[str, Any]]:
        """Keys for listing (never the secret): id, name, plan, apis, status, display forms of live secrets."""
        sql = "SELECT id, name, plan, apis, created_at, revoked_at FROM keys"
        args: tuple[Any, ...] = ()
        if key_id is not None:
            sql, args = sql + " WHERE id = ?", (key_id,)
        now = time.time()
        secrets_sql = "SELECT key_id, prefix, last4, created_at, expires_at FROM key_secrets"
        if key_id is not None:
            secrets_sql += " WHERE key_id = ?"
        with self._locked():
            rows = self._db.execute(sql + " ORDER BY created_at", args).fetchall()
            secrets = self._db.execute(secrets_sql + " ORDER BY created_at", args).fetchall()
        return common.key_listing(rows, secrets, now)

    # --- usage counters ----------------------------------------------------------
    def charge(self, key_id: str, day: str, api: str, cost: int, limit: int) -> tuple[bool, int]:
        """Add ``cost`` to the day's usage if it stays within ``limit``: ``(charged, used after)``."""
        return self.charge_many([(key_id, day, api, cost, limit)])[0]

    def charge_many(self, items: list[ChargeItem]) -> list[tuple[bool, int]]:
        """Several charges ``(key_id, day, api, cost, limit)``, written with ONE commit (group commit).

        The charges of one key and day are first tried as one conditional update of their sum; when the sum does
        not fit (the allowance is nearly spent), they are applied one by one, in order, so exactly those that fit
        pass (``common.charge_group``). Returns ``(charged, used after)`` per item.
        """
        groups = common.group_charges(items)
        results: list[tuple[bool, int]] = [(False, 0)] * len(items)
        with self._locked():
            if len(groups) == 1:  # usually one statement, which is its own transaction and commit
                common.charge_group(items, next(iter(groups.items())), results, self._charge_row, self._used)
                return results
            with self._tx():  # several keys: one commit for all
                for group in groups.items():
                    common.charge_group(items, group, results, self._charge_row, self._used)
        return results

    def _charge_row(self, key_id: str, day: str, cost: int, counts: common.Counts, limit: int) -> int | None:
        # fetchall: run the statement to its end, so that in autocommit mode it has committed on return
        rows = self._db.execute(_CHARGE, common.charge_args(key_id, day, cost, counts, limit)).fetchall()
        return rows[0][0] if rows else None

    def refund(self, key_id: str, day: str, api: str, cost: int) -> int:
        """Take back one charge (bad input, failed render); never below zero."""
        with self._locked():
            self._db.execute(_REFUND[api], (cost, cost, key_id, day, cost, cost))
            return self._used(key_id, day)

    def _used(self, key_id: str, day: str) -> int:
        row = self._db.execute(
            "SELECT used FROM usage_daily WHERE key_id = ? AND day = ?", (key_id, day)
        ).fetchone()
        return row[0] if row else 0

    def used(self, key_id: str, day: str) -> int:
        with self._locked():
            return self._used(key_id, day)

    def history(self, key_id: str, days: list[str]) -> Usage:
        """``{day: {api: (cu, requests)}}`` for the given days (days with nothing are absent)."""
        if not days:
            return {}
        marks = ",".join("?" * len(days))
        with self._locked():
            rows = self._db.execute(
                f"SELECT day, {_COUNTS} FROM usage_daily WHERE key_id = ? AND day IN ({marks})", (key_id, *days)
            ).fetchall()
        return common.usage_by_day(rows)


