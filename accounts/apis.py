"""The metered APIs (the one list of them) and the records a metered call carries: ``Caller`` and ``Charge``.

Adding an API means adding it here, and two columns of ``usage_daily`` (a migration in ``sqlite.py`` and
``postgres.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

APIS = ("news", "events", "pdf")  # `keys create --apis`, the usage report, usage_daily's per-API columns
USAGE_API = "usage"  # the usage report: every live key may read its own, whatever APIs it is enabled for


@dataclass(frozen=True)
class Caller:
    key_id: str
    plan: str
    api: str
    info: dict[str, object] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Charge:
    caller: Caller
    cost: int
    info: dict[str, object] = field(default_factory=dict, compare=False)
