"""Repairs for what a crash can leave in the data home's files: half-written snapshots, a stray pointer temp
file, a ``CURRENT`` that names nothing, and a warehouse whose write-ahead log was never checkpointed.

Each function returns one line per repair it made (empty when there was nothing to do), so that callers print
what changed. Run-level state (Dagster runs and pool slots) is repaired by ``pipeline.recovery``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from warehouse import db, parts
from warehouse.parts.build import damage
from warehouse.publish import PARTIAL, POINTER, in_use, list_snapshots, point_to


def valid_snapshot(path: Path) -> bool:
    """True when the file opens as a complete snapshot (its ``snapshot_info`` row is the last thing written); for
    a set, when its manifest reads and every part it lists is there, the head complete."""
    if parts.is_set(path):
        try:
            names = parts.set_parts(path)
        except (OSError, ValueError, KeyError):
            return False
        return not any(damage(path.parent, n) for n in names) and valid_snapshot(path.parent / names[0])
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return False
    try:
        return con.execute("SELECT count(*) FROM snapshot_info").fetchall()[0][0] == 1
    except duckdb.Error:
        return False
    finally:
        con.close()


def repair_snapshots(snapshots_dir: Path, fix: bool = True) -> list[str]:
    """Delete unfinished snapshot and part files and pointer temp files; point a missing or dangling ``CURRENT``
    at the newest complete snapshot (a file or a set). With ``fix=False`` only say what would be repaired.
    Complete parts no set references are left to pruning (``prune_snapshots``, run by every publish)."""
    snapshots_dir = Path(snapshots_dir)
    if not snapshots_dir.is_dir():
        return []
    done = []
    verb = "removed" if fix else "would remove"
    for tmp in sorted(snapshots_dir.glob(f".{POINTER}.*.tmp")):
        if fix:
            tmp.unlink(missing_ok=True)
        done.append(f"{verb} {tmp.name}, a pointer update a crash interrupted")
    with parts.publish_lock(snapshots_dir, wait=False) as free:
        # a set's manifest or a part's sidecar being written (temp file + rename); not while a publish runs
        for tmp in sorted(snapshots_dir.glob(".set-*.tmp")) + sorted(snapshots_dir.glob(".part-*.tmp")) if free else []:
            if fix:
                tmp.unlink(missing_ok=True)
            done.append(f"{verb} {tmp.name}, a manifest or part description a crash interrupted")
    for partial in sorted(snapshots_dir.glob(f"*{PARTIAL}")):
        if in_use(partial):  # a publish in progress in another process
            continue
        if fix:
            for p in (partial, partial.with_name(partial.name + ".wal")):
                p.unlink(missing_ok=True)
        done.append(f"{verb} {partial.name}, a snapshot whose writing a crash interrupted")
    pointer = snapshots_dir / POINTER
    named = pointer.read_text().strip() if pointer.exists() else None
    if named is not None and (snapshots_dir / named).is_file() and valid_snapshot(snapshots_dir / named):
        return done
    newest = next((p for p in reversed(list_snapshots(snapshots_dir)) if valid_snapshot(p)), None)
    problem = f"{POINTER} was missing" if named is None else f"{POINTER} named {named!r}, which is not a complete snapshot"
    if newest is not None:
        if fix:
            point_to(snapshots_dir, newest.name)
        done.append(f"{problem}: {'pointed' if fix else 'would point'} it at {newest.name}")
    elif named is not None:
        if fix:
            pointer.unlink(missing_ok=True)
        done.append(f"{problem} and no complete snapshot exists: {verb} it (the next run publishes one)")
    return done


def replay_warehouse_wal(warehouse_path: Path, fix: bool = True) -> list[str]:
    """A write-ahead log beside the warehouse means its last writer died before a checkpoint: open it read-write
    (DuckDB replays the log's committed transactions) and checkpoint."""
    wal = Path(str(warehouse_path) + ".wal")
    if not wal.exists():
        return []
    if not fix:
        return [f"would replay {wal.name}: the last writer ended without a checkpoint"]
    con = db.connect(warehouse_path)
    try:
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return [f"replayed {wal.name} (committed writes of a process that ended without a checkpoint) and checkpointed"]
