"""Two fixes to Dagster 1.13, applied on import (the version is pinned in pyproject.toml).

``InstanceConcurrencyContext.interval_to_next_pending_claim_check`` returns ``min(0, ...)``, never a positive
interval, so a step waiting for a pool slot makes its executor poll the instance storage in a loop at 100 % of a
core. The fix returns the time until the next claim check is due.

While steps run, Dagster replaces the SIGINT/SIGTERM handler with one that raises an interruption; raised inside a
callback Python runs at that moment (an import lock's), it is dropped and the run goes on. Every handler Dagster
installs now also calls ``runlock.notice_stop``, which delivers the signal again if the run still executes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._utils import interrupts


def _interval_to_next_pending_claim_check(self: InstanceConcurrencyContext) -> float:
    if not self._pending_claims or not self._pending_timeouts:
        return 0.0
    return max(0.0, min(self._pending_timeouts.values()) - time.time())


InstanceConcurrencyContext.interval_to_next_pending_claim_check = _interval_to_next_pending_claim_check  # type: ignore[method-assign]


_replace = interrupts._replace_interrupt_signal


def _noticed(handler: Any) -> Any:
    if not callable(handler) or getattr(handler, "_notices_stop", False):
        return handler  # SIG_DFL / SIG_IGN, or wrapped already

    def wrapped(signum: int, frame: Any) -> Any:
        from pipeline.runlock import notice_stop

        notice_stop()
        return handler(signum, frame)

    wrapped._notices_stop = True  # type: ignore[attr-defined]
    return wrapped


def _replace_interrupt_signal(new_signal_handler: Callable[..., Any] | Any) -> None:
    _replace(_noticed(new_signal_handler))


interrupts._replace_interrupt_signal = _replace_interrupt_signal
