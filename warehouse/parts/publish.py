"""Publishing a set: its new parts, then its manifest, then ``CURRENT``.

A **manifest** ``set-<UTC time>-<random>.json`` lists the parts in serving order (newest period first) with their
counts and boundary keys; ``snapshots/CURRENT`` names it, replaced atomically as for a single file.

Crash safety: parts are written as ``.partial``, checkpointed, fsynced and renamed; sidecars and the manifest are
written to a temp file, fsynced and renamed; ``CURRENT`` switches last. A crash leaves at worst partial files and
complete parts or a manifest that ``CURRENT`` does not name: ``repair_snapshots`` removes them all (parts no
kept set references and no process holds open), as does pruning. A publish that raises (a full disk, a stop)
removes what it wrote itself: a failed publish leaves the directory as it found it. A publish holds
``snapshots/.publish.lock`` (flock) for its whole length so that pruning or a repair elsewhere never takes the
parts of a set being written for orphans.

A part whose file is not what was written (``build.damage``: size and SHA-256) is not reused: its period is
built anew.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from warehouse.crashpoints import crash_point
from warehouse.parts.build import Part, build_part, new_stamp, write_json
from warehouse.parts.changes import (
    CHECKED,
    SOURCES,
    changed_periods,
    period_aggregates,
    periods_from,
    periods_of_changed_stories,
    periods_of_stories_in,
    range_aggregates,
    totals,
)
from warehouse.parts.contents import stage, unstage
from warehouse.parts.periods import HEAD, Cuts, period_range, serving_order
from warehouse.parts.read import PART_CONTENTS, SET_FORMAT, NewerFormat, is_set, read_manifest
from warehouse.publish import STAMP, fsync_path, list_snapshots, point_to, prune_snapshots, remove_part
from warehouse.published import POINTER, SET_PREFIX, SET_SUFFIX, current_snapshot
from warehouse.published import PREFIX as SNAPSHOT_PREFIX

LOCK = ".publish.lock"


@contextmanager
def publish_lock(snapshots_dir: Path, wait: bool = True) -> Iterator[bool]:
    """Held by a publish (flock on ``.publish.lock``); with ``wait=False`` yields False when another holds it."""
    fd = os.open(snapshots_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def clock() -> datetime:
    return datetime.now(UTC)


def _after_newest(snapshots_dir: Path) -> datetime:
    """Now, or just after the newest publication's time when the clock has gone back since (a VM restored, a clock
    stepped): names sort in publication order, and pruning and repairs take the last name for the newest."""
    now = clock()
    for path in reversed(list_snapshots(snapshots_dir)):
        stamp = path.name.removeprefix(SET_PREFIX).removeprefix(SNAPSHOT_PREFIX)[:21]
        try:
            newest = datetime.strptime(stamp, STAMP).replace(tzinfo=UTC)
        except ValueError:
            continue
        return max(now, newest + timedelta(microseconds=1))
    return now


@dataclass
class Previous:
    """The set ``CURRENT`` names, as the next publish starts from it."""

    cuts: Cuts
    marks: dict[str, str | None]
    parts: dict[str, Part]  # period -> part, the head excluded
    damaged: set[str]  # periods whose part is damaged on disk or unreadable: built anew


def _previous(snapshots_dir: Path) -> Previous | None:
    try:
        current = current_snapshot(snapshots_dir)
        if current is None or not is_set(current):
            return None
        manifest = read_manifest(current)
        # Parts of an older format or contents are not reused: every part is built anew.
        if manifest["format"] != SET_FORMAT or manifest.get("contents") != PART_CONTENTS:
            return None
        parts, damaged = {}, set()
        for entry in manifest["parts"]:
            if entry["period"] == HEAD:
                continue
            try:
                parts[entry["period"]] = Part.load(snapshots_dir, entry["name"])
            except (OSError, ValueError, KeyError, TypeError):
                damaged.add(entry["period"])
        marks = manifest["watermarks"]
        return Previous(Cuts.at(datetime.fromisoformat(manifest["now"])), marks, parts, damaged)
    except NewerFormat:  # a newer cryptowire published it: publishing over it would roll the data home back
        raise
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable: every part is built anew


def _empty_agg() -> list[str]:
    return ["0", "0"]


def _sum_aggs(parts: list[Part]) -> dict[str, list[str]]:
    out = {}
    for table in CHECKED:
        n = sum(int(p.agg.get(table, _empty_agg())[0]) for p in parts)
        s = sum(int(p.agg.get(table, _empty_agg())[1]) for p in parts)
        out[table] = [str(n), str(s)]
    return out


def publish_set(
    con: duckdb.DuckDBPyConnection, snapshots_dir: Path, keep: int = 3, now: datetime | None = None,
) -> Path:
    """Publish the curated tables of the warehouse connection ``con`` as a new set, reusing every part of the
    current set whose period did not change; prune; return the manifest's path. ``now`` (naive UTC, default the
    clock) places the period boundaries.

    What changed since the current set: rows whose change stamps are newer than its watermarks, the articles of
    stories updated since, and the rows its head held when the boundaries moved; those periods get new parts. A
    cheap whole-table check (row count and sum of times per table) against the set's parts catches what stamps do
    not show (deletions, corrected dates): then every period's count and sum are compared (a full scan)."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the set just published); got {keep}")
    snapshots_dir = Path(snapshots_dir)
    snapshots_dir.mkdir(parents=True, exist_ok=True)
    now = now or datetime.now(UTC).replace(tzinfo=None)
    with publish_lock(snapshots_dir):
        created: list[str] = []  # file names this attempt wrote, in order: removed again should it raise
        try:
            manifest_path = _publish(con, snapshots_dir, now, created)
        except BaseException:
            _discard(snapshots_dir, created)
            raise
        prune_snapshots(snapshots_dir, keep, holding_lock=True)
    return manifest_path


def _discard(snapshots_dir: Path, created: list[str]) -> None:
    """Remove the parts and the manifest of a publish that raised, unless ``CURRENT`` already names the
    manifest (the failure came after the switch). Without this, every failed attempt on a full disk left its
    parts behind, filling the disk further, and nothing but a later successful publish collected them."""
    try:
        named = (snapshots_dir / POINTER).read_text().strip()
    except (OSError, ValueError):
        named = None
    if named in created:
        return
    for name in reversed(created):
        if name.endswith(SET_SUFFIX) and name.startswith(SET_PREFIX):
            (snapshots_dir / name).unlink(missing_ok=True)
        else:
            remove_part(snapshots_dir / name)


def _publish(con: duckdb.DuckDBPyConnection, snapshots_dir: Path, now: datetime, created: list[str]) -> Path:
    """The publish itself, under the lock; appends each file it completes to ``created``."""
    cuts = Cuts.at(now)
    prev = _previous(snapshots_dir)
    reused: dict[str, Part] = {}
    if prev is None or any(prev.marks.get(t) is None for t in SOURCES):
        _, marks = changed_periods(con, cuts, {})
        todo = set(period_aggregates(con, cuts))
    else:
        todo, marks = changed_periods(con, cuts, prev.marks)
        todo |= periods_of_changed_stories(con, cuts, prev.marks["stories"], prev.marks["news"])
        if cuts.hour != prev.cuts.hour:  # the previous head's rows now fall in closed periods
            todo |= periods_from(con, cuts, prev.cuts.hour)
        for period in prev.damaged:  # its rows, wherever they fall now
            todo |= periods_from(con, cuts, *period_range(period, prev.cuts))
        for period, part in prev.parts.items():
            lo, hi = period_range(period, prev.cuts)
            if cuts.sql_key(lo) != period:  # closed into a longer period (hours into a day, days into a month)
                todo |= periods_from(con, cuts, lo, hi)  # (or split, should the clock have gone back)
            elif period not in todo:
                reused[period] = part
        # What stamps cannot show (deletions, corrected dates): whole-table counts and time sums against the
        # reused parts' plus the rows of the periods to build and of the head.
        fresh = range_aggregates(con, None, None, [period_range(p, cuts) for p in todo | {HEAD}], CHECKED)
        kept = _sum_aggs(list(reused.values()))
        expected = {t: [str(int(kept[t][i]) + int(fresh[t][i])) for i in ((0, 1) if CHECKED[t] else (0,))]
                    for t in CHECKED}
        if expected != totals(con):
            full = period_aggregates(con, cuts)
            for period, part in list(reused.items()):
                if period not in full or any(part.agg.get(t, _empty_agg()) != full[period].get(t, _empty_agg())
                                             for t in CHECKED):
                    del reused[period]
            differ = {p for p in full if p not in reused} - todo
            todo |= differ | periods_of_stories_in(con, cuts, differ)
            for period in todo & set(reused):
                del reused[period]
    todo = set(serving_order(sorted(todo - {HEAD}), cuts))
    # The children of every article to serve anew are looked up once: closed periods to build and the head.
    stage(con, [period_range(p, cuts) for p in [*todo, HEAD]])
    try:
        built: list[Part | None] = []
        for period in serving_order(sorted(todo), cuts):
            new = build_part(con, snapshots_dir, period, cuts)
            if new is not None:
                created.append(new.name)
            built.append(new)
        parts = [*reused.values(), *(p for p in built if p is not None)]
        parts = [p for period in serving_order([p.period for p in parts], cuts) for p in parts if p.period == period]
        if built:
            fsync_path(snapshots_dir)
        crash_point("parts:written")
        union: dict[str, set[str]] = {"newsSources": set(), "newsTopics": set(), "tickers": set()}
        for part in parts:
            for k, v in part.values.items():
                union.setdefault(k, set()).update(v)
        tag = secrets.token_hex(4)
        created_at = datetime.now(UTC).replace(tzinfo=None)
        head = build_part(con, snapshots_dir, HEAD, cuts, head={
            "tag": tag, "created_at": created_at, "values": {k: sorted(v) for k, v in union.items()},
            "articles": sum(p.counts["news"] for p in parts), "events": sum(p.counts["events"] for p in parts),
        })
    finally:
        unstage(con)
    assert head is not None
    created.append(head.name)
    parts.insert(0, head)
    manifest_path = snapshots_dir / f"{SET_PREFIX}{new_stamp(_after_newest(snapshots_dir))}{SET_SUFFIX}"
    write_json(manifest_path, {
        "format": SET_FORMAT, "contents": PART_CONTENTS, "tag": tag, "created_at": created_at.isoformat(), "now": now.isoformat(),
        "watermarks": marks, "articles": sum(p.counts["news"] for p in parts),
        "events": sum(p.counts["events"] for p in parts), "parts": [p.entry() for p in parts],
    })
    created.append(manifest_path.name)
    fsync_path(snapshots_dir)
    crash_point("snapshot:written")
    point_to(snapshots_dir, manifest_path.name)
    crash_point("snapshot:published")
    return manifest_path
