"""The platform store on Postgres: keys, plans and daily usage counters shared by every API process and the CLI.

Chosen by ``CRYPTOWIRE_DATABASE_URL=postgresql://user:password@host:5432/db``. psycopg 3 with a small connection
pool of its own (``_Pool``: every call bounded, see below); the tables live in their own Postgres schema, ``accounts`` (the same database may hold Dagster's
instance).

- Charges: one statement per key and day, ``INSERT ... ON CONFLICT (key_id, day) DO UPDATE SET used = used + cost
  ... WHERE used + cost <= limit RETURNING used``. Postgres takes the row lock and re-checks the WHERE against the
  newest committed row, so concurrent charges from any number of processes never overdraw the allowance and each
  one is counted exactly once. Several keys in one group commit are written in one transaction, in key order (no
  deadlocks between processes). A request is answered after its charge is committed (``synchronous_commit`` as
  the server is configured: on by default, so a committed charge survives a crash of Postgres too).
- Key changes (revoke, rotate, set-plan) send ``NOTIFY cryptowire_keys`` in their transaction; API processes
  listening (``watch_keys``) drop their key cache at once. The cache's 1-second lifetime stays the bound when the
  notification is missed (listener reconnecting).
- Migrations: numbered, recorded in ``accounts.schema_version``, applied in one transaction under a
  transaction-level advisory lock, so processes starting at once apply each migration exactly once.
- Every call is bounded (``CALL_TIMEOUT``): connecting by ``connect_timeout``, the rest by a watchdog that shuts the
  connection's socket down at the deadline, so that the psycopg call blocked on it returns at once with an error.
  Against a server that hangs (stopped, partitioned: TCP up, no answers) neither a server-side
  ``statement_timeout`` nor a cancel request helps, and TCP keepalives are answered by the kernel.
- A write whose ``COMMIT`` was sent but not answered (the watchdog, a connection lost) may or may not have
  committed, and Postgres may still run it when it answers again. The call fails (the API answers 503, charging
  nothing) and the store keeps the transaction's id; before its next write it asks Postgres what became of it
  (``txid_status``, after ending the old backend if it still runs it) and undoes it if it committed: a charge is
  refunded, a refund charged again. So a call that raised has, in the end, no effect (``_Unsettled``).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from accounts import common
from accounts.apis import APIS
from accounts.keys import KeyRecord, new_key_id
from accounts.plans import Plan
from accounts.store import ChargeItem, KeyNotFound, StoreConfigError, StoreUnavailable, Usage

SCHEMA_NAME = "accounts"
NOTIFY_CHANNEL = "cryptowire_keys"
# pg_advisory_xact_lock key for migrations: any constant shared by every cryptowire process ("cwac").
MIGRATION_LOCK = 0x63776163
CONNECT_TIMEOUT = 5  # seconds, for the first connection and each new pooled one
# Seconds one call may take in all (a connection, its check, the statements, the commit): past it the watchdog cuts
# the connection and the call raises StoreUnavailable (the API answers 503 METERING_UNAVAILABLE).
CALL_TIMEOUT = 5.0
MIGRATE_TIMEOUT = 60.0  # opening the store: migrations may wait for another process's advisory lock
POOL_MAX = 8

log = logging.getLogger(__name__)

_S = SCHEMA_NAME
_API_COLUMNS = ",\n".join(
    f"    {api}_cu BIGINT NOT NULL DEFAULT 0 CHECK ({api}_cu >= 0),\n"
    f"    {api}_requests BIGINT NOT NULL DEFAULT 0 CHECK ({api}_requests >= 0)" for api in APIS
)
# Version 1: the same tables as the SQLite store's version 1.
_V1 = [
    f"""CREATE TABLE IF NOT EXISTS {_S}.plans (
    name TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    price_usd TEXT NOT NULL,
    cu_per_day BIGINT NOT NULL,
    requests_per_second DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
)""",
    f"""CREATE TABLE IF NOT EXISTS {_S}.keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    plan TEXT NOT NULL,
    apis TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION
)""",
    f"""CREATE TABLE IF NOT EXISTS {_S}.key_secrets (
    key_hash TEXT PRIMARY KEY,
    key_id TEXT NOT NULL REFERENCES {_S}.keys(id),
    prefix TEXT NOT NULL,
    last4 TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION
)""",
    f"CREATE INDEX IF NOT EXISTS key_secrets_by_key ON {_S}.key_secrets(key_id)",
    f"""CREATE TABLE IF NOT EXISTS {_S}.usage_daily (
    key_id TEXT NOT NULL,
    day TEXT NOT NULL,
    used BIGINT NOT NULL CHECK (used >= 0),
{_API_COLUMNS},
    PRIMARY KEY (key_id, day)
)""",
]
# (version, statements): append new versions, never edit applied ones (same numbering as accounts.sqlite).
MIGRATIONS: list[tuple[int, list[str]]] = [(1, _V1)]
LATEST_VERSION = MIGRATIONS[-1][0]

_COUNTS = [f"{api}_{what}" for api in APIS for what in ("cu", "requests")]
_CHARGE = (
    f"INSERT INTO {_S}.usage_daily AS u (key_id, day, used, {', '.join(_COUNTS)}) "
    f"VALUES (%s, %s, %s{', %s' * len(_COUNTS)}) "
    "ON CONFLICT (key_id, day) DO UPDATE SET used = u.used + excluded.used, "
    + ", ".join(f"{c} = u.{c} + excluded.{c}" for c in _COUNTS)
    + " WHERE u.used + excluded.used <= %s RETURNING u.used, txid_current()"
)
_REFUND = {
    api: f"UPDATE {_S}.usage_daily SET used = used - %s, {api}_cu = {api}_cu - %s, "
    f"{api}_requests = {api}_requests - 1 "
    f"WHERE key_id = %s AND day = %s AND used >= %s AND {api}_cu >= %s AND {api}_requests >= 1"
    for api in APIS
}
# Undoing a refund whose commit was not confirmed but happened (see _Unsettled).
_RECHARGE = {
    api: f"UPDATE {_S}.usage_daily SET used = used + %s, {api}_cu = {api}_cu + %s, "
    f"{api}_requests = {api}_requests + 1 WHERE key_id = %s AND day = %s"
    for api in APIS
}
_LOOKUP = (
    "SELECT k.id, k.name, k.plan, k.apis, s.key_hash, k.revoked_at IS NOT NULL, s.expires_at "
    f"FROM {_S}.key_secrets s JOIN {_S}.keys k ON k.id = s.key_id WHERE s.key_hash = %s"
)

_HOW = ("set CRYPTOWIRE_DATABASE_URL to postgresql://USER:PASSWORD@HOST:5432/DBNAME of a running Postgres "
        "(or, for a single machine only, unset it to keep keys and usage in SQLite under the data home)")
# A well-formed URL that fails: SQLite is no answer there (API instances on several machines would each get their
# own key store), the server or the credentials are.
_CHECK = ("check that Postgres is running there and reachable from this machine, and that the user, password and "
          "database in CRYPTOWIRE_DATABASE_URL are right")


def describe(url: str) -> str:
    """``host:port/dbname`` of a URL, never the password (for messages and logs)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - any parse failure: say nothing of its content
        return "(unparsable URL)"
    host = parts.get("host") or "localhost"
    return f"{host}:{parts.get('port') or 5432}/{parts.get('dbname') or parts.get('user') or ''}"


def check_url(url: str) -> None:
    """A one-line StoreConfigError unless ``url`` looks like a Postgres URL psycopg can parse."""
    if not url.startswith(("postgresql://", "postgres://")):
        scheme = url.split("://", 1)[0] + "://" if "://" in url else "no scheme"
        raise StoreConfigError(f"CRYPTOWIRE_DATABASE_URL must be a postgresql:// URL (got {scheme}): {_HOW}")
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except Exception as exc:  # noqa: BLE001
        raise StoreConfigError(f"CRYPTOWIRE_DATABASE_URL is not a valid Postgres URL "
                               f"({type(exc).__name__}): {_HOW}") from None


def _reason(exc: BaseException) -> str:
    """The first line of a psycopg error (they do not hold the password), cut short."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


# (what, key_id, day, api, cost): "refund" gives a charge back, "recharge" takes a refund back.
Op = tuple[str, str, str, str, int]


@dataclass
class _Unsettled:
    """A transaction whose COMMIT was sent but never answered: committed or not, Postgres knows (``txid_status``).
    ``if_committed`` undoes it; ``if_aborted`` is what is still owed when it did not commit (an undo that did not
    commit is owed again)."""

    xid: int
    pid: int  # the backend that ran it: ended first if it still does
    if_committed: list[Op]
    if_aborted: list[Op] = field(default_factory=list)


class _Alarm:
    __slots__ = ("fired",)

    def __init__(self) -> None:
        self.fired = False


def _cut(conn: Any) -> None:
    """Shut the connection's socket down (both ways): a psycopg call blocked on it in another thread gets EOF and
    raises OperationalError at once. The file descriptor stays open (its owner closes it), so it cannot be reused
    meanwhile."""
    try:
        fd = conn.pgconn.socket
    except Exception:  # noqa: BLE001 - already closed or broken: nothing to cut
        return
    try:
        with socket.socket(fileno=os.dup(fd)) as dup:
            dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Watchdog:
    """One thread that cuts the connections of calls past their deadline (``armed``). A cancel request would need
    the server to answer, and a stopped one does not; closing the connection from here while its owner uses it
    would free memory psycopg is using; shutting the socket down is safe and immediate."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, Any]] = {}
        self._fired: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    @contextmanager
    def armed(self, conn: Any, deadline: float) -> Iterator[_Alarm]:
        """Cut ``conn`` if the block is still running at ``deadline`` (monotonic); ``alarm.fired`` says so after."""
        token = next(self._tokens)
        alarm = _Alarm()
        with self._cond:
            self._armed[token] = (deadline, conn)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="accounts-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield alarm
        finally:
            with self._cond:  # the watchdog cuts under this lock: once here, the connection is ours again
                self._armed.pop(token, None)
                if token in self._fired:
                    self._fired.discard(token)
                    alarm.fired = True

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token in [t for t, (due, _) in self._armed.items() if due <= now]:
                    _, conn = self._armed.pop(token)
                    self._fired.add(token)
                    _cut(conn)
                nxt = min((due for due, _ in self._armed.values()), default=None)
                self._cond.wait(None if nxt is None else max(0.0, nxt - now))


class _NoConnection(Exception):
    """No pooled connection came free before the call's deadline."""


class _Pool:
    """At most ``max_size`` connections; idle ones are reused, last used first. No background reconnection (and no
    backoff): a call that needs a new connection makes it itself, so the first call after Postgres is back
    succeeds. ``acquire`` hands out an idle connection, or None when the caller is to connect (its slot is held
    either way); ``release`` gives the slot back, keeping the connection only if it is usable."""

    def __init__(self, max_size: int) -> None:
        self._slots = threading.BoundedSemaphore(max_size)
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._open = 0  # connections open, idle or in use
        self._closed = False

    def acquire(self, deadline: float) -> Any | None:
        if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise _NoConnection(f"no connection came free within {CALL_TIMEOUT:g} s")
        with self._lock:
            return self._idle.pop() if self._idle else None

    def opened(self) -> None:
        with self._lock:
            self._open += 1

    def release(self, conn: Any | None) -> None:
        from psycopg.pq import TransactionStatus

        keep = (conn is not None and not self._closed and not conn.closed
                and conn.pgconn.transaction_status == TransactionStatus.IDLE)
        try:
            if conn is not None and not keep:
                self._close(conn)
            elif conn is not None:
                with self._lock:
                    self._idle.append(conn)
        finally:
            self._slots.release()

    def _close(self, conn: Any) -> None:
        with self._lock:
            self._open -= 1
        try:  # a few bytes of goodbye: a socket buffer takes them even when the server hangs
            conn.close()
        except Exception:  # noqa: BLE001
            pass

    def discard(self, conn: Any) -> None:
        """Close a connection taken from the pool, keeping its slot (for a new connection)."""
        self._close(conn)

    def drop_idle(self) -> None:
        """Close every idle connection (after one turned out dead: Postgres restarted, they all are)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            self._close(conn)

    def close(self) -> None:
        self._closed = True
        self.drop_idle()

    def get_stats(self) -> dict[str, int]:
        with self._lock:
            return {"pool_size": self._open, "pool_available": len(self._idle)}


class PostgresStore:
    blocking = True  # network round trips: async callers run these calls in a worker thread

    def __init__(self, url: str, pool_max: int = POOL_MAX, call_timeout: float | None = None) -> None:
        import psycopg

        check_url(url)
        self.url = url
        self.where = describe(url)
        self.call_timeout = CALL_TIMEOUT if call_timeout is None else call_timeout
        self._watchdog = _Watchdog()
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
                with self._watchdog.armed(conn, time.monotonic() + MIGRATE_TIMEOUT) as alarm:
                    try:
                        self._migrate(conn)
                    except psycopg.Error:
                        if alarm.fired:
                            raise psycopg.OperationalError(f"no answer within {MIGRATE_TIMEOUT:g} s") from None
                        raise
        except psycopg.Error as exc:
            raise StoreConfigError(
                f"CRYPTOWIRE_DATABASE_URL: cannot use the Postgres database at {self.where} ({_reason(exc)}): "
                f"{_CHECK}"
            ) from None
        self._pool = _Pool(pool_max)
        self._unsettled: list[_Unsettled] = []  # writes whose commit was never confirmed (see _Unsettled)
        self._settling = threading.Lock()  # one thread settles them; the other writes wait for it
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        self._watchers: list[Callable[[str], None]] = []

    # --- plumbing ----------------------------------------------------------------
    @contextmanager
    def _conn(self, transaction: bool = False, settle: bool = False) -> Iterator[Any]:
        """A pooled connection (autocommit; ``transaction``: one transaction around the block) for at most
        ``call_timeout`` seconds in all; ``settle``: first settle the writes whose commit was not confirmed (every
        write does, so that it comes after them). psycopg and pool failures, and the deadline, become
        StoreUnavailable (the API answers 503)."""
        import psycopg

        deadline = time.monotonic() + self.call_timeout
        conn: Any = None
        alarm = _Alarm()
        try:
            conn = self._live_connection(deadline)
            with self._watchdog.armed(conn, deadline) as alarm:
                if settle and self._unsettled:
                    self._settle(conn, deadline)
                if transaction:
                    with conn.transaction():
                        yield conn
                else:
                    yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, _NoConnection) as exc:
            why = (f"no answer within {self.call_timeout:g} s" if alarm.fired
                   else f"{type(exc).__name__}: {_reason(exc)}")
            raise StoreUnavailable(f"the Postgres platform store at {self.where} is unavailable ({why})") from None
        finally:
            if conn is not None:  # (_live_connection gave its slot back when it failed)
                self._pool.release(conn)  # a broken one (cut, lost, mid-transaction) is closed, not kept

    def _live_connection(self, deadline: float) -> Any:
        """A connection that answered an empty query (within the deadline), or a new one. After Postgres restarts,
        every idle connection is dead: the first dead one found has them all closed, and this call connects
        afresh (no backoff), so no request fails on a dead connection and the first one after the restart
        succeeds. A check that gets no answer (a hung server) fails the call: connecting again would hang too."""
        import psycopg

        conn = self._pool.acquire(deadline)  # holds a slot from here: released by _conn or below
        try:
            if conn is not None:
                with self._watchdog.armed(conn, deadline) as alarm:
                    try:
                        conn.execute("")
                        return conn
                    except psycopg.Error:
                        pass
                if alarm.fired:
                    raise psycopg.OperationalError(f"no answer within {self.call_timeout:g} s")
                self._pool.discard(conn)  # broken: closed, and its slot serves the new connection
                conn = None
                self._pool.drop_idle()
            left = deadline - time.monotonic()
            if left <= 0:
                raise psycopg.OperationalError(f"no answer within {self.call_timeout:g} s")
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=max(2, min(CONNECT_TIMEOUT,
                                                                                         math.ceil(left))))
            self._pool.opened()
            return conn
        except BaseException:
            self._pool.release(conn)
            raise

    def _migrate(self, conn: Any) -> None:
        """Bring the schema to LATEST_VERSION. Idempotent; concurrent starts serialise on an advisory lock and
        read the version again under it, so each migration is applied once."""
        row = conn.execute(f"SELECT to_regclass('{_S}.schema_version') IS NOT NULL").fetchone()
        if row[0]:
            current = conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {_S}.schema_version").fetchone()[0]
            if current == LATEST_VERSION:
                return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {_S}")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {_S}.schema_version "
                         "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
            current = conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {_S}.schema_version").fetchone()[0]
            if current > LATEST_VERSION:
                raise StoreConfigError(
                    f"CRYPTOWIRE_DATABASE_URL: the platform schema in {self.where} is at version {current}, newer "
                    f"than this cryptowire knows ({LATEST_VERSION}): upgrade cryptowire"
                )
            common.apply_migrations(conn.execute, MIGRATIONS, current,
                                    f"INSERT INTO {_S}.schema_version VALUES (%s, %s)")

    def schema_version(self) -> int:
        # the readiness probe's call: it settles what is unsettled too, so a quiet process does not wait for a write
        with self._conn(settle=True) as conn:
            return int(conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {_S}.schema_version").fetchone()[0])

    def close(self) -> None:
        self._stop.set()
        if self._unsettled:
            try:
                self.schema_version()  # settles them, if Postgres answers
            except StoreUnavailable:
                pass
        for entry in self._unsettled:  # Postgres did not answer: say what may be wrong, for a manual correction
            ops = entry.if_committed or entry.if_aborted
            for what, key_id, day, api, cost in ops:
                log.error("Postgres never confirmed a write of key %s (day %s, api %s, %d CU): if transaction %d "
                          "%s, %s it by hand", key_id, day, api, cost, entry.xid,
                          "committed" if entry.if_committed else "did not commit",
                          "refund" if what == "refund" else "charge")
        if self._listener is not None:
            self._listener.join(timeout=5)
        self._pool.close()

    # --- writes whose commit was not confirmed -----------------------------------
    def _written(self, conn: Any, body: Callable[[Any, list[int]], tuple[Any, list[Op]]],
                 owed: list[Op] | None = None) -> Any:
        """Run ``body(conn, xids)`` in one transaction and commit it. ``body`` appends the transaction id to
        ``xids`` (``RETURNING txid_current()``) when it writes, and returns (its result, the ops that would undo
        it). When the COMMIT gets no answer, the transaction is remembered as unsettled, and the call raises: to be
        undone if it committed; or, for ``owed`` (an undo being made), to be made again if it did not."""
        import psycopg

        xids: list[int] = []
        undo: list[Op] = []
        committing = False
        pid = conn.info.backend_pid  # (0 once the connection is cut)
        try:
            with conn.transaction():
                result, undo = body(conn, xids)
                committing = True
        except psycopg.Error:
            if committing and xids and undo:
                self._remember(_Unsettled(xids[0], pid, [], owed) if owed is not None
                               else _Unsettled(xids[0], pid, undo))
            raise
        return result

    def _remember(self, entry: _Unsettled) -> None:
        ops = entry.if_committed or entry.if_aborted
        log.warning("Postgres did not confirm the commit of transaction %d (%s of %d CU for key %s): settled before "
                    "this process writes again", entry.xid, "an undo" if entry.if_aborted else "a write",
                    sum(op[4] for op in ops), ops[0][1])
        self._unsettled.append(entry)

    def _settle(self, conn: Any, deadline: float) -> None:
        """Find out what became of each unsettled transaction and undo it if it committed (or redo what is owed if
        an undo did not). A transaction still running (its old backend got the COMMIT late) has its backend ended
        first. Raises (and keeps the rest) when Postgres cannot say yet: the caller's write must wait for it."""
        import psycopg

        if not self._settling.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise psycopg.OperationalError("writes whose commit was not confirmed are still being settled")
        try:
            while self._unsettled:
                entry = self._unsettled[0]
                status = self._status(conn, entry, deadline)
                if status == "committed":
                    owed = entry.if_committed
                elif status == "aborted":
                    owed = entry.if_aborted
                else:  # too old to know (or wrapped around): say so rather than guess
                    log.error("Postgres cannot say whether transaction %d committed: check key %s's usage by hand",
                              entry.xid, (entry.if_committed or entry.if_aborted)[0][1])
                    owed = []
                if owed:
                    try:
                        self._written(conn, partial(self._apply, owed), owed=owed)
                    except Exception:
                        if any(e.if_aborted is owed for e in self._unsettled):  # the undo is unsettled in its turn
                            self._unsettled.remove(entry)
                        raise
                    log.warning("transaction %d %s: %s", entry.xid, status,
                                ", ".join(f"{w} of {c} CU to key {k} ({a}, {d})" for w, k, d, a, c in owed) + " made")
                self._unsettled.remove(entry)
        finally:
            self._settling.release()

    def _status(self, conn: Any, entry: _Unsettled, deadline: float) -> str | None:
        """``txid_status`` of the entry's transaction, once it is no longer in progress."""
        import psycopg

        ended = False
        while True:
            status = conn.execute("SELECT txid_status(%s)", (entry.xid,)).fetchone()[0]
            if status != "in progress":
                return str(status) if status is not None else None
            if not ended:  # the backend that ran it, only while it still runs that transaction (pids are reused)
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s AND "
                             "backend_xid::text::bigint = %s %% 4294967296", (entry.pid, entry.xid))
                ended = True
            if time.monotonic() + 0.05 >= deadline:
                raise psycopg.OperationalError(f"transaction {entry.xid} is still in progress")
            time.sleep(0.05)

    @staticmethod
    def _apply(ops: list[Op], conn: Any, xids: list[int]) -> tuple[None, list[Op]]:
        """Make ``ops``; returns the ops that would undo them."""
        undo: list[Op] = []
        for what, key_id, day, api, cost in ops:
            sql = _REFUND[api] if what == "refund" else _RECHARGE[api]
            row = conn.execute(sql + " RETURNING txid_current()", (cost, cost, key_id, day, *(
                (cost, cost) if what == "refund" else ()))).fetchone()
            if row is not None:
                xids.append(int(row[0]))
                undo.append(("recharge" if what == "refund" else "refund", key_id, day, api, cost))
        return None, undo

    # --- key change notifications ------------------------------------------------
    def watch_keys(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(key_id)`` (from a background thread) whenever a key is revoked, rotated or moved to
        another plan, by any process on this database. One LISTEN connection per store, reconnecting."""
        self._watchers.append(callback)
        if self._listener is None:
            self._listener = threading.Thread(target=self._listen, name="accounts-listen", daemon=True)
            self._listener.start()

    def _listen(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
                    with self._watchdog.armed(conn, time.monotonic() + self.call_timeout):
                        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    # Anything changed while not listening: let the callers drop what they hold.
                    self._notify_watchers("")
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self._notify_watchers(note.payload)
            except psycopg.Error:
                self._stop.wait(1.0)  # the 1-second key cache covers the gap

    def _notify_watchers(self, key_id: str) -> None:
        for cb in list(self._watchers):
            cb(key_id)

    @staticmethod
    def _changed(conn: Any, key_id: str) -> None:
        conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, key_id))  # delivered on commit

    # --- plans -------------------------------------------------------------------
    def sync_plans(self, plans: Iterable[Plan]) -> None:
        now = time.time()
        with self._conn(transaction=True) as conn:
            for p in plans:
                conn.execute(
                    f"INSERT INTO {_S}.plans VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                    "title = excluded.title, price_usd = excluded.price_usd, cu_per_day = excluded.cu_per_day, "
                    "requests_per_second = excluded.requests_per_second, updated_at = excluded.updated_at",
                    common.plan_row(p, now),
                )

    # --- keys --------------------------------------------------------------------
    @staticmethod
    def _add_secret(conn: Any, key_id: str, now: float) -> str:
        key, row = common.new_secret(key_id, now)
        conn.execute(
            f"INSERT INTO {_S}.key_secrets (key_hash, key_id, prefix, last4, created_at, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, NULL)",
            row,
        )
        return key

    def create_key(self, name: str, plan: str, apis: Iterable[str]) -> tuple[str, str]:
        key_id, now = new_key_id(), time.time()
        with self._conn(transaction=True) as conn:
            conn.execute(
                f"INSERT INTO {_S}.keys (id, name, plan, apis, created_at) VALUES (%s, %s, %s, %s, %s)",
                (key_id, name, plan, ",".join(apis), now),
            )
            key = self._add_secret(conn, key_id, now)
        return key_id, key

    def rotate_key(self, key_id: str, grace_seconds: float) -> str:
        now = time.time()
        with self._conn(transaction=True) as conn:
            row = conn.execute(f"SELECT revoked_at FROM {_S}.keys WHERE id = %s FOR UPDATE", (key_id,)).fetchone()
            if row is None or row[0] is not None:
                raise KeyNotFound(key_id)
            until = now + max(0.0, grace_seconds)
            conn.execute(
                f"UPDATE {_S}.key_secrets SET expires_at = LEAST(COALESCE(expires_at, %s), %s) WHERE key_id = %s",
                (until, until, key_id),
            )
            key = self._add_secret(conn, key_id, now)
            self._changed(conn, key_id)
            return key

    def revoke_key(self, key_id: str) -> None:
        with self._conn(transaction=True) as conn:
            cur = conn.execute(
                f"UPDATE {_S}.keys SET revoked_at = COALESCE(revoked_at, %s) WHERE id = %s", (time.time(), key_id)
            )
            if cur.rowcount == 0:
                raise KeyNotFound(key_id)
            self._changed(conn, key_id)

    def set_plan(self, key_id: str, plan: str) -> str:
        with self._conn(transaction=True) as conn:
            row = conn.execute(
                f"SELECT plan, revoked_at FROM {_S}.keys WHERE id = %s FOR UPDATE", (key_id,)
            ).fetchone()
            if row is None or row[1] is not None:
                raise KeyNotFound(key_id)
            conn.execute(f"UPDATE {_S}.keys SET plan = %s WHERE id = %s", (plan, key_id))
            self._changed(conn, key_id)
            return str(row[0])

    def lookup(self, key_hash: str) -> KeyRecord | None:
        with self._conn() as conn:
            row = conn.execute(_LOOKUP, (key_hash,)).fetchone()
        return None if row is None else common.key_record(row)

    def keys(self, key_id: str | None = None) -> list[dict[str, Any]]:
        sql = f"SELECT id, name, plan, apis, created_at, revoked_at FROM {_S}.keys"
        secrets_sql = f"SELECT key_id, prefix, last4, created_at, expires_at FROM {_S}.key_secrets"
        args: tuple[Any, ...] = ()
        if key_id is not None:
            sql += " WHERE id = %s"
            secrets_sql += " WHERE key_id = %s"
            args = (key_id,)
        now = time.time()
        with self._conn() as conn:
            rows = conn.execute(sql + " ORDER BY created_at", args).fetchall()
            secrets = conn.execute(secrets_sql + " ORDER BY created_at", args).fetchall()
        return common.key_listing(rows, secrets, now)

    # --- usage counters ----------------------------------------------------------
    def charge(self, key_id: str, day: str, api: str, cost: int, limit: int) -> tuple[bool, int]:
        return self.charge_many([(key_id, day, api, cost, limit)])[0]

    def charge_many(self, items: list[ChargeItem]) -> list[tuple[bool, int]]:
        """Several charges, committed together (one statement when they are all for one key and day). The
        charges of one key and day are first tried as one conditional upsert of their sum; when that does not fit,
        one by one, in order, so exactly those that fit pass (``common.charge_group``)."""
        groups = common.group_charges(items)

        def body(conn: Any, xids: list[int]) -> tuple[list[tuple[bool, int]], list[Op]]:
            results: list[tuple[bool, int]] = [(False, 0)] * len(items)
            charge_row, used = partial(self._charge_row, conn, xids), partial(self._used, conn)
            # one transaction, rows locked in a fixed order: no deadlock between processes
            for group in sorted(groups.items()):
                common.charge_group(items, group, results, charge_row, used)
            undo = [("refund", k, d, a, c) for (k, d, a, c, _l), (ok, _u) in zip(items, results, strict=True) if ok]
            return results, undo

        with self._conn(settle=True) as conn:
            return self._written(conn, body)  # type: ignore[no-any-return]

    @staticmethod
    def _charge_row(conn: Any, xids: list[int], key_id: str, day: str, cost: int, counts: common.Counts,
                    limit: int) -> int | None:
        row = conn.execute(_CHARGE, common.charge_args(key_id, day, cost, counts, limit)).fetchone()
        if row is None:
            return None
        xids.append(int(row[1]))
        return int(row[0])

    def refund(self, key_id: str, day: str, api: str, cost: int) -> int:
        with self._conn(settle=True) as conn:
            self._written(conn, partial(self._apply, [("refund", key_id, day, api, cost)]))
            return self._used(conn, key_id, day)

    @staticmethod
    def _used(conn: Any, key_id: str, day: str) -> int:
        row = conn.execute(
            f"SELECT used FROM {_S}.usage_daily WHERE key_id = %s AND day = %s", (key_id, day)
        ).fetchone()
        return int(row[0]) if row else 0

    def used(self, key_id: str, day: str) -> int:
        with self._conn() as conn:
            return self._used(conn, key_id, day)

    def history(self, key_id: str, days: list[str]) -> Usage:
        if not days:
            return {}
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT day, {', '.join(_COUNTS)} FROM {_S}.usage_daily WHERE key_id = %s AND day = ANY(%s)",
                (key_id, list(days)),
            ).fetchall()
        return common.usage_by_day(rows)
