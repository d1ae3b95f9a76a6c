"""Access keys, plans, usage and limits: one package, used by the API (``api``) and the CLI (``cryptowire keys``).

- ``apis``: the metered APIs (the one list), ``Caller`` / ``Charge``.
- ``keys``: key generation, hashing, display. ``plans``: the plans (``accounts/plans.yaml`` or
  ``CRYPTOWIRE_PLANS_FILE``).
- ``store``: the platform store's interface (create, lookup, revoke, rotate, set-plan, charge, refund, history)
  and ``open_store(settings)`` (``open_synced_store(settings, plans)``: with the plans recorded); implementations
  ``sqlite.SqliteStore`` (embedded default, ``$CRYPTOWIRE_HOME/platform.sqlite``) and ``postgres.PostgresStore``
  (``CRYPTOWIRE_DATABASE_URL``); ``common``: what those two do alike apart from their SQL.
- ``limits``: request-rate limiters (in-process, Redis) and daily counters (the store's, Redis).
- ``access``: ``MeteredAccess``, what every metered route calls.

Dependency rule: this package imports ``warehouse.config`` only (never ``api``, ``pipeline``, ``models``,
dagster or torch), so the API and the CLI can both use it.

``build_access(settings)``:

| settings | keys | daily counters | rate buckets |
|---|---|---|---|
| default | SQLite | SQLite | in-process |
| ``redis_url`` | SQLite | Redis | Redis |
| ``database_url`` | Postgres | Postgres | in-process |
| ``database_url`` + ``redis_url`` | Postgres | Postgres | Redis |
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accounts.access import KEY_CACHE_SECONDS, MeteredAccess
    from accounts.apis import APIS, USAGE_API, Caller, Charge
    from accounts.plans import Plan, PlansError, load_plans
    from accounts.sqlite import SqliteStore
    from accounts.store import (
        KeyNotFound,
        Store,
        StoreConfigError,
        StoreUnavailable,
        open_store,
        open_synced_store,
    )
    from warehouse.config import Settings

# Imported on first use (PEP 562): `from accounts.apis import APIS` in the CLI loads no store, asyncio or yaml.
_EXPORTS = {
    "KEY_CACHE_SECONDS": "accounts.access", "MeteredAccess": "accounts.access",
    "APIS": "accounts.apis", "USAGE_API": "accounts.apis", "Caller": "accounts.apis", "Charge": "accounts.apis",
    "Plan": "accounts.plans", "PlansError": "accounts.plans", "load_plans": "accounts.plans",
    "SqliteStore": "accounts.sqlite",
    "KeyNotFound": "accounts.store", "Store": "accounts.store", "StoreConfigError": "accounts.store",
    "StoreUnavailable": "accounts.store", "open_store": "accounts.store", "open_synced_store": "accounts.store",
}

__all__ = [
    "APIS", "KEY_CACHE_SECONDS", "USAGE_API", "Caller", "Charge", "KeyNotFound", "MeteredAccess", "Plan",
    "PlansError", "SqliteStore", "Store", "StoreConfigError", "StoreUnavailable", "build_access",
    "load_plans", "open_store", "open_synced_store",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accounts' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def build_access(settings: Settings) -> MeteredAccess:
    """The access checks the API serves with (and the CLI's usage report reads through)."""
    from accounts.access import MeteredAccess
    from accounts.limits import LocalRateLimiter, RedisCounters, RedisRateLimiter, StoreCounters, redis_client
    from accounts.plans import load_plans
    from accounts.store import open_synced_store

    plans = load_plans(settings.plans_file)
    store = open_synced_store(settings, plans.values())
    if settings.database_url:  # the counters stay in Postgres, durable; Redis only shares the request rate
        limiter = (RedisRateLimiter(redis_client(settings.redis_url), close_client=True) if settings.redis_url
                   else LocalRateLimiter())
        return MeteredAccess(store, plans, limiter, StoreCounters(store))
    if settings.redis_url:
        client = redis_client(settings.redis_url)
        return MeteredAccess(store, plans, RedisRateLimiter(client), RedisCounters(client))
    return MeteredAccess(store, plans, LocalRateLimiter(), StoreCounters(store))
