"""The platform store's interface: keys, plans and daily usage counters, with two implementations.

- ``accounts.sqlite.SqliteStore``: the embedded default, ``$CRYPTOWIRE_HOME/platform.sqlite`` (WAL).
- ``accounts.postgres.PostgresStore``: Postgres (psycopg 3, a bounded connection pool of its own), chosen by
  ``CRYPTOWIRE_DATABASE_URL=postgresql://...``; several API processes and the CLI share one database.

``open_store(settings)`` picks one (``open_synced_store(settings, plans)`` also records the plans in force). Both
keep the same schema (migrations numbered alike, recorded in a ``schema_version`` table) and the same guarantees:
a charge is one atomic conditional upsert on the key's row for the day (``used = used + cost`` only
``WHERE used + cost <= limit``), so concurrent charges from any number of processes never overdraw the allowance
and are never lost or counted twice once committed. What the two do alike, apart from their SQL, is in
``accounts.common``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from accounts.keys import KeyRecord
from accounts.plans import Plan

if TYPE_CHECKING:
    from warehouse.config import Settings

Usage = dict[str, dict[str, tuple[int, int]]]  # {day: {api: (cu, requests)}}
ChargeItem = tuple[str, str, str, int, int]  # (key_id, day, api, cost, limit)


class KeyNotFound(LookupError):
    """No key with that id (or it is revoked, for the operations that need a live key)."""


class StoreUnavailable(RuntimeError):
    """The store cannot be reached or answered with an error (Postgres down, pool exhausted, SQLite locked):
    the API refuses the request (503) rather than serving it unmetered. The message never holds a password."""


class StoreConfigError(ValueError):
    """The configured store cannot be used at all (bad or unreachable CRYPTOWIRE_DATABASE_URL): one line that
    names the setting and what to do."""


class Store(Protocol):
    """What the API (``accounts.access``) and the CLI (``cryptowire keys``) use."""

    # True when calls do network I/O (Postgres): async callers run them in a worker thread.
    blocking: bool

    def sync_plans(self, plans: Iterable[Plan]) -> None: ...
    def create_key(self, name: str, plan: str, apis: Iterable[str]) -> tuple[str, str]: ...
    def rotate_key(self, key_id: str, grace_seconds: float) -> str: ...
    def revoke_key(self, key_id: str) -> None: ...
    def set_plan(self, key_id: str, plan: str) -> str: ...
    def lookup(self, key_hash: str) -> KeyRecord | None: ...
    def keys(self, key_id: str | None = None) -> list[dict[str, Any]]: ...
    def charge(self, key_id: str, day: str, api: str, cost: int, limit: int) -> tuple[bool, int]: ...
    def charge_many(self, items: list[ChargeItem]) -> list[tuple[bool, int]]: ...
    def refund(self, key_id: str, day: str, api: str, cost: int) -> int: ...
    def used(self, key_id: str, day: str) -> int: ...
    def history(self, key_id: str, days: list[str]) -> Usage: ...
    def schema_version(self) -> int: ...
    def close(self) -> None: ...


def open_store(settings: Settings) -> Store:
    """Postgres when ``settings.database_url`` is set, else SQLite under the data home (nothing else is touched:
    psycopg is imported only for Postgres)."""
    if settings.database_url:
        from accounts.postgres import PostgresStore

        return PostgresStore(settings.database_url)
    from accounts.sqlite import SqliteStore

    return SqliteStore(settings.platform_db)


def open_synced_store(settings: Settings, plans: Iterable[Plan]) -> Store:
    """``open_store(settings)`` with ``plans`` recorded in it (``sync_plans``); closed again when that fails."""
    store = open_store(settings)
    try:
        store.sync_plans(plans)
    except BaseException:
        store.close()
        raise
    return store
