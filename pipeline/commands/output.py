"""Printing a command's result as text or as JSON (for scripts)."""

from __future__ import annotations

import base64
import json
import math
import re
from datetime import date, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

import typer


def plain(value: Any) -> Any:
    """``value`` as JSON can hold it, whatever DuckDB returned: DECIMAL as a number, INTERVAL as seconds, BLOB as
    base64, dates, times, UUIDs (and anything else) as strings, NaN and infinities as null (JSON has neither)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float | Decimal):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):  # a STRUCT, or a MAP whose keys may be of any type
        return {_key(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    return str(value)  # UUID, Path, ...


def _key(key: Any) -> str:
    key = plain(key)
    return key if isinstance(key, str) else json.dumps(key)


def emit_json(data: Any) -> None:
    typer.echo(json.dumps(plain(data), indent=2, allow_nan=False))


_json_mode = False  # set by every --json option's callback (click calls it with the default too)


def reset_json_mode() -> None:
    """At the start of every command: a command without --json must not inherit an earlier one's (CliRunner)."""
    global _json_mode
    _json_mode = False


def _remember_json(value: bool) -> bool:
    global _json_mode
    _json_mode = bool(value)
    return value


def json_option(help: str = "Print the result as JSON (for scripts).") -> Any:
    """The --json flag of every command; ``fail`` then also prints the error as JSON."""
    return typer.Option(False, "--json", help=help, callback=_remember_json)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print a clear error to stderr and exit non-zero; under --json also one JSON document on stdout, so a script
    reading stdout gets ``{"error": ..., "exitCode": ...}`` rather than nothing. One line either way: a message
    from elsewhere (DuckDB's "Candidate bindings: ...") may hold line breaks."""
    message = re.sub(r"\s*\n\s*", " ", message.strip())
    if _json_mode:
        typer.echo(json.dumps({"error": message, "exitCode": code}))
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def require_out_dir(out: Path, example: str) -> None:
    """Refuse an --out whose directory is missing rather than create it: a mistyped path would otherwise leave
    directories anywhere, even at the filesystem root. ``example``: a file name to suggest when --out is a
    directory."""
    import shlex

    if out.is_dir():
        fail(f"--out {out} is a directory: name the file to write, e.g. --out {out / example}")
    parent = out.parent
    if parent.is_dir():
        return
    if parent.exists():
        fail(f"--out {out}: {parent} is not a directory")
    fail(f"--out {out}: the directory {parent} does not exist; create it first (mkdir -p {shlex.quote(str(parent))}) "
         "or write somewhere else")


def unwritable(out: Path, exc: BaseException) -> str:
    """The error for an --out that could not be written (no permission, a read-only or special file system)."""
    # DuckDB's: 'IO Error: Cannot open file "/proc/x.parquet": No such file or directory'
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0].split(": ")[-1]
    return f"--out {out}: cannot write it ({reason}): name a file in a directory you can write to"


def user_errors() -> tuple[type[BaseException], ...]:
    """What a run raises that is the user's to fix (a selection, a file, a setting, a newer cryptowire's data): one
    line, no traceback. Any other exception is a defect and keeps its traceback."""
    from accounts.plans import PlansError
    from accounts.store import StoreConfigError
    from models.tagging import RegistryError, TaxonomyError
    from pipeline.backfill import BackfillRangeError
    from pipeline.ingest.feeds import FeedsFileError
    from pipeline.jobs import InstanceError, UnknownAssets
    from pipeline.runlock import WaitTimeout
    from warehouse.db import WarehouseLocked, WarehouseLogCorrupt, WarehouseTooNew
    from warehouse.parts.read import NewerFormat

    return (UnknownAssets, BackfillRangeError, FeedsFileError, RegistryError, TaxonomyError, PlansError,
            StoreConfigError, WarehouseTooNew, WarehouseLogCorrupt, NewerFormat, WaitTimeout, WarehouseLocked,
            InstanceError)


# What to do about a CURRENT that names no readable snapshot (warehouse.repair.repair_snapshots).
DOCTOR = ("run `cryptowire doctor`: it points snapshots/CURRENT at the newest complete snapshot, or removes it when "
          "there is none (then `cryptowire materialize` publishes one)")


def file_damage(exc: BaseException) -> bool:
    """True when a DuckDB error is about a snapshot's files (missing, cut short, corrupt), not about the query."""
    import duckdb

    return isinstance(exc, duckdb.IOException) or str(exc).startswith("Corrupt database file")


def unreadable_snapshot(path: Path, exc: BaseException, verb: str = "read") -> str:
    """The error for a snapshot whose files DuckDB cannot read; DuckDB's message names the file when it can."""
    return f"cannot {verb} snapshot {path}: {str(exc).strip().splitlines()[0]}: {DOCTOR}"


def open_latest_snapshot(snapshots_dir: Path) -> tuple[Any, Path]:
    """A read-only connection to the snapshot ``CURRENT`` names, and its path; or one error line naming the file
    that is wrong (as the API's /readyz does) and what to do."""
    import duckdb

    from warehouse.parts import connect_snapshot
    from warehouse.published import POINTER, current_snapshot

    pointer = snapshots_dir / POINTER
    try:
        path = current_snapshot(snapshots_dir)
    except ValueError as exc:  # it names something that is not a snapshot's file name
        fail(f"{exc}: {DOCTOR}")
    except OSError as exc:
        fail(f"cannot read {pointer} ({exc.strerror}): delete it and run `cryptowire doctor`, which writes it anew")
    if path is None:
        fail(f"no published snapshot under {snapshots_dir} (its CURRENT names none): run `cryptowire doctor`, which "
             "points it at the newest complete snapshot if there is one, or `cryptowire materialize`")
    if not path.is_file():
        fail(f"{pointer} names {path.name}, which does not exist: {DOCTOR}")
    from warehouse.parts import NewerFormat

    try:
        return connect_snapshot(path), path
    except duckdb.Error as exc:
        fail(unreadable_snapshot(path, exc, "open"))
    except NewerFormat as exc:  # a newer cryptowire wrote it: nothing is damaged, and doctor would not "repair" it
        fail(str(exc))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a set's manifest cut short, or not one
        if isinstance(exc, OSError):
            reason = exc.strerror
        elif isinstance(exc, json.JSONDecodeError):
            reason = f"not valid JSON: {exc}"
        else:
            reason = str(exc) if type(exc) is ValueError else f"{type(exc).__name__}: {exc}"
        fail(f"cannot open snapshot {path}: its manifest is damaged ({reason}): {DOCTOR}")
