"""Printing a command's result as text or as JSON (for scripts)."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import typer


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, default=_default, indent=2))


def fail(message: str, code: int = 1) -> None:
    """Print a clear error to stderr and exit non-zero."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def require_out_dir(out: Path) -> None:
    """Refuse an --out whose directory is missing rather than create it: a mistyped path would otherwise leave
    directories anywhere, even at the filesystem root."""
    import shlex

    parent = out.parent
    if parent.is_dir():
        return
    if parent.exists():
        fail(f"--out {out}: {parent} is not a directory")
    fail(f"--out {out}: the directory {parent} does not exist; create it first (mkdir -p {shlex.quote(str(parent))}) "
         "or write somewhere else")


def latest_snapshot(snapshots_dir: Path) -> Path:
    """The snapshot ``CURRENT`` names, or a clear error saying how to get one."""
    from warehouse.publish import current_snapshot

    path = current_snapshot(snapshots_dir)
    if path is None:
        fail(f"no published snapshot under {snapshots_dir} (its CURRENT names none): run `cryptowire doctor`, which "
             "points it at the newest complete snapshot if there is one, or `cryptowire materialize`")
    assert path is not None
    return path
