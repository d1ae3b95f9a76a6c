"""Reading a set: its manifest, and one connection over its parts.

Readers (``open_set``) use one in-memory DuckDB connection that ATTACHes every part READ_ONLY and defines views
``news``, ``stories``, ``events`` (the parts' rows with ``pos`` shifted by the rows of the newer parts, so ``pos``
is dense and global as in a single file), ``filter_values``, ``snapshot_info`` and ``assets`` (when the head has
it), and a table ``sentiment`` (an
in-memory copy of the parts' buckets, sorted by ticker: 130,229 rows, 8 MB at 1M articles): every query written
for a single file runs unchanged. The API's pages go to the parts directly (``Layout``: per table, each
part's relation, offset, row count and boundary keys), so a page reads one part (two when it straddles periods).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from warehouse.published import SET_PREFIX, SET_SUFFIX

SET_FORMAT = 3  # 3: events carry updated_at and withdrawn_at (2026-11-26)
READABLE_FORMATS = (2, SET_FORMAT)  # a set of format 2 is served until the next publish replaces it
# What the parts hold, within a format that readers of it can read (added columns only; readers ask for them):
# 4: news carries the story_prior_* columns (2026-11-27). Parts of other contents are not reused.
PART_CONTENTS = 4
TABLES = ("news", "stories", "events", "sentiment")  # every part holds the four
PAGED = ("news", "stories", "events")  # tables with pos, read page by page


class NewerFormat(ValueError):
    """A set (its manifest) written by a newer cryptowire: a format above ``SET_FORMAT``. Not damage: nothing may
    repair it (pointing ``CURRENT`` at an older set would roll the data home back); this cryptowire is too old."""

    def __init__(self, path: Path, found: int) -> None:
        self.path, self.found = path, found
        super().__init__(
            f"the snapshot set {path.name} was written by a newer cryptowire (format {found}; this one reads up to "
            f"{SET_FORMAT}): upgrade cryptowire"
        )


def read_manifest(path: Path | str) -> dict[str, Any]:
    """A set's manifest. ``NewerFormat`` (a ValueError) for one a newer cryptowire wrote; ValueError for what is
    not a manifest this one can read (damaged, or of a format it no longer serves)."""
    path = Path(path)
    data = json.loads(path.read_text())
    found = data.get("format") if isinstance(data, dict) else None
    if isinstance(found, int) and not isinstance(found, bool) and found > SET_FORMAT:
        raise NewerFormat(path, found)
    if (not isinstance(data, dict) or found not in READABLE_FORMATS or not isinstance(data.get("parts"), list)
            or not data["parts"]):
        raise ValueError(f"{path.name} is not a snapshot set manifest")
    return data


def is_set(path: Path | str) -> bool:
    path = Path(path)
    return path.name.startswith(SET_PREFIX) and path.name.endswith(SET_SUFFIX)


@dataclass(frozen=True)
class Segment:
    """One part's rows of a paged table: ``rel`` (``p3.news``) holds global positions ``[offset, offset+count)``;
    ``newest`` / ``oldest`` are its first and last serving keys (µs, id)."""

    rel: str
    offset: int
    count: int
    newest: tuple[int, str]
    oldest: tuple[int, str]


Layout = dict[str, list[Segment]]


def _utc(con: duckdb.DuckDBPyConnection) -> None:
    """Times read in UTC, as in the warehouse (``warehouse.db.connect``), whatever the machine's TZ: a TIMESTAMP
    compared with now() or cast to TIMESTAMPTZ is taken in the session's time zone. GLOBAL, so that the
    connection's cursors (the API's readers) have it too."""
    con.execute("SET GLOBAL TimeZone = 'UTC'")


def open_set(manifest_path: Path | str) -> tuple[duckdb.DuckDBPyConnection, Layout]:
    """An in-memory connection with every part of the set attached read-only and the serving views defined, and
    the layout of its paged tables."""
    manifest_path = Path(manifest_path)
    manifest = read_manifest(manifest_path)
    directory = manifest_path.parent
    con = duckdb.connect(":memory:")
    try:
        _utc(con)
        entries = manifest["parts"]
        for i, entry in enumerate(entries):
            literal = str((directory / entry["name"]).resolve()).replace("'", "''")
            con.execute(f"ATTACH '{literal}' AS p{i} (READ_ONLY)")
        layout: Layout = {}
        for table in TABLES:
            branches, offset, segments = [], 0, []
            for i, entry in enumerate(entries):
                n = int(entry["counts"].get(table, 0))
                if n == 0:
                    continue
                if table in PAGED:
                    k = entry["keys"][table]
                    segments.append(Segment(f"p{i}.{table}", offset, n, (k[0], k[1]), (k[2], k[3])))
                    branches.append(f"SELECT pos + {offset} AS pos, * EXCLUDE (pos) FROM p{i}.{table}")
                else:
                    branches.append(f"SELECT * FROM p{i}.{table}")
                offset += n
            if not branches:
                branches = [f"SELECT * FROM p0.{table}"]  # the head's, empty
            if table == "sentiment":
                # Small (buckets, not articles) and asked by ticker over ranges that span most parts: one sorted
                # in-memory copy per open set answers in one scan (about 1 ms) where 33 parts took 7 ms at 1M.
                con.execute("CREATE TABLE sentiment AS SELECT * FROM (" + " UNION ALL ".join(branches) + ") "
                            "ORDER BY ticker, grain, bucket_start")
                continue
            con.execute(f"CREATE VIEW {table} AS " + " UNION ALL ".join(branches))
            if table in PAGED:
                layout[table] = segments
        con.execute("CREATE VIEW filter_values AS SELECT * FROM p0.filter_values")
        con.execute("CREATE VIEW snapshot_info AS SELECT * FROM p0.snapshot_info")
        if con.execute("SELECT 1 FROM duckdb_tables() WHERE database_name = 'p0' AND table_name = 'assets'").fetchall():
            con.execute("CREATE VIEW assets AS SELECT * FROM p0.assets")  # sets published before it lack it
    except BaseException:
        con.close()
        raise
    return con, layout


def open_snapshot(path: Path | str) -> tuple[duckdb.DuckDBPyConnection, Layout | None]:
    """A read-only connection to a published snapshot and its layout: a set (by its manifest), or a single file
    (layout None). Its time zone is UTC."""
    if is_set(path):
        return open_set(path)
    con = duckdb.connect(str(path), read_only=True)
    _utc(con)
    return con, None


def connect_snapshot(path: Path | str) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a published snapshot: a single file, or a set (by its manifest; the path
    ``snapshots/CURRENT`` holds the name of). ``path``: a Path or a str."""
    return open_snapshot(path)[0]


def set_parts(manifest_path: Path | str) -> list[str]:
    """Part file names a manifest references."""
    return [e["name"] for e in read_manifest(manifest_path)["parts"]]
