"""A forced stop of the server waits until every PDF request holding a charge has given it back.

uvicorn stops gracefully on the first SIGINT or SIGTERM (in-flight requests finish) and quits at once on a SIGINT
after it (Ctrl+C twice, or a supervisor escalating). Quitting at once skips the app's shutdown and leaves running
requests to whatever the process does next: after SIGINT, SIGINT the asyncio runner cancels them (their
``except CancelledError`` refunds); after SIGTERM, SIGINT uvicorn re-raises SIGTERM with its default action, and the
process dies mid-render with the charge taken and no refund. So the guard wraps uvicorn's handlers: such a forcing
signal is held while charged renders are in flight; they are stopped (answered 503, refunded), then the signal
goes on to uvicorn, which quits as before. A kill -9 cannot be held: its renders keep their charges.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Awaitable
from types import FrameType
from typing import Any, TypeVar

from api.errors import ApiError

log = logging.getLogger("cryptowire.pdf")

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stopped_error() -> ApiError:
    return ApiError(
        503, "RENDERER_UNAVAILABLE",
        "the server was stopped while rendering this page, so nothing was charged; retry in a few seconds (the "
        "server or another instance will take it)",
        headers={"Retry-After": "5"},
    )


class StopGuard:
    """Counts the PDF requests between their charge and its outcome; holds a forcing stop signal until they end."""

    def __init__(self, hold_seconds: float) -> None:
        self.hold_seconds = hold_seconds  # the longest a forced stop is held (a refund's own bound, and some)
        self.stopping = asyncio.Event()  # a forced stop came: renders in flight end now, refunded
        self._charged = 0
        self._settled = asyncio.Event()
        self._settled.set()
        self._signalled = False
        self._held: list[tuple[int, FrameType | None]] = []
        self._prev: dict[int, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release_task: asyncio.Task[None] | None = None

    # --- the requests --------------------------------------------------------------
    def enter(self) -> None:
        """A request is about to be charged (call before the charge: a forced stop during it must wait too)."""
        self._charged += 1
        self._settled.clear()

    def leave(self) -> None:
        """The request's charge is settled: its PDF was produced, or the charge was given back (or never made)."""
        self._charged -= 1
        if self._charged == 0:
            self._settled.set()

    async def run(self, work: Awaitable[T]) -> T:
        """``work``'s result, unless a forced stop comes first: then ``work`` is cancelled and 503 raised."""
        task = asyncio.ensure_future(work)
        if self.stopping.is_set():
            task.cancel()
            raise stopped_error()
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # this request itself is cancelled: the render goes with it
            task.cancel()
            raise
        finally:
            stop.cancel()
        if task.done():  # done even when the stop came at the same moment: the PDF exists
            return task.result()
        task.cancel()
        try:
            await task  # its cleanup (queue place, tab, connections) runs before the refund
        except asyncio.CancelledError:
            pass
        except Exception:  # it failed while being stopped: the stop is the answer
            log.debug("pdf: a render stopped by the server's stop failed", exc_info=True)
        raise stopped_error()

    # --- the signals ---------------------------------------------------------------
    def install(self) -> None:
        """Wrap the stop signals' handlers (uvicorn's). Only the main thread may: elsewhere (an app served from a
        test's thread) nothing is wrapped and no signal is held."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            prev = signal.getsignal(sig)
            if callable(prev):
                self._prev[sig] = prev
                signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        for sig, prev in self._prev.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, prev)
        self._prev.clear()

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        prev = self._prev[sig]
        if self._held:  # a forced stop is held already: this one follows it
            self._held.append((sig, frame))
            return
        # uvicorn's rule, read from its own state too (a stop signal may have come before the guard was installed)
        stopping = self._signalled or bool(getattr(getattr(prev, "__self__", None), "should_exit", False))
        self._signalled = True
        if stopping and sig == signal.SIGINT and self._charged and self._loop is not None:
            self._held.append((sig, frame))
            # A signal handler runs between any two bytecodes of the loop: only the thread-safe call is safe here.
            self._loop.call_soon_threadsafe(self._hold)
            return
        prev(sig, frame)

    def _hold(self) -> None:
        log.warning("pdf: forced stop: first stopping the %d PDF render(s) in flight and refunding their charges "
                    "(at most %g s)", self._charged, self.hold_seconds)
        self.stopping.set()
        self._release_task = asyncio.get_running_loop().create_task(self._release())

    async def _release(self) -> None:
        try:
            async with asyncio.timeout(self.hold_seconds):
                await self._settled.wait()
        except TimeoutError:
            log.error("pdf: %d PDF render(s) had not settled their charges %g s after a forced stop; stopping anyway "
                      "(see the log above for refunds to credit by hand)", self._charged, self.hold_seconds)
        held, self._held = self._held, []
        for sig, frame in held:
            self._prev[sig](sig, frame)
