"""The serving snapshot the API reads, and switching to a newer one without failing a request.

The pipeline publishes snapshots by replacing ``snapshots/CURRENT`` (see ``warehouse.publish`` and
``warehouse.parts``). The manager polls that pointer; when it names a new file or set, it is opened read-only (in a worker thread) and becomes
current. Each request holds the snapshot it started with for its whole duration (a reference count), so a switch
never changes data under a running request, and the old connection is closed only when its last request ends.
The API never opens the warehouse itself.

What each file of the current snapshot was when opened (size, modification time, inode) is kept: ``damage()``
compares it with the disk (a few stats, no reopening) so that /readyz reports a part deleted, cut short or
overwritten since, which the queries reading its blocks would fail on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio.to_thread
import duckdb

from api.older import snapshot_gaps
from warehouse.parts.read import Layout, is_set, open_snapshot, set_parts
from warehouse.published import current_snapshot
from warehouse.read import PageCache, SnapshotReader, snapshot_fact
from warehouse.trends import newest_dated

log = logging.getLogger("cryptowire.api")

# What to do about a snapshot that cannot be (fully) read: a publish sets a damaged set aside (its repair) and
# rebuilds the periods whose parts are damaged; the API switches to the new set by itself.
REPUBLISH = ("publish again: `cryptowire materialize` (or the serving_snapshot asset alone: `cryptowire materialize "
             "--select serving_snapshot`); the API switches to the new snapshot by itself")


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def snapshot_files(path: Path) -> list[Path]:
    """The files a published snapshot is read from: a set's parts, or the single file."""
    return [path.parent / name for name in set_parts(path)] if is_set(path) else [path]


class Snapshot:
    """One open snapshot: a read-only DuckDB connection and a pool of cursors (one per thread at a time). A single
    file, or a set of parts (``warehouse.parts``: an in-memory connection with the parts attached read-only)."""

    def __init__(self, path: Path, cache_size: int = 0) -> None:
        self.path = path
        self.name = path.name
        self.layout: Layout | None = None
        self.con, self.layout = open_snapshot(path)  # a set or a single file, read in UTC
        try:
            self.tag, self.articles, self.events = SnapshotReader.info(self.con)
            # the files as opened, for damage(); stat'ed after the open, so these are the files DuckDB holds
            self.files = {f: _identity(f.stat()) for f in snapshot_files(path)}
        except Exception:
            self.con.close()
            raise
        self.cache = PageCache(cache_size)  # a snapshot never changes: its pages can be kept
        self.facts: dict[str, Any] = {}  # ... and its schema and newest article, whatever the cache's size
        try:  # known before any request: it prices an assetSentiment range given by `since` alone (api.cost)
            snapshot_fact(self.facts, "newest_dated", lambda: newest_dated(self.con))
        except Exception:  # a snapshot that cannot tell: such requests are priced at the interval's limit
            log.warning("snapshot %s: its newest dated article could not be read", self.name, exc_info=True)
        # What an older cryptowire's snapshot lacks (api.older): the fields that need it are refused or noted.
        self.gaps: frozenset[str] = frozenset()
        try:
            self.gaps = snapshot_gaps(self.con)
        except Exception:  # pragma: no cover - a readable snapshot answers its catalog
            log.warning("snapshot %s: its tables could not be listed", self.name, exc_info=True)
        if self.gaps:
            log.warning("snapshot %s was published by an older cryptowire and lacks: %s; run `cryptowire "
                        "materialize` to publish a new one", self.name, ", ".join(sorted(self.gaps)))
        self.refs = 0
        self.retired = False
        self.closed = False
        self._pool: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()

    def damage(self) -> tuple[str, bool] | None:
        """Why a file of this snapshot is no longer the one opened, and whether queries can still read it; else
        None. Deleted or unreadable: the open file is still read (a restart could not open it). Another size, or
        overwritten in place: the blocks DuckDB has not cached fail. Stats only (about 3 us a file). A file
        replaced by one of the same size (a copy put back) is not damage: the open one is still read."""
        for path, (dev, ino, size, mtime) in self.files.items():
            serving = True
            try:
                now = _identity(path.stat())
                why = None if os.access(path, os.R_OK) else "cannot be read (permission denied)"
            except FileNotFoundError:
                why = "was deleted"
            except OSError as exc:
                why = f"cannot be read ({exc.strerror})"
            else:
                serving = False
                if now[2] != size:
                    why = f"is damaged: {now[2]} bytes on disk, {size} when it was opened"
                elif now[:2] == (dev, ino) and now[3] != mtime:
                    why = "was overwritten in place since it was opened"
                else:
                    serving = True
            if why is not None:
                what = (f"the served snapshot {self.name}" if path.name == self.name
                        else f"part file {path.name} of the served set {self.name}")
                still = "; this server still reads the file it opened, but a restart could not" if serving else ""
                return f"{what} {why}{still}; {REPUBLISH}", serving
        return None

    @contextmanager
    def reader(self) -> Iterator[SnapshotReader]:
        """A reader on a cursor of its own; use it from one thread, while holding a reference."""
        with self._lock:
            cur = self._pool.pop() if self._pool else self.con.cursor()
        try:
            yield SnapshotReader(cur, self.tag, self.articles, self.events, self.cache, self.layout, self.facts)
        finally:
            with self._lock:
                self._pool.append(cur)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, []
            self.closed = True
        for cur in pool:
            with suppress(Exception):
                cur.close()
        with suppress(Exception):
            self.con.close()


class SnapshotManager:
    def __init__(self, snapshots_dir: Path, poll_seconds: float = 1.0, cache_size: int = 0) -> None:
        self.snapshots_dir = Path(snapshots_dir)
        self.poll_seconds = poll_seconds
        self.cache_size = cache_size
        self.current: Snapshot | None = None
        self.error: str | None = None  # why there is no (newer) snapshot, for /readyz
        self.switches = 0
        self._task: asyncio.Task[None] | None = None
        self._refresh_lock = asyncio.Lock()

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._poll(), name="snapshot-poll")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        old, self.current = self.current, None
        if old is not None:
            old.retired = True
            if old.refs == 0:
                old.close()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self.refresh()
            except Exception:  # keep polling; the reason is shown by /readyz
                log.exception("snapshot refresh failed")

    async def refresh(self) -> bool:
        """Switch to the snapshot ``CURRENT`` names, if it is new; return True on a switch."""
        async with self._refresh_lock:
            try:
                path = current_snapshot(self.snapshots_dir)
            except (OSError, ValueError) as exc:
                self.error = str(exc)
                return False
            if path is None:
                if self.current is None:
                    self.error = (f"no snapshot published in {self.snapshots_dir} yet: run `cryptowire materialize` "
                                  "on the writer machine (on an API machine, copy its snapshots/ here)")
                return False
            if self.current is not None and self.current.name == path.name:
                return False
            try:
                snap = await anyio.to_thread.run_sync(Snapshot, path, self.cache_size)
            except Exception as exc:
                self.error = f"cannot open snapshot {path.name}: {exc}; {REPUBLISH}"
                log.error("%s", self.error)
                return False
            old, self.current = self.current, snap
            self.error = None
            self.switches += 1
            log.info("serving snapshot %s (%d articles, %d events)", snap.name, snap.articles, snap.events)
            if old is not None:
                old.retired = True
                if old.refs == 0:
                    old.close()
            return True

    @contextmanager
    def acquire(self) -> Iterator[Snapshot | None]:
        """The current snapshot, held until the block ends (call from the event loop)."""
        snap = self.current
        if snap is None:
            yield None
            return
        snap.refs += 1
        try:
            yield snap
        finally:
            snap.refs -= 1
            if snap.retired and snap.refs == 0 and not snap.closed:
                snap.close()
