"""Repairs for what a crash can leave in the data home's files: half-written snapshots, parts no set references
(a publish killed or failed), a stray pointer temp file, a ``CURRENT`` that names nothing or a set with a part
damaged on disk, and a warehouse whose write-ahead log was never checkpointed (or cannot be replayed).

Each function returns one line per repair it made (empty when there was nothing to do), so that callers print
what changed. Run-level state (Dagster runs and pool slots) is repaired by ``pipeline.recovery``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from warehouse import db, parts
from warehouse.parts.build import damage
from warehouse.publish import fsync_path, in_use, list_snapshots, orphans, point_to, remove_part
from warehouse.published import PARTIAL, POINTER, is_publication


def valid_snapshot(path: Path) -> bool:
    """True when the file opens as a complete snapshot (its ``snapshot_info`` row is the last thing written); for
    a set, when its manifest reads and every part it lists is there as it was written, the head complete."""
    return snapshot_problem(path) is None


def snapshot_problem(path: Path, checked: dict[str, str | None] | None = None) -> str | None:
    """Why ``path`` is not a complete snapshot, or None. ``checked`` (part name -> its problem) spares reading a
    part shared by several sets twice. Raises ``parts.NewerFormat`` for a set a newer cryptowire wrote."""
    if parts.is_set(path):
        try:
            names = parts.set_parts(path)
        except parts.NewerFormat:  # not damage: this cryptowire is too old to judge it (raised, never repaired)
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return "its manifest cannot be read"
        checked = {} if checked is None else checked
        for name in names:
            if name not in checked:
                checked[name] = damage(path.parent, name)
            if checked[name]:
                return checked[name]
        return snapshot_problem(path.parent / names[0])
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return f"{path.name} does not open"
    try:
        if con.execute("SELECT count(*) FROM snapshot_info").fetchall()[0][0] == 1:
            return None
        return f"{path.name} is unfinished"
    except duckdb.Error:
        return f"{path.name} is unfinished or cannot be read"
    finally:
        con.close()


def refuse_newer(snapshots_dir: Path) -> None:
    """Raise ``parts.NewerFormat`` when a set in ``snapshots_dir`` was written by a newer cryptowire (the newest
    such set named). Such a set is not damage: "repairing" it would point ``CURRENT`` back at an older set (or
    take its parts for orphans), rolling back what the newer cryptowire published. A manifest that does not read
    at all is damage, left to ``repair_snapshots``."""
    from warehouse.published import SET_PREFIX

    for manifest in reversed(list_snapshots(snapshots_dir)):
        if not manifest.name.startswith(SET_PREFIX):
            continue
        try:
            parts.read_manifest(manifest)
        except parts.NewerFormat:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue


def repair_snapshots(snapshots_dir: Path, fix: bool = True) -> list[str]:
    """Delete unfinished snapshot and part files, pointer temp files and parts no set references; point a
    missing or dangling ``CURRENT`` (or one naming a set with a damaged part) at the newest complete snapshot (a
    file or a set). With ``fix=False`` only say what would be repaired.

    Parts and temp files of sets are only touched while no publish runs, in any process: a publish holds
    ``.publish.lock`` from its first part to its switch of ``CURRENT``, and writes its parts before the manifest
    that references them.

    A set written by a newer cryptowire is refused before anything is touched (``refuse_newer`` raises
    ``parts.NewerFormat``, a ValueError whose message says to upgrade): it is not damage to repair."""
    snapshots_dir = Path(snapshots_dir)
    if not snapshots_dir.is_dir():
        return []
    refuse_newer(snapshots_dir)
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
        if free:
            done += _remove_orphans(snapshots_dir, fix)
    for partial in sorted(snapshots_dir.glob(f"*{PARTIAL}")):
        if in_use(partial):  # a publish in progress in another process
            continue
        if fix:
            for p in (partial, partial.with_name(partial.name + ".wal")):
                p.unlink(missing_ok=True)
        done.append(f"{verb} {partial.name}, a snapshot whose writing a crash interrupted")
    pointer = snapshots_dir / POINTER
    raw = pointer.read_bytes() if pointer.exists() else None
    named = None if raw is None else raw.decode("utf-8", "backslashreplace").strip()
    checked: dict[str, str | None] = {}
    why = None
    if named is not None:
        if not is_publication(named):  # damaged bytes, or a part's file: nothing the API may serve alone
            why = "not the name of a snapshot or of a set's manifest"
        elif (snapshots_dir / named).is_file():
            why = snapshot_problem(snapshots_dir / named, checked)
        else:
            why = "missing"
        if why is None:
            return done
    newest = next((p for p in reversed(list_snapshots(snapshots_dir)) if snapshot_problem(p, checked) is None), None)
    problem = (f"{POINTER} was missing" if named is None
               else f"{POINTER} named {named!r}, which is not a complete snapshot ({why})")
    if newest is not None:
        if fix:
            point_to(snapshots_dir, newest.name)
        done.append(f"{problem}: {'pointed' if fix else 'would point'} it at {newest.name}")
    elif named is not None:
        if fix:
            pointer.unlink(missing_ok=True)
        done.append(f"{problem} and no complete snapshot exists: {verb} it (the next run publishes one)")
    return done


def _remove_orphans(snapshots_dir: Path, fix: bool) -> list[str]:
    """Part files no set references, left by a publish killed or failed before its manifest was written: left
    alone, each failed attempt on a full disk took more of the space its retry needed. Call only with
    ``.publish.lock`` free (no publish in progress anywhere)."""
    found = orphans(snapshots_dir)
    if found is None:  # a manifest cannot be read: nothing can be called unreferenced yet
        return []
    unreferenced, lone = found
    verb = "removed" if fix else "would remove"
    done = []
    if unreferenced:
        size = sum(p.stat().st_size for p in unreferenced if p.exists())
        if fix:
            for path in unreferenced:
                remove_part(path)
        done.append(f"{verb} {len(unreferenced)} part file(s) ({size / 1e6:.1f} MB) no snapshot set references, "
                    "left by a publish that was killed or failed")
    if lone:
        if fix:
            for sidecar in lone:
                sidecar.unlink(missing_ok=True)
        done.append(f"{verb} {len(lone)} part description(s) whose part file is gone")
    return done


def replay_warehouse_wal(warehouse_path: Path, fix: bool = True) -> list[str]:
    """A write-ahead log beside the warehouse means its last writer died before a checkpoint: open it read-write
    (DuckDB replays the log's committed transactions) and checkpoint.

    A log DuckDB cannot replay (damaged on disk: a checksum fails) blocks every open of the warehouse. It is
    moved aside as ``<name>.corrupt-<UTC time>`` (kept, never deleted) and the warehouse opens as of its last
    checkpoint: what the log held (the commits of the asset whose process died before its checkpoint) is lost,
    and the run redoes it (ingest fetches the feeds again, their validators being lost with the articles; the
    later assets score, tag and merge the rows that lack it). Articles a feed no longer lists are lost for good,
    so waiting for a person would only lose more. With ``fix=False`` the log is replayed in memory (a read-only
    open) to tell the two cases apart; nothing on disk changes."""
    wal = db.wal_path(warehouse_path)
    if not wal.exists():
        return []
    if not fix:
        try:
            db.connect(warehouse_path, read_only=True, lock_wait=0).close()
        except db.WarehouseLogCorrupt as exc:
            return [f"would move {wal.name} aside: {exc.reason}; the commits it holds would be lost, and the next "
                    "run redoes them"]
        except db.WarehouseLocked:
            pass  # a reader holds it: said as before, the replay will tell
        return [f"would replay {wal.name}: the last writer ended without a checkpoint"]
    try:
        con = db.connect(warehouse_path)
    except db.WarehouseLogCorrupt as exc:
        aside = wal.with_name(f"{wal.name}.corrupt-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}")
        os.rename(wal, aside)
        fsync_path(wal.parent)
        db.connect(warehouse_path).close()  # opens as of the last checkpoint (and migrates)
        return [f"moved {wal.name} aside as {aside.name}: {exc.reason}; the warehouse is as of its last checkpoint "
                "and the next materialization redoes the lost commits (articles the feeds no longer list stay lost)"]
    try:
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return [f"replayed {wal.name} (committed writes of a process that ended without a checkpoint) and checkpointed"]
