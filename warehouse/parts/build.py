"""Writing one part file and its sidecar.

- one **part file** per period (``part-<period>-<UTC time>-<random>.duckdb``), holding that period's rows of the
  four tables in serving order with a *local* ``pos`` (0, 1, ... newest first), the same columns and indexes as a
  full snapshot.
- a sidecar ``part-....json`` per part: period, row counts, the newest and oldest serving keys of each table, the
  part's filter values (sources, topics, tickers), and its warehouse rows' count and time sum per table, so a
  publish never opens reused parts; and the part file's size and SHA-256, so that a part damaged on disk (cut
  short, or overwritten in place) is never reused or served (``damage``).
- the head part also holds the set-wide tables: ``filter_values`` (the union of every part's values),
  ``snapshot_info`` (tag, creation time, ``format`` = 3, total articles and events) and ``assets`` (the
  registry's symbols, names and renames: ``warehouse.publish.write_assets``).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from warehouse.crashpoints import crash_point
from warehouse.parts.changes import CHECKED, range_aggregates
from warehouse.parts.contents import INDEXES, VALUES_SQL, part_sql
from warehouse.parts.periods import EPOCH, Cuts, period_range
from warehouse.parts.read import PAGED, SET_FORMAT, TABLES
from warehouse.publish import (
    ROW_GROUP_SIZE,
    STAMP,
    fsync_path,
    unlink_quietly,
    write_assets,
    write_atomically,
)
from warehouse.published import PART_PREFIX, PART_SUFFIX, PARTIAL

_US = timedelta(microseconds=1)
TIME_COLUMN = {"news": "published_at", "stories": "first_seen", "events": "created_at"}


def _us(dt: datetime) -> int:
    return (dt - EPOCH) // _US


@dataclass
class Part:
    """A part as the manifest and its sidecar describe it."""

    name: str
    period: str
    counts: dict[str, int]
    keys: dict[str, list[Any]]  # table -> [newest µs, newest id, oldest µs, oldest id] (ids "" for events)
    values: dict[str, list[str]]
    agg: dict[str, list[str]]  # table -> [row count, sum of the time column in µs] of the warehouse rows

    def entry(self) -> dict[str, Any]:
        return {"name": self.name, "period": self.period, "counts": self.counts, "keys": self.keys}

    @classmethod
    def load(cls, snapshots_dir: Path, name: str) -> Part:
        """Raises ValueError for a part whose file is not the one written (damaged on disk: ``damage``) or
        that records no checksum, so that a publish builds its period anew instead of reusing it."""
        data = json.loads((snapshots_dir / sidecar_name(name)).read_text())
        problem = damage(snapshots_dir, name, data)
        if problem:
            raise ValueError(problem)
        if "sha256" not in data:  # written before checksums: served as it is, rebuilt once to be checkable
            raise ValueError(f"part {name} has no recorded checksum")
        return cls(name, data["period"], data["counts"], data["keys"], data["values"], data["agg"])


def damage(snapshots_dir: Path, name: str, sidecar: dict[str, Any] | None = None) -> str | None:
    """Why a finished part cannot be trusted (missing, no sidecar, not the size or the SHA-256 its sidecar
    recorded), or None. The checksum reads the whole file (about 0.1 s for the 157 MB of a 300k-article set,
    page cache warm): DuckDB's own block checksums are only seen when a query reads the block, so a part overwritten
    in place would otherwise be reused by every publish and fail the reads of its period. Parts written before
    sizes and checksums were recorded are checked for what their sidecar has."""
    path = snapshots_dir / name
    try:
        data = sidecar if sidecar is not None else json.loads((snapshots_dir / sidecar_name(name)).read_text())
        size = path.stat().st_size
        written, digest = data.get("bytes"), data.get("sha256")
        if written is not None and size != written:
            return f"part {name} is damaged: {size} bytes on disk, {written} when it was written"
        if digest is not None and _sha256(path) != digest:
            return f"part {name} is damaged: its content is not what was written (SHA-256 differs)"
    except (OSError, ValueError, AttributeError) as exc:
        return f"part {name} cannot be read ({type(exc).__name__})"
    return None


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sidecar_name(part_name: str) -> str:
    return part_name.removesuffix(PART_SUFFIX) + ".json"


def new_stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime(STAMP) + "Z-" + secrets.token_hex(3)


def write_json(path: Path, data: Any) -> None:
    write_atomically(path, lambda f: json.dump(data, f, separators=(",", ":")))


def build_part(
    con: duckdb.DuckDBPyConnection, snapshots_dir: Path, period: str, cuts: Cuts, head: dict[str, Any] | None = None,
) -> Part | None:
    """Write one period's rows into a new part file; ``head`` (tag, created_at, values, totals) makes it the head.
    A period with no rows at all gets no part (None), except the head."""
    name = f"{PART_PREFIX}{period}-{new_stamp()}{PART_SUFFIX}"
    path = snapshots_dir / name
    partial = path.with_name(name + PARTIAL)
    alias = f"cw_part_{secrets.token_hex(4)}"
    literal = str(partial.resolve()).replace("'", "''")
    lo, hi = period_range(period, cuts)
    con.execute(f"ATTACH '{literal}' AS {alias} (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
    try:
        for table in TABLES:
            con.execute(part_sql(con, table, alias, lo, hi))
            if table in INDEXES:
                con.execute(f"CREATE UNIQUE INDEX {table}_{INDEXES[table]} ON {alias}.{table} ({INDEXES[table]})")
            crash_point("snapshot:writing" if head is not None else "parts:writing")
        counts = {t: int(con.execute(f"SELECT count(*) FROM {alias}.{t}").fetchall()[0][0]) for t in TABLES}
        if head is None and not any(counts.values()):
            raise _Empty
        agg = range_aggregates(con, lo, hi, tables=CHECKED)
        keys: dict[str, list[Any]] = {}
        for table in PAGED:
            col = TIME_COLUMN[table]
            rows = con.execute(
                f"SELECT pos, {col}, id FROM {alias}.{table} WHERE pos = 0 OR pos = ? ORDER BY pos",
                [counts[table] - 1],
            ).fetchall()
            if rows:
                newest, oldest = rows[0], rows[-1]
                events = table == "events"  # created_at alone is the events' key
                keys[table] = [_us(newest[1]), "" if events else newest[2], _us(oldest[1]), "" if events else oldest[2]]
        values: dict[str, list[str]] = {"newsSources": [], "newsTopics": [], "tickers": []}
        for kind, value in con.execute(VALUES_SQL.format(db=alias)).fetchall():
            if value is not None:
                values[kind].append(value)
        for v in values.values():
            v.sort()
        if head is not None:
            merged = {k: sorted(set(v) | set(head["values"].get(k, []))) for k, v in values.items()}
            con.execute(f"CREATE TABLE {alias}.filter_values (kind VARCHAR, value VARCHAR)")
            rows_in = [(k, v) for k in sorted(merged) for v in merged[k]]
            if rows_in:
                con.executemany(f"INSERT INTO {alias}.filter_values VALUES (?, ?)", rows_in)
            con.execute(
                f"""CREATE TABLE {alias}.snapshot_info AS SELECT ?::VARCHAR AS tag, ?::TIMESTAMP AS created_at,
                    ?::INTEGER AS format, ?::BIGINT AS articles, ?::BIGINT AS events""",
                [head["tag"], head["created_at"], SET_FORMAT, head["articles"] + counts["news"],
                 head["events"] + counts["events"]],
            )
            write_assets(con, alias)
        con.execute(
            f"""CREATE TABLE {alias}.part_info AS SELECT ?::VARCHAR AS period, ?::TIMESTAMP AS lo, ?::TIMESTAMP AS hi""",
            [period, lo, hi],
        )
        con.execute(f"CHECKPOINT {alias}")
        con.execute(f"DETACH {alias}")
        fsync_path(partial)
        # checked before a part is reused or served (Part.load, damage); the file was just written: the read
        # comes from the page cache
        write_json(snapshots_dir / sidecar_name(name), {
            "period": period, "counts": counts, "keys": keys, "values": values, "agg": agg,
            "bytes": partial.stat().st_size, "sha256": _sha256(partial),
        })
        os.replace(partial, path)
    except _Empty:
        _detach(con, alias)
        unlink_quietly(partial)
        return None
    except BaseException:
        # a full disk or a stop: nothing of this part stays (the sidecar is renamed last but one, the part last)
        _detach(con, alias)
        unlink_quietly(partial)
        (snapshots_dir / sidecar_name(name)).unlink(missing_ok=True)
        raise
    return Part(name, period, counts, keys, values, agg)


def _detach(con: duckdb.DuckDBPyConnection, alias: str) -> None:
    """Detach a part being written, if still attached; a failure here must not hide the error being raised."""
    try:
        con.execute(f"DETACH DATABASE IF EXISTS {alias}")
    except duckdb.Error:
        pass


class _Empty(Exception):
    """A period left with no rows: no part."""
