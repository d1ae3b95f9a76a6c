"""One materialization at a time per data home, waited for without burning a core.

An ``flock`` on ``dagster/materialize.lock``: the kernel drops it when its process dies, however it dies, so a
crash never leaves it held. The holder writes who it is into the file, so that a waiting run can say what it
waits for.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.timestamps import iso_utc

POLL_SECONDS = 0.5
# Set by the CLI's SIGINT/SIGTERM handler. The handler also raises KeyboardInterrupt, but Python drops an exception
# raised while a finalizer runs ("Exception ignored in ..."): the wait loops look at this flag too, so a stop
# request always ends a wait within a poll.
stop_requested = threading.Event()
stop_signal: int | None = None  # the first stop signal received (its exit code is 128 + it)
# Set while the run executes its steps. There Dagster's handler raises an interruption wherever the main thread
# is; raised inside a callback (an import lock's: "Exception ignored in <function _get_module_lock...>") Python
# drops it and the run would go on to its end. ``redeliver_dropped_stops`` sends the signal again then.
running = threading.Event()


def note_stop(signum: int) -> None:
    """Record a stop request: the CLI's handler calls it, and so do Dagster's handlers while a run executes
    (``pipeline.dagster_fixes``), which would otherwise leave no trace of which signal stopped the run."""
    global stop_signal
    if stop_signal is None:
        stop_signal = signum
    stop_requested.set()


def redeliver_dropped_stops() -> None:
    """Install (once) a ``sys.unraisablehook`` that, when an interruption is dropped while ``running`` is set,
    sets ``stop_requested`` and delivers SIGINT again (from a timer thread: the main thread has moved on by then)."""
    previous = sys.unraisablehook
    if getattr(previous, "redelivers_stops", False):
        return

    def hook(args: Any) -> None:
        exc = args.exc_value
        interrupted = isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "DagsterExecutionInterruptedError"
        if interrupted and running.is_set():
            stop_requested.set()
            threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
            return  # quietly: the default hook printed "Exception ignored in ..." with a traceback (Ctrl-C in CI)
        if interrupted and stop_requested.is_set():
            return  # the echo of a stop already being reported, while the run unwinds
        previous(args)

    hook.redelivers_stops = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


class WaitTimeout(Exception):
    """Waited ``--wait-timeout`` seconds for another run; the message names it and what to do."""


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(path: Path, find_run: Callable[[str], str | None] | None) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another cryptowire process"
    run_id = find_run(info["token"]) if find_run and info.get("token") else None
    run = f"run {run_id}, " if run_id else ""
    return f"{run}pid {info.get('pid')} on {info.get('host')}, since {info.get('since')}"


def wait_deadline(started: float, timeout: float | None, what: str) -> None:
    """Raise ``WaitTimeout`` once ``timeout`` seconds have passed since ``started``, and KeyboardInterrupt once a
    stop was requested (``stop_requested``)."""
    if stop_requested.is_set():
        raise KeyboardInterrupt
    if timeout is not None and time.monotonic() - started >= timeout:
        raise WaitTimeout(
            f"gave up after waiting {timeout:g} s for {what}; retry when it has finished, raise --wait-timeout, "
            "or, if that process is gone, run `cryptowire doctor`"
        )


@contextmanager
def exclusive(
    lock_path: Path,
    timeout: float | None,
    say: Callable[[str], None],
    token: str = "",
    find_run: Callable[[str], str | None] | None = None,
) -> Iterator[None]:
    """Hold the data home's materialization lock for the block; wait for it (saying so once) when it is held.
    ``token`` is written for waiters, who name the holder's run with ``find_run(token)`` once it exists."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _try(fd):
            holder = _holder(lock_path, find_run)
            say(f"waiting for another materialization of this data home to finish ({holder})")
            started = time.monotonic()
            while not _try(fd):
                wait_deadline(started, timeout, f"the materialization of {holder}")
                time.sleep(POLL_SECONDS)
        since = iso_utc(time.time())
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": since, "token": token}
        os.pwrite(fd, json.dumps(info).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
