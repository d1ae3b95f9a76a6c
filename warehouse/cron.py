"""Checks a cron expression as the Dagster schedule will read it, without importing Dagster: a bad
``CRYPTOWIRE_SCHEDULE_CRON`` is then a one-line settings error, not a traceback from loading the definitions."""

from __future__ import annotations

import re

MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names counted from `lowest`)
FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
          ("month", 1, 12, MONTHS), ("day of week", 0, 7, DAYS))
_ITEM = re.compile(r"^(?P<base>\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(?P<step>\d+))?$")
EXAMPLE = "'*/10 * * * *' (every 10 minutes) or '@hourly'"


def _value(token: str, lo: int, hi: int, names: tuple[str, ...]) -> int | None:
    if token.isdigit():
        n = int(token)
        return n if lo <= n <= hi else None
    return names.index(token) + lo if token in names else None


def _field_problem(text: str, name: str, lo: int, hi: int, names: tuple[str, ...]) -> str | None:
    for item in text.split(","):
        if name == "day of month" and item == "l":  # the last day of the month
            continue
        if name == "day of week" and re.fullmatch(r"[0-7]#[1-5]", item):  # the n-th weekday of the month
            continue
        found = _ITEM.match(item)
        if found is None or (found["step"] is not None and int(found["step"]) == 0):
            return f"{item!r} is not a valid {name}"
        if found["base"] != "*":
            ends = [_value(t, lo, hi, names) for t in found["base"].split("-")]
            if any(v is None for v in ends):
                return f"{item!r} is not a {name} ({lo}-{hi}{', or a name' if names else ''})"
    return None


def cron_problem(expr: str) -> str | None:
    """Why `expr` is not a 5-field cron expression (or a macro such as @daily) Dagster accepts, or None."""
    text = expr.strip().lower()
    if text in MACROS:
        return None
    parts = text.split()
    if len(parts) != 5:
        return f"a cron expression has 5 fields (minute hour day month weekday), got {len(parts)}; e.g. {EXAMPLE}"
    for part, (name, lo, hi, names) in zip(parts, FIELDS, strict=True):
        problem = _field_problem(part, name, lo, hi, names)
        if problem:
            return f"{problem}; e.g. {EXAMPLE}"
    if parts[3] in ("2", "feb") and parts[2] in ("30", "31"):
        return f"there is no February {parts[2]}; e.g. {EXAMPLE}"
    return None
