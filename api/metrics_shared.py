"""/metrics with several workers (``serve --workers N``): each worker is a process of its own, so the values are
shared through prometheus-client's multiprocess files, in a directory of this server's under the data home
(``Settings.metrics_dir``) that ``serve`` names in ``PROMETHEUS_MULTIPROC_DIR`` before the workers start
(``share_between_workers``; restarted workers inherit it). A scrape, whichever worker answers it, reports the
whole server (``api.metrics``): counters and histograms summed over every worker that ever ran (a killed worker's
files stay, so its counts never vanish), requests in progress and PDF queue depth summed over the live workers
(a dead worker's are dropped at the next scrape: each worker holds a flock on a file of its own while it lives).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
from pathlib import Path

from prometheus_client import values
from prometheus_client.multiprocess import mark_process_dead

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SERVER_LOCK_SUFFIX = ".lock"  # <root>/<name>.lock, flocked by the server whose directory is <root>/<name>
WORKER_LOCK = "worker-{pid}.lock"  # in a server's directory, flocked by that worker while it lives
_worker_lock: int | None = None  # this worker's, held until it exits


def shared_dir() -> Path | None:
    """The directory this process shares its values through (prometheus-client's multiprocess mode), else None."""
    path = os.environ.get(MULTIPROC_ENV)
    return Path(path) if path and getattr(values.ValueClass, "_multiprocess", False) else None


def _lock_if_free(path: Path, create: bool = False) -> int | None:
    """The fd of ``path``, flocked, when no live process holds it (and it was not removed meanwhile); else None."""
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
    except OSError:  # removed meanwhile, or another user's: not ours to remove
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    if os.fstat(fd).st_nlink == 0:  # removed by another process between our open and our lock
        os.close(fd)
        return None
    return fd


class ServerDir:
    """A server's directory of its workers' metric files, and the flock that says the server lives."""

    def __init__(self, path: Path, lock: Path, fd: int) -> None:
        self.path = path
        self.lock = lock
        self.fd = fd

    def remove(self) -> None:
        """At a stop: the directory first, then the lock (a sweep only removes a directory without a lock)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.lock.unlink(missing_ok=True)
        os.close(self.fd)


def share_between_workers(root: Path) -> ServerDir:
    """A new, empty directory for a server's workers under ``root``, locked while this process lives; first removes
    those of servers that are gone (their lock free), never one of a live server on the same data home."""
    root.mkdir(parents=True, exist_ok=True)
    sweep_servers(root)
    for _ in range(5):
        name = f"{os.getpid()}-{secrets.token_hex(6)}"
        lock = root / (name + SERVER_LOCK_SUFFIX)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink == 0:  # a sweep took it for a dead server's before we locked it
            os.close(fd)
            continue
        path = root / name
        path.mkdir()  # after the lock: a directory without its lock is a dead server's
        return ServerDir(path, lock, fd)
    raise OSError(f"could not make a metrics directory in {root}")


def sweep_servers(root: Path) -> None:
    """Remove the directories of servers that are gone (killed: a clean stop removes its own)."""
    for lock in root.glob("*" + SERVER_LOCK_SUFFIX):
        fd = _lock_if_free(lock)
        if fd is None:
            continue
        try:
            path = root / lock.name.removesuffix(SERVER_LOCK_SUFFIX)
            if not _workers_live(path):
                shutil.rmtree(path, ignore_errors=True)
                lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    for path in root.iterdir():
        if path.is_dir() and not (root / (path.name + SERVER_LOCK_SUFFIX)).exists():
            shutil.rmtree(path, ignore_errors=True)  # its lock is gone: so is its server (a sweep cut short)


def _workers_live(path: Path) -> bool:
    """Whether a worker still runs in a server's directory (its supervisor alone was killed: it still writes)."""
    for lock in path.glob(WORKER_LOCK.format(pid="*")):
        fd = _lock_if_free(lock)
        if fd is not None:
            os.close(fd)
        elif lock.exists():
            return True
    return False


def claim_worker(shared: Path) -> None:
    """Lock this worker's file in ``shared`` for as long as it lives, and drop the live gauges a dead process of
    the same pid left (they would add up with this one's). Once per process, before it makes any value."""
    global _worker_lock
    if _worker_lock is not None:
        return
    path = shared / WORKER_LOCK.format(pid=os.getpid())
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits while a scrape drops a dead namesake's gauges
        if os.fstat(fd).st_nlink:
            break
        os.close(fd)
    mark_process_dead(os.getpid(), str(shared))
    _worker_lock = fd


def drop_dead_workers(shared: Path) -> None:
    """Drop the live gauges (requests in progress, PDF queue depth) of workers that died: their lock is free.
    Their counters and histograms stay: a replaced worker's counts must not vanish."""
    pids = {p.name.rsplit("_", 1)[-1].removesuffix(".db") for p in shared.glob("gauge_live*_*.db")}
    for pid in pids - {str(os.getpid())}:
        if not pid.isdigit():
            continue
        lock = shared / WORKER_LOCK.format(pid=pid)
        fd = _lock_if_free(lock, create=True)
        if fd is None:
            continue
        try:
            with contextlib.suppress(FileNotFoundError):
                mark_process_dead(int(pid), str(shared))
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
