"""The platform store on Postgres: keys, plans and daily usage counters shared by every API process and the CLI.

Chosen by ``CRYPTOWIRE_DATABASE_URL=postgresql://user:password@host:5432/db``. psycopg 3 with a psycopg_pool
connection pool; the tables live in their own Postgres schema, ``accounts`` (the same database may hold Dagster's
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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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
POOL_MAX = 8

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
    + " WHERE u.used + excluded.used <= %s RETURNING u.used"
)
_REFUND = {
    api: f"UPDATE {_S}.usage_daily SET used = used - %s, {api}_cu = {api}_cu - %s, "
    f"{api}_requests = {api}_requests - 1 "
    f"WHERE key_id = %s AND day = %s AND used >= %s AND {api}_cu >= %s AND {api}_requests >= 1"
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


class PostgresStore:
    blocking = True  # network round trips: async callers run these calls in a worker thread

    def __init__(self, url: str, pool_max: int = POOL_MAX) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        check_url(url)
        self.url = url
        self.where = describe(url)
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
                self._migrate(conn)
        except psycopg.Error as exc:
            raise StoreConfigError(
                f"CRYPTOWIRE_DATABASE_URL: cannot use the Postgres database at {self.where} ({_reason(exc)}): "
                f"{_CHECK}"
            ) from None
        self._pool = ConnectionPool(
            url, min_size=1, max_size=pool_max, kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
            timeout=CONNECT_TIMEOUT, name="cryptowire-accounts", open=True,
        )
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        self._watchers: list[Callable[[str], None]] = []

    # --- plumbing ----------------------------------------------------------------
    @contextmanager
    def _conn(self, transaction: bool = False) -> Iterator[Any]:
        """A pooled connection (autocommit; ``transaction``: one transaction around the block). psycopg and pool
        failures become StoreUnavailable (the API answers 503)."""
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            conn = self._live_connection()
            try:
                if transaction:
                    with conn.transaction():
                        yield conn
                else:
                    yield conn
            finally:
                self._pool.putconn(conn)  # a broken one is discarded and replaced
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
            raise StoreUnavailable(f"the Postgres platform store at {self.where} is unavailable "
                                   f"({type(exc).__name__}: {_reason(exc)})") from None

    def _live_connection(self) -> Any:
        """A pooled connection that answered an empty query. After Postgres restarts, every idle connection in the
        pool is dead: the first dead one found has the pool check (and replace) them all, so no request fails on
        one (psycopg_pool's own ``check=`` backs off a second or more per dead connection)."""
        import psycopg

        conn = self._pool.getconn()
        try:
            conn.execute("")
            return conn
        except psycopg.Error:
            self._pool.putconn(conn)
        self._pool.check()
        return self._pool.getconn()

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
        with self._conn() as conn:
            return int(conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {_S}.schema_version").fetchone()[0])

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=5)
        self._pool.close()

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
        results: list[tuple[bool, int]] = [(False, 0)] * len(items)
        # one transaction for several keys, rows locked in a fixed order: no deadlock between processes
        with self._conn(transaction=len(groups) > 1) as conn:
            charge_row, used = partial(self._charge_row, conn), partial(self._used, conn)
            for group in sorted(groups.items()):
                common.charge_group(items, group, results, charge_row, used)
        return results

    @staticmethod
    def _charge_row(conn: Any, key_id: str, day: str, cost: int, counts: common.Counts, limit: int) -> int | None:
        row = conn.execute(_CHARGE, common.charge_args(key_id, day, cost, counts, limit)).fetchone()
        return None if row is None else int(row[0])

    def refund(self, key_id: str, day: str, api: str, cost: int) -> int:
        with self._conn() as conn:
            conn.execute(_REFUND[api], (cost, cost, key_id, day, cost, cost))
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
