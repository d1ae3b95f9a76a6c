"""A forced stop of the server waits until every PDF request holding a charge has given it back.

uvicorn stops gracefully on the first SIGINT or SIGTERM (in-flight requests finish) and quits at once on a SIGINT
after it (Ctrl+C twice, or a supervisor escalating). Quitting at once skips the app's shutdown and leaves running
requests to whatever the process does next: after SIGINT, SIGINT the asyncio runner cancels them (their
``except CancelledError`` refunds); after SIGTERM, SIGINT uvicorn re-raises SIGTERM with its default action, and the
process dies mid-render with the charge taken and no refund. So the guard wraps uvicorn's handlers: such a forcing
signal is held while charged renders are in flight; they are stopped (answered 503, refunded), then the signal
goes on to uvicorn, which quits as before. A kill -9 cannot be held: its renders keep their charges (the charge
journal has the next start refund them).

Several guards may be installed in one process (several apps served from its main thread), and removed in any
order: a guard removed while another wraps it only passes signals on from then, and the guard above it, once
removed, puts back what was there before the removed ones. So the original handlers are in place at the end.
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

    def __init__(self, refund_seconds: float, margin: float = 2.0) -> None:
        self.refund_seconds = refund_seconds  # refunds at a forced stop end within this of the stop
        # the longest a forced stop is held: the refunds' bound, and some for their journal lines and answers
        self.hold_seconds = refund_seconds + margin
        self.stopping = asyncio.Event()  # a forced stop came: renders in flight end now, refunded
        self._stopped_at: float | None = None  # loop time the forced stop began
        self._charged = 0
        self._settled = asyncio.Event()
        self._settled.set()
        self._signalled = False
        self._held: list[tuple[int, FrameType | None]] = []
        self._prev: dict[int, Any] = {}
        self._installed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release_task: asyncio.Task[None] | None = None

    # --- the requests --------------------------------------------------------------
    def enter(self) -> None:
        """A request is about to be charged (call just before the charge, with no await since ``stopping`` was
        checked: a forced stop during the charge must wait too; one before it was refused)."""
        self._charged += 1
        self._settled.clear()

    def leave(self) -> None:
        """The request's charge is settled: its PDF was produced, or the charge was given back (or never made)."""
        self._charged -= 1
        if self._charged == 0:
            self._settled.set()

    def refund_deadline(self) -> float:
        """The loop time by which a refund at a forced stop must end: ``refund_seconds`` after the stop began
        (a render's cleanup counts against it, so the hold is kept), or from now when no stop is held (a request
        cancelled otherwise)."""
        loop = asyncio.get_running_loop()
        start = self._stopped_at if self._stopped_at is not None and loop is self._loop else loop.time()
        return start + self.refund_seconds

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
        if threading.current_thread() is not threading.main_thread() or self._installed:
            return
        self._loop = asyncio.get_running_loop()
        self._prev = {}
        for sig in STOP_SIGNALS:
            prev = signal.getsignal(sig)
            if callable(prev):
                self._prev[sig] = prev
                signal.signal(sig, self._on_signal)
        self._installed = True

    def uninstall(self) -> None:
        """Put back what was there before this guard, when this guard is the handler; under another handler (a
        guard installed later) it passes signals on from now, and that guard skips it once removed. ``_prev`` is
        kept: a handler wrapping this one may still call it."""
        if not self._installed:
            return
        self._installed = False
        for sig in self._prev:
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, _unwrap(self._prev[sig], sig))

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        prev = self._prev.get(sig)
        if prev is None:  # a signal this guard never wrapped: Python's own behaviour for it
            if sig == signal.SIGINT:
                signal.default_int_handler(sig, frame)
            _default(sig)
            return
        if not self._installed:  # removed while another handler wraps it: a pass-through
            prev(sig, frame)
            return
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
                    "(held at most %g s)", self._charged, self.hold_seconds)
        self._stopped_at = asyncio.get_running_loop().time()
        self.stopping.set()
        self._release_task = asyncio.get_running_loop().create_task(self._release())

    async def _release(self) -> None:
        try:
            async with asyncio.timeout(self.hold_seconds):
                await self._settled.wait()
        except TimeoutError:
            log.error("pdf: %d PDF render(s) had not settled their charges %g s after a forced stop; stopping anyway "
                      "(a charge not yet marked settled in the charge journal is refunded by the next start; see "
                      "the lines above for refunds to credit by hand)", self._charged, self.hold_seconds)
        held, self._held = self._held, []
        for sig, frame in held:
            self._prev[sig](sig, frame)


def _unwrap(handler: Any, sig: int) -> Any:
    """``handler``, past the guards removed while wrapped (pass-throughs): what was there before them."""
    seen: set[int] = set()
    while isinstance(getattr(handler, "__self__", None), StopGuard) and id(handler.__self__) not in seen:
        guard: StopGuard = handler.__self__
        if guard._installed or getattr(handler, "__func__", None) is not StopGuard._on_signal:
            break
        seen.add(id(guard))
        handler = guard._prev.get(sig, handler)
    return handler


def _default(sig: int) -> None:
    """The signal's default action (SIGTERM: the process ends)."""
    signal.signal(sig, signal.SIG_DFL)
    signal.raise_signal(sig)
