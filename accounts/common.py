"""What the two platform stores (``accounts.sqlite``, ``accounts.postgres``) do alike, apart from their SQL.

Pure functions over rows and charge items: each store runs its own statements and hands the rows here (key
records, the key listing, the usage history), and calls ``charge_group`` with its own statement for one
conditional upsert, so the grouping of charges is written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from accounts.apis import APIS
from accounts.keys import KEY_PREFIX, KeyRecord, display, hash_key, new_key
from accounts.plans import Plan
from accounts.store import ChargeItem, Usage

# The charges of one key, day and limit: the indexes of their items, in order.
ChargeGroup = tuple[tuple[str, str, int], list[int]]
Counts = dict[str, list[int]]  # {api: [cu, requests]}
# (key_id, day, cost, counts, limit) -> the day's total after the charge, or None when it did not fit
ChargeRow = Callable[[str, str, int, Counts, int], int | None]


def apply_migrations(execute: Callable[..., Any], migrations: list[tuple[int, list[str]]], current: int,
                     record: str) -> None:
    """Run the statements of each migration newer than ``current``, in order, each followed by ``record`` (the
    store's INSERT into ``schema_version``, taking version and applied_at). Called in one transaction, under the
    store's lock, after the caller has refused a schema newer than it knows."""
    for version, statements in migrations:
        if version > current:
            for stmt in statements:
                execute(stmt)
            execute(record, (version, time.time()))


def plan_row(p: Plan, now: float) -> tuple[Any, ...]:
    """The ``plans`` table's row for ``p`` (name, title, price, CU a day, requests a second, updated at)."""
    return (p.name, p.title, str(p.price_usd), p.cu_per_day, p.requests_per_second, now)


def new_secret(key_id: str, now: float) -> tuple[str, tuple[Any, ...]]:
    """A new key for ``key_id``, and the ``key_secrets`` row that stands for it: (key_hash, key_id, prefix, last4,
    created_at). Only the hash and the display parts are stored."""
    key = new_key()
    return key, (hash_key(key), key_id, KEY_PREFIX, key[-4:], now)


def split_apis(apis: str) -> list[str]:
    """The ``keys.apis`` column (comma-separated) as a list."""
    return [a for a in apis.split(",") if a]


def key_record(row: Sequence[Any]) -> KeyRecord:
    """A lookup row: id, name, plan, apis, key_hash, revoked, expires_at."""
    return KeyRecord(
        id=row[0], name=row[1], plan=row[2], apis=tuple(split_apis(row[3])),
        key_hash=row[4], revoked=bool(row[5]), expires_at=row[6],
    )


def key_listing(rows: Sequence[Sequence[Any]], secrets: Sequence[Sequence[Any]], now: float) -> list[dict[str, Any]]:
    """Keys for listing (never the secret) from the ``keys`` rows (id, name, plan, apis, created_at, revoked_at)
    and the ``key_secrets`` rows (key_id, prefix, last4, created_at, expires_at): the display forms of the secrets
    still live at ``now``."""
    out = []
    for kid, name, plan, apis, created, revoked in rows:
        live = [
            {"display": display(p, l4), "expiresAt": exp}
            for (sid, p, l4, _c, exp) in secrets
            if sid == kid and (exp is None or exp > now)
        ]
        out.append({
            "id": kid, "name": name, "plan": plan, "apis": split_apis(apis),
            "createdAt": created, "revokedAt": revoked,
            "status": "revoked" if revoked is not None else "active",
            "secrets": live,
        })
    return out


def usage_by_day(rows: Sequence[Sequence[Any]]) -> Usage:
    """``{day: {api: (cu, requests)}}`` from ``usage_daily`` rows: day, then cu and requests of each API in order."""
    return {
        row[0]: {api: (int(row[1 + 2 * i]), int(row[2 + 2 * i])) for i, api in enumerate(APIS)} for row in rows
    }


def group_charges(items: list[ChargeItem]) -> dict[tuple[str, str, int], list[int]]:
    """The items' indexes by (key_id, day, limit), in order; a ValueError for an unknown API or a cost under 1."""
    for _k, _d, api, cost, _l in items:
        if api not in APIS or cost <= 0:
            raise ValueError(f"cannot charge {cost!r} CU to API {api!r}")
    groups: dict[tuple[str, str, int], list[int]] = {}
    for i, (key_id, day, _api, _cost, limit) in enumerate(items):
        groups.setdefault((key_id, day, limit), []).append(i)
    return groups


def charge_args(key_id: str, day: str, cost: int, counts: Counts, limit: int) -> tuple[Any, ...]:
    """The charge statement's parameters: key_id, day, cost, cu and requests of each API in order, limit."""
    args: list[Any] = [key_id, day, cost]
    for api in APIS:
        args += counts[api]
    return (*args, limit)


def charge_group(items: list[ChargeItem], group: ChargeGroup, results: list[tuple[bool, int]],
                 charge_row: ChargeRow, used: Callable[[str, str], int]) -> None:
    """Charge one group of items into ``results`` (``(charged, used after)`` per item).

    First their sum, as one conditional upsert (``charge_row``); when the sum does not fit (the allowance is nearly
    spent), one by one, in order, so exactly those that fit pass; a refused one reports ``used(key_id, day)``.
    """
    (key_id, day, limit), idx = group
    counts: Counts = {api: [0, 0] for api in APIS}
    total = 0
    for i in idx:
        c = counts[items[i][2]]
        c[0] += items[i][3]
        c[1] += 1
        total += items[i][3]
    row = charge_row(key_id, day, total, counts, limit) if total <= limit else None
    if row is not None:  # all of them fit
        after = row - total
        for i in idx:
            after += items[i][3]
            results[i] = (True, after)
        return
    for i in idx:  # near the limit: one by one, in order
        api, cost = items[i][2], items[i][3]
        one: Counts = {a: ([cost, 1] if a == api else [0, 0]) for a in APIS}
        row = charge_row(key_id, day, cost, one, limit) if cost <= limit else None
        results[i] = (False, used(key_id, day)) if row is None else (True, row)
