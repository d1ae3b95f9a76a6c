"""What a snapshots folder holds, and which publication ``CURRENT`` names: the read side of ``warehouse.publish``.

Readers (the API, ``cryptowire sql``, the checks) find the published snapshot here without loading the code that
writes snapshots (``warehouse.publish``, ``warehouse.parts.build`` and ``warehouse.parts.publish``).
"""

from __future__ import annotations

from pathlib import Path

POINTER = "CURRENT"
PREFIX = "snapshot-"
SUFFIX = ".duckdb"
PARTIAL = ".partial"  # a snapshot being written: never listed, never pointed to
# Partitioned snapshots (warehouse.parts): a set manifest names its part files; CURRENT may name a manifest.
SET_PREFIX = "set-"
SET_SUFFIX = ".json"
PART_PREFIX = "part-"
PART_SUFFIX = ".duckdb"


def is_publication(name: str) -> bool:
    """A single-file snapshot or a set manifest: what ``CURRENT`` may name."""
    return "/" not in name and (
        (name.startswith(PREFIX) and name.endswith(SUFFIX)) or (name.startswith(SET_PREFIX) and name.endswith(SET_SUFFIX))
    )


def current_snapshot(snapshots_dir: Path) -> Path | None:
    """The published snapshot ``CURRENT`` points to (a single file or a set manifest), or None when nothing was
    published yet."""
    try:
        raw = (snapshots_dir / POINTER).read_bytes()
    except FileNotFoundError:
        return None
    name = raw.decode("utf-8", "backslashreplace").strip()  # damaged bytes are named, not a UnicodeDecodeError
    if not is_publication(name):
        raise ValueError(f"{snapshots_dir / POINTER} names {name!r}, which is not a snapshot file")
    return snapshots_dir / name
