"""One materialization at a time per data home, waited for without burning a core.

An ``flock`` on ``dagster/materialize.lock``: the kernel drops it when its process dies, however it dies, so a
crash never leaves it held. The holder writes who it is into the file, so that a waiting run can say what it
waits for.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

POLL_SECONDS = 0.5


class WaitTimeout(Exception):
    """Waited ``--wait-timeout`` seconds for another run; the message names it and what to do."""


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another cryptowire process"
    return f"pid {info.get('pid')} on {info.get('host')}, since {info.get('since')}"


def wait_deadline(started: float, timeout: float | None, what: str) -> None:
    """Raise ``WaitTimeout`` once ``timeout`` seconds have passed since ``started``."""
    if timeout is not None and time.monotonic() - started >= timeout:
        raise WaitTimeout(
            f"gave up after waiting {timeout:g} s for {what}; retry when it has finished, raise --wait-timeout, "
            "or, if that process is gone, run `cryptowire doctor`"
        )


@contextmanager
def exclusive(lock_path: Path, timeout: float | None, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the data home's materialization lock for the block; wait for it (saying so once) when it is held."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _try(fd):
            holder = _holder(lock_path)
            say(f"waiting for another materialization of this data home to finish ({holder})")
            started = time.monotonic()
            while not _try(fd):
                wait_deadline(started, timeout, f"the materialization of {holder}")
                time.sleep(POLL_SECONDS)
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
