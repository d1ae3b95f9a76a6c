"""Access keys, plans, request-rate limits and compute-unit (CU) metering for every API.

``build_access(settings)`` is what ``api.app.default_access`` uses: keys and counters in the SQLite platform
database (``settings.platform_db``), plans from ``api/plans.yaml`` or ``settings.plans_file``, and — when
``settings.redis_url`` is set — the rate limiter and counters in Redis, shared by every API instance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from api.metering.access import KEY_CACHE_SECONDS, USAGE_API, MeteredAccess
from api.metering.limits import (
    LocalRateLimiter,
    RedisCounters,
    RedisRateLimiter,
    SqliteCounters,
    redis_client,
)
from api.metering.plans import Plan, PlansError, load_plans
from api.metering.store import PlatformStore

if TYPE_CHECKING:
    from warehouse.config import Settings

__all__ = [
    "KEY_CACHE_SECONDS",
    "USAGE_API",
    "MeteredAccess",
    "Plan",
    "PlansError",
    "PlatformStore",
    "build_access",
    "load_plans",
]


def build_access(settings: Settings) -> MeteredAccess:
    plans = load_plans(settings.plans_file)
    store = PlatformStore(settings.platform_db)
    store.sync_plans(plans.values())
    if settings.redis_url:
        client = redis_client(settings.redis_url)
        return MeteredAccess(store, plans, RedisRateLimiter(client), RedisCounters(client))
    return MeteredAccess(store, plans, LocalRateLimiter(), SqliteCounters(store))
