"""The PDF endpoint's charge journal: a server killed outright (kill -9, the OOM killer) during a render has its
charge refunded by the next server to start on the same data home.

Each server process appends to a journal of its own, ``<home>/run/pdf-charges/<pid>-<random>.jsonl``, which it
holds a flock on while it lives. Per charge, two lines:

- ``charged`` (key id, plan, API, UTC day, CU) right after ``access.reserve`` returned;
- ``settled`` *before* the refund is asked for, or once the PDF was handed to the connection.

A ``write()`` that returned is in the kernel's page cache, which outlives the process: a kill -9 cannot lose it,
so no fsync (an OS crash or power cut is not covered, as metering's own ``synchronous=NORMAL`` is not). With this
order a kill anywhere loses at most one refund and never makes one twice: between ``reserve`` and the ``charged``
line the charge is kept (as before the journal); between the ``settled`` line and the refund the refund is lost.

The next start (``recover``, in the background) takes the journals one at a time: it locks one whose lock is free
(its process is gone; a live one's, or one another starting process is sweeping, stays locked and is skipped),
and for each charge without ``settled`` appends ``settled`` then refunds it to the day it was charged to; once
all are done the journal is removed, and closed before the next is opened (one file descriptor at a time,
however many journals killed servers left). At most ``MAX_JOURNALS_PER_START`` a start; the rest wait for the
next. When metering is unreachable the charge is reopened (its ``charged`` line appended again), the journal kept
and the sweep stops, for the start after. A journal is made under a hidden name, locked, then renamed: a sweep
never sees an unlocked journal of a live process.

A forced stop that cannot refund a stopped render's charge (metering unreachable) reopens it in this process's
journal the same way (``ChargeJournal.charged`` again), for the next start; so does a failed render's refund
while metering is unavailable (``api.pdf.refunds``), retried meanwhile, each retry settling it first.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import pwd
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accounts.access import log_lost_refund
from accounts.limits import MeteringUnavailable
from api.access import Caller, Charge

log = logging.getLogger("cryptowire.pdf")

SUFFIX = ".jsonl"
NEW_PREFIX = ".new-"  # a journal being made, not locked yet: renamed to <pid>-<random>.jsonl once it is
# A journal past this size takes no new charges: a new one does, and the old one goes once its charges settle.
ROTATE_BYTES = 1 << 20
# The killed servers' journals one start sweeps (each holds a few charges): the rest wait for the next start.
MAX_JOURNALS_PER_START = 1000
GiveBack = Callable[[Charge], Awaitable[Any]]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class JournalFile:
    """One journal file, opened for appending and flocked by this process."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.open = 0  # charges recorded here and not settled (this process's own journal)
        self.closed = False

    def append(self, record: dict[str, Any]) -> None:
        """One line in one write(): once it returns, a kill -9 of this process cannot undo it."""
        if self.closed:
            raise OSError(errno.EBADF, "the charge journal is closed")
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        _write_all(self.fd, data)
        self.size += len(data)

    def remove(self) -> None:
        """Unlink, then unlock, in this order: a sweep that opened it before gets the lock only once it is unlinked
        (and then leaves it, see ``_lock_if_free``)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.release()

    def release(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


def _new_file(root: Path) -> JournalFile:
    """A new journal of this process, locked before it gets its visible name."""
    for _ in range(5):
        name = f"{os.getpid()}-{secrets.token_hex(6)}"
        hidden = root / f"{NEW_PREFIX}{name}"
        fd = os.open(hidden, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)  # not inherited by children
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            path = root / f"{name}{SUFFIX}"
            os.rename(hidden, path)
        except FileNotFoundError:  # a sweep took it for a killed process's before it was locked, and removed it
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return JournalFile(path, fd)
    raise OSError(errno.EAGAIN, f"could not make a charge journal in {root}")


@dataclass(eq=False)
class Entry:
    """One charge recorded in this process's journal."""

    file: JournalFile
    id: str
    settled: bool = False


class ChargeJournal:
    """This process's journal; ``charged`` after a charge, ``settled`` before its refund or once its PDF is sent."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._file: JournalFile = _new_file(root)
        self._draining: set[JournalFile] = set()  # rotated out, with charges still open
        self._seq = 0
        self._closed = False

    @property
    def path(self) -> Path:
        return self._file.path

    def charged(self, charge: Charge, reopened: str | None = None) -> Entry | None:
        """Record a charge just made, or (``reopened``: why) one that could not be refunded now: a forced stop's
        ("stop"), or a refund waiting for metering ("retry"), for a retry or the next start.
        None when there is nothing to record (an unmetered or free charge) or it could not be written (logged: a
        kill during this render would keep its charge, as without a journal)."""
        day = charge.info.get("day")
        if charge.cost <= 0 or not isinstance(day, str) or self._closed:
            return None
        caller = charge.caller
        try:
            if self._file.size >= ROTATE_BYTES:
                self._rotate()
            self._seq += 1
            entry = Entry(self._file, str(self._seq))
            record = {"op": "charged", "id": entry.id, "key": caller.key_id, "plan": caller.plan, "api": caller.api,
                      "day": day, "cu": charge.cost}
            if reopened:
                record["reopened"] = reopened
            self._file.append(record)
        except OSError as exc:
            log.warning("pdf: the charge of %d CU to key %s could not be recorded in the charge journal (%s): if "
                        "this server is killed during its render, it is not refunded", charge.cost, caller.key_id, exc)
            return None
        entry.file.open += 1
        return entry

    def _rotate(self) -> None:
        new = _new_file(self.root)
        old, self._file = self._file, new
        if old.open:
            self._draining.add(old)
        else:
            old.remove()

    def settled(self, entry: Entry | None, how: str) -> bool:
        """Record ``entry``'s charge as settled (``how``: refunded, delivered). Call it before a refund: False means
        it could not be written, and the refund must not be made now (the journal still holds the charge open, so
        the next start would make it again); the next start makes it instead."""
        if entry is None or entry.settled:
            return True
        try:
            entry.file.append({"op": "settled", "id": entry.id, "how": how})
        except OSError as exc:
            log.warning("pdf: a settled charge could not be recorded in the charge journal %s (%s)", entry.file.path,
                        exc)
            return False
        entry.settled = True
        f = entry.file
        f.open -= 1
        if f in self._draining and f.open == 0:
            self._draining.discard(f)
            f.remove()
        return True

    def close(self) -> None:
        """At a clean stop: remove the journal, unless a charge in it is still open (a request that never ended),
        which the next start then refunds."""
        self._closed = True
        for f in (self._file, *self._draining):
            if f.open:
                log.warning("pdf: %d charge(s) still open at shutdown stay in %s; the next start refunds them",
                            f.open, f.path)
                f.release()
            else:
                f.remove()
        self._draining.clear()


# --- the next start ----------------------------------------------------------------------------------------------


def _lock_if_free(path: Path) -> int | None:
    """The fd of ``path``, locked, when no live process holds it; else None."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:  # removed by another start meanwhile
        return None
    except OSError as exc:  # another user's, say: not ours to sweep
        log.warning("pdf: %s", _unopenable(path, exc))
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its server lives, or another starting process sweeps it
        os.close(fd)
        return None
    if os.fstat(fd).st_nlink == 0:  # swept and removed by another start between our open and our lock
        os.close(fd)
        return None
    return fd


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _unopenable(path: Path, exc: OSError) -> str:
    """What to do about a journal this server cannot open (said at every start until it is done)."""
    if not isinstance(exc, PermissionError):
        return (f"the charge journal {path} cannot be opened ({exc}), so its open charges are not refunded: credit "
                f"by hand its 'charged' lines that have no 'settled' line with the same id, then remove it")
    me = _user(os.geteuid())
    try:
        owner = _user(os.stat(path).st_uid)
    except OSError:
        owner = "another user"
    return (f"the charge journal {path} belongs to {owner} (a server run as that user was killed) and this server, "
            f"running as {me}, cannot open it ({exc.strerror}), so its open charges are not refunded: give it to "
            f"{me} (`chown {me} {path}`) and the next start refunds them, or credit by hand its 'charged' lines "
            f"that have no 'settled' line with the same id, then remove it (`rm {path}`)")


def _candidates(root: Path) -> list[Path]:
    """The journals under ``root`` but this process's (killed servers' or live ones', told apart by their lock)."""
    if not root.is_dir():
        return []
    own = f"{os.getpid()}-"
    return sorted(p for p in root.iterdir()
                  if (p.name.startswith(NEW_PREFIX) or p.name.endswith(SUFFIX)) and not p.name.startswith(own)
                  and p.is_file())


def _open_charges(path: Path) -> dict[str, dict[str, Any]]:
    """The ``charged`` records without a ``settled`` after them, by id. A line cut short is skipped (a kill in
    the middle of a write: for ``charged`` the refund is lost, as by a kill just before it)."""
    records: dict[str, dict[str, Any]] = {}
    for raw in path.read_bytes().splitlines():
        try:
            record = json.loads(raw)
            op, ident = record["op"], str(record["id"])
        except (ValueError, KeyError, TypeError):
            continue
        if op == "charged":
            records[ident] = record
        elif op == "settled":
            records.pop(ident, None)
    return records


def _charge(record: dict[str, Any]) -> Charge | None:
    fields = [record.get(k) for k in ("key", "plan", "api", "day")]
    cost = record.get("cu")
    if not all(isinstance(v, str) and v for v in fields) or isinstance(cost, bool) or not isinstance(cost, int) \
            or cost <= 0:
        return None
    key, plan, api, day = fields
    # The day it was charged to: the refund credits that day's counter (a charge of yesterday gives nothing to today).
    return Charge(caller=Caller(key_id=str(key), plan=str(plan), api=str(api)), cost=cost, info={"day": day})


async def _recover_one(give_back: GiveBack, orphan: JournalFile) -> str | None:
    """Refund the open charges of one orphan and remove it; the reason when metering is unavailable (the
    journal is kept, its remaining charges open)."""
    pid = orphan.path.name.split("-", 1)[0]
    try:
        records = _open_charges(orphan.path)
    except OSError as exc:
        return f"the journal cannot be read ({exc})"
    for ident, record in records.items():
        charge = _charge(record)
        try:
            orphan.append({"op": "settled", "id": ident, "how": "recovered"})  # before the refund: never twice
        except OSError as exc:
            return f"the journal cannot be written ({exc})"
        if charge is None:
            log.warning("pdf: a malformed entry of the charge journal %s was dropped: %s", orphan.path, record)
            continue
        try:
            await give_back(charge)
        except MeteringUnavailable as exc:
            try:
                orphan.append(record)  # reopened: nothing was refunded, the next start tries again
            except OSError as write_exc:
                log_lost_refund(charge, f"metering unavailable ({exc}) and the journal cannot be written ({write_exc})")
            return str(exc)
        except asyncio.CancelledError:
            log_lost_refund(charge, "the server stopped while refunding a killed server's charge")
            raise
        except Exception as exc:
            log_lost_refund(charge, f"{type(exc).__name__}: {exc}")
            continue
        how = ("its render was stopped by a forced stop of server process %s, which could not refund it" if
               record.get("reopened") == "stop" else "its render was in flight when server process %s was killed")
        log.warning("pdf: refunded %d CU to key %s (day %s, api %s): " + how, charge.cost, charge.caller.key_id,
                    charge.info["day"], charge.caller.api, pid)
    orphan.remove()
    return None


async def recover(give_back: GiveBack, root: Path, limit: int | None = None) -> None:
    """Refund the open charges of killed servers' journals under ``root`` (see the module's docstring), one journal
    at a time and at most ``limit`` (``MAX_JOURNALS_PER_START``) of them; a journal whose charges cannot all be
    refunded now, metering being unavailable, is kept, and the rest with it, for the next start."""
    limit = MAX_JOURNALS_PER_START if limit is None else limit
    try:
        paths = _candidates(root)
    except OSError as exc:
        log.warning("pdf: the charge journals of killed servers in %s cannot be listed (%s): their open charges are "
                    "not refunded", root, exc)
        return
    taken = 0
    for i, path in enumerate(paths):
        hidden = path.name.startswith(NEW_PREFIX)
        if not hidden and taken >= limit:
            left = sum(1 for p in paths[i:] if not p.name.startswith(NEW_PREFIX))
            log.warning("pdf: %d more charge journal(s) in %s were not looked at (one start sweeps at most %d): "
                        "those of killed servers are refunded by the next start", left, root, limit)
            return
        fd = _lock_if_free(path)
        if fd is None:
            continue
        orphan = JournalFile(path, fd)
        try:
            if hidden:  # left by a kill before it was named: it holds nothing
                orphan.remove()
                continue
            taken += 1
            down = await _recover_one(give_back, orphan)
        finally:
            orphan.release()  # closed before the next is opened (a cancel, the server stopping: the rest waits)
        if down is not None:
            log.warning("pdf: the charge journal %s of a killed server is kept for the next start: its open charges "
                        "could not be refunded now (%s); the other journals are left for the next start too",
                        path, down)
            return
        await asyncio.sleep(0)  # the server answers between two journals
