"""Moved to the ``accounts`` package (keys, plans, usage and limits for the API and the CLI); these names stay
importable from here for code written against ``api.metering``."""

from accounts import (
    KEY_CACHE_SECONDS,
    USAGE_API,
    MeteredAccess,
    Plan,
    PlansError,
    PlatformStore,
    build_access,
    load_plans,
)

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
