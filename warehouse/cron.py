"""Checks a cron expression as the Dagster schedule will read it, without importing Dagster: a bad
``CRYPTOWIRE_SCHEDULE_CRON`` is then a one-line settings error, not a traceback from loading the definitions.
``tests/test_cli_fixes.py`` compares the verdicts with Dagster's own on many expressions."""

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


def _expand(text: str, name: str, lo: int, hi: int, names: tuple[str, ...]) -> set[int] | str:
    """The values a field stands for (empty for a special form: ?, L, n-th weekday), or why it is not valid."""
    values: set[int] = set()
    for item in text.split(","):
        if item == "?" and name in ("day of month", "day of week"):
            continue
        if name == "day of month" and item == "l":  # the last day of the month
            continue
        if name == "day of week" and re.fullmatch(r"([0-7]|[a-z]{3})#[1-5]", item):  # the n-th weekday
            if _value(item.split("#")[0], lo, hi, names) is None:
                return f"{item!r} is not a valid {name}"
            continue
        found = _ITEM.match(item)
        if found is None or (found["step"] is not None and int(found["step"]) == 0):
            return f"{item!r} is not a valid {name}"
        if found["base"] == "*":
            start, end = lo, hi
        else:
            ends = [_value(t, lo, hi, names) for t in found["base"].split("-")]
            if any(v is None for v in ends):
                return f"{item!r} is not a {name} ({lo}-{hi}{', or a name' if names else ''})"
            start, end = ends[0], ends[-1]
            if found["step"] is not None and len(ends) == 1:
                end = hi  # "5/15": from 5 on
        values.update(range(start, end + 1, int(found["step"] or 1)) if start <= end else [start, end])
    return values


def cron_problem(expr: str) -> str | None:
    """Why `expr` is not a 5-field cron expression (or a macro such as @daily) Dagster accepts, or None."""
    text = expr.strip().lower()
    if text in MACROS:
        return None
    parts = text.split()
    if len(parts) != 5:
        return f"a cron expression has 5 fields (minute hour day month weekday), got {len(parts)}; e.g. {EXAMPLE}"
    expanded = []
    for part, (name, lo, hi, names) in zip(parts, FIELDS, strict=True):
        values = _expand(part, name, lo, hi, names)
        if isinstance(values, str):
            return f"{values}; e.g. {EXAMPLE}"
        expanded.append(values)
    days, months = expanded[2], expanded[3]
    if months == {2} and len(days) == 1 and days <= {30, 31}:
        return f"there is no February {min(days)}; e.g. {EXAMPLE}"
    return None
