"""Publishing serving snapshots: the curated tables the API reads, in a DuckDB file of their own.

The API must never open the warehouse (a reader locks out DuckDB's writer), so the pipeline copies what the API
serves into a new file, through ``ATTACH`` on the writer's own connection (a second process could not open the
warehouse). Layout of a snapshot:

- ``news``: one row per article, only the served columns, physically sorted in serving order (newest first:
  ``published_at DESC, id DESC``) with ``pos`` = 0, 1, 2, ... in that order. Pages are ranges of ``pos``, so a page
  deep in the set costs what the first page costs (zone maps skip every other row group). A unique index on
  ``id`` turns a cursor from an older snapshot into a position.
- ``events``: the prediction events, sorted by ``created_at DESC`` (unique, millisecond precision) with ``pos``.
- ``sentiment``: the warehouse's ``asset_sentiment`` (per ticker, hour and day buckets), sorted by ticker, grain
  and bucket start, so a series is a range the zone maps find.
- ``stories``: the stories (articles reporting the same news), newest (``first_seen DESC, id DESC``) first with
  ``pos``; ``news`` carries each article's ``story_id`` and story summary, and ``story_first`` for the story's
  earliest article.
- ``filter_values(kind, value)``: the lists behind ``newsSources``, ``newsTopics`` and ``tickers``.
- ``assets``: the warehouse's ``crypto_assets`` (symbol, name, aliases, former symbols, day of the rename), so that
  the API, which never reads the registry, can say that a ticker was renamed or that a name has a symbol
  (``write_assets``; a snapshot without it, as an older cryptowire's, answers without those hints).
- ``snapshot_info``: one row: ``tag`` (random, identifies this file), creation time, row counts, format.

A snapshot is written under a ``.partial`` name, checkpointed and detached, renamed to its final name, and
only then published by atomically replacing the ``CURRENT`` pointer file (temp file + ``os.replace``); readers
only ever follow ``CURRENT``. So a crash at any point leaves at worst a ``.partial`` file or a complete snapshot
that ``CURRENT`` does not name yet, both of which ``repair_snapshots`` cleans up. The newest ``keep``
snapshots stay; older ones are deleted unless another process still holds them open (DuckDB keeps an ``fcntl``
lock on an open database file), in which case a later publish deletes them.

The names in a snapshots folder and reading ``CURRENT`` are in ``warehouse.published`` (the read side).
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import duckdb

from warehouse.crashpoints import crash_point
from warehouse.published import (
    PART_PREFIX,
    PART_SUFFIX,
    PARTIAL,
    POINTER,
    PREFIX,
    SET_PREFIX,
    SET_SUFFIX,
    SUFFIX,
    current_snapshot,
)

SNAPSHOT_FORMAT = 1
ROW_GROUP_SIZE = 16384  # small row groups: zone maps skip more of the table around a page

# What the API needs of the registry (``warehouse.trends.assets``): a ticker's former symbol and the day of the
# rename (news before it is tagged with the former symbol), and the names a ticker is asked by by mistake.
ASSETS_SQL = """
CREATE TABLE {db}.assets AS
SELECT symbol, name, coalesce(aliases, []::VARCHAR[]) AS aliases,
       coalesce(former_symbols, []::VARCHAR[]) AS former_symbols, {renamed} AS renamed
FROM crypto_assets
ORDER BY symbol
"""


def write_assets(con: duckdb.DuckDBPyConnection, db: str) -> bool:
    """Copy the warehouse's ``crypto_assets`` into the attached database ``db`` as ``assets`` (a few hundred rows);
    False, and no table, when the warehouse has none."""
    columns = {name for (name,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'crypto_assets' "
        "AND database_name = current_database() AND schema_name = current_schema()").fetchall()}
    if not {"symbol", "name", "aliases", "former_symbols"} <= columns:
        return False
    con.execute(ASSETS_SQL.format(db=db, renamed="renamed" if "renamed" in columns else "NULL::DATE"))
    return True


STAMP = "%Y%m%dT%H%M%S%f"  # the publication time in snapshot, set and part names: they sort in publication order


def snapshot_name(now: datetime | None = None) -> str:
    """A new snapshot's file name; names sort in publication order."""
    now = now or datetime.now(UTC)
    return f"{PREFIX}{now.strftime(STAMP)}Z-{secrets.token_hex(3)}{SUFFIX}"


def publish_snapshot(con: duckdb.DuckDBPyConnection, snapshots_dir: Path, keep: int = 3) -> Path:
    """Write ``articles`` and ``prediction_events`` from the warehouse connection ``con`` into a new snapshot in
    ``snapshots_dir``, publish it atomically, prune old snapshots, and return the new file's path."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the snapshot just published); got {keep}")
    snapshots_dir = Path(snapshots_dir)
    snapshots_dir.mkdir(parents=True, exist_ok=True)
    path = snapshots_dir / snapshot_name()
    partial = path.with_name(path.name + PARTIAL)
    alias = f"cw_publish_{secrets.token_hex(4)}"
    tag = secrets.token_hex(4)
    literal = str(partial.resolve()).replace("'", "''")
    con.execute(f"ATTACH '{literal}' AS {alias} (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
    # The tables are a set's parts' (warehouse.parts.contents) over one unbounded period.
    from warehouse.parts.contents import VALUES_SQL, part_sql, stage, unstage

    try:
        stage(con, [(None, None)])
        con.execute(part_sql(con, "news", alias, None, None))
        unstage(con)
        con.execute(f"CREATE UNIQUE INDEX news_id ON {alias}.news (id)")
        crash_point("snapshot:writing")
        con.execute(part_sql(con, "events", alias, None, None))
        # Unique by construction upstream; the index also makes a createdAt cursor a point lookup.
        con.execute(f"CREATE UNIQUE INDEX events_created_at ON {alias}.events (created_at)")
        con.execute(f"CREATE TABLE {alias}.filter_values AS SELECT * FROM ({VALUES_SQL.format(db=alias)}) "
                    "ORDER BY kind, value")
        con.execute(part_sql(con, "sentiment", alias, None, None))
        write_assets(con, alias)
        con.execute(part_sql(con, "stories", alias, None, None))
        con.execute(f"CREATE UNIQUE INDEX stories_id ON {alias}.stories (id)")
        con.execute(
            f"""CREATE TABLE {alias}.snapshot_info AS SELECT
                ?::VARCHAR AS tag, ?::TIMESTAMP AS created_at, ?::INTEGER AS format,
                (SELECT count(*) FROM {alias}.news) AS articles, (SELECT count(*) FROM {alias}.events) AS events""",
            [tag, datetime.now(UTC).replace(tzinfo=None), SNAPSHOT_FORMAT],
        )
        con.execute(f"CHECKPOINT {alias}")
    except BaseException:
        con.execute(f"DETACH {alias}")
        unlink_quietly(partial)
        raise
    con.execute(f"DETACH {alias}")
    fsync_path(partial)
    os.replace(partial, path)
    fsync_path(snapshots_dir)
    crash_point("snapshot:written")
    point_to(snapshots_dir, path.name)
    crash_point("snapshot:published")
    prune_snapshots(snapshots_dir, keep)
    return path


def fsync_path(path: Path) -> None:
    """Flush a file, or a directory's entries (so a rename or an unlink in it survives a power cut), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, write: Callable[[TextIO], object]) -> None:
    """Replace ``path`` with what ``write`` writes to a text file, atomically: a temp file ``.<name>.<random>.tmp``
    beside it, fsynced, renamed (the caller fsyncs the directory). A failed write (a full disk) leaves no temp file
    and the old file as it was."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def point_to(snapshots_dir: Path, name: str) -> None:
    """Atomically make ``CURRENT`` name the snapshot: readers see the old name or the new one, never a mix."""
    write_atomically(snapshots_dir / POINTER, lambda f: f.write(name + "\n"))
    fsync_path(snapshots_dir)


def _published_at(path: Path) -> str:
    """The UTC time in a snapshot's or a manifest's name (both sort by it)."""
    return path.name.removeprefix(PREFIX) if path.name.startswith(PREFIX) else path.name.removeprefix(SET_PREFIX)


def list_snapshots(snapshots_dir: Path) -> list[Path]:
    """Published snapshots, oldest first: single files and set manifests."""
    d = Path(snapshots_dir)
    found = [p for p in d.glob(f"{PREFIX}*{SUFFIX}") if p.is_file()]
    found += [p for p in d.glob(f"{SET_PREFIX}*{SET_SUFFIX}") if p.is_file()]
    return sorted(found, key=_published_at)


def list_parts(snapshots_dir: Path) -> list[Path]:
    """Complete part files of sets, referenced or not."""
    return sorted(p for p in Path(snapshots_dir).glob(f"{PART_PREFIX}*{PART_SUFFIX}") if p.is_file())


def in_use(path: Path) -> bool:
    """True when another process has the database file open (DuckDB holds an fcntl lock on it).

    Within one process fcntl locks never conflict, so this only sees other processes; an in-process reader keeps
    reading a deleted file anyway (POSIX unlink leaves open files intact)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # also releases the probe lock
    return False


def prune_snapshots(snapshots_dir: Path, keep: int = 3, holding_lock: bool = False) -> list[Path]:
    """Delete snapshots older than the newest ``keep`` (never the current one, nor one another process has open),
    then the part files no remaining set references and no process has open; return the deleted paths.

    Parts are only collected while no publish is running in another process (``holding_lock``: the caller is the
    publish), since a publish writes its parts before the manifest that references them."""
    from warehouse import parts

    snapshots_dir = Path(snapshots_dir)
    current = current_snapshot(snapshots_dir)
    deleted = []
    for path in list_snapshots(snapshots_dir)[:-keep] if keep > 0 else []:
        if current is not None and path.name == current.name:
            continue
        if path.name.startswith(SET_PREFIX):  # a manifest is only read at open; its parts are checked below
            path.unlink(missing_ok=True)
            deleted.append(path)
            continue
        if in_use(path):
            continue
        unlink_quietly(path)
        deleted.append(path)
    if not list_parts(snapshots_dir) and not any(snapshots_dir.glob(f"{PART_PREFIX}*.json")):
        return deleted
    with parts.publish_lock(snapshots_dir, wait=False) if not holding_lock else _held() as free:
        if not free:
            return deleted
        found = orphans(snapshots_dir)
        if found is None:  # a manifest unreadable: keep every part (a repair points CURRENT elsewhere first)
            return deleted
        orphan_parts, lone_sidecars = found
        for sidecar in lone_sidecars:
            sidecar.unlink(missing_ok=True)
        for path in orphan_parts:
            remove_part(path)
            deleted.append(path)
    return deleted


def orphans(snapshots_dir: Path) -> tuple[list[Path], list[Path]] | None:
    """Part files no set manifest in ``snapshots_dir`` references and no other process has open, and sidecars
    whose part file is gone (a crash between the two renames); None when a manifest cannot be read (then no part
    can be called unreferenced). Only true orphans while no publish runs: hold or test ``.publish.lock`` first,
    since a publish writes its parts before the manifest that references them."""
    from warehouse import parts

    referenced: set[str] = set()
    for manifest in list_snapshots(snapshots_dir):
        if manifest.name.startswith(SET_PREFIX):
            try:
                referenced.update(parts.set_parts(manifest))
            except (OSError, ValueError, KeyError):
                return None
    unreferenced = [p for p in list_parts(snapshots_dir) if p.name not in referenced and not in_use(p)]
    lone = [s for s in sorted(snapshots_dir.glob(f"{PART_PREFIX}*.json"))
            if not s.with_name(s.name.removesuffix(".json") + PART_SUFFIX).exists()]
    return unreferenced, lone


def remove_part(path: Path) -> None:
    """A part file, its DuckDB log and its sidecar."""
    from warehouse import parts

    unlink_quietly(path)
    path.with_name(parts.sidecar_name(path.name)).unlink(missing_ok=True)


@contextmanager
def _held() -> Iterator[bool]:
    yield True


def unlink_quietly(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)
