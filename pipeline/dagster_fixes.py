"""Two fixes to Dagster 1.13, applied on import (the version is pinned in pyproject.toml).

``InstanceConcurrencyContext.interval_to_next_pending_claim_check`` returns ``min(0, ...)``, never a positive
interval, so a step waiting for a pool slot makes its executor poll the instance storage in a loop at 100 % of a
core. The fix returns the time until the next claim check is due.

While a run executes, Dagster's own SIGINT/SIGTERM handlers replace the CLI's and turn the signal into an
interruption without recording it, so the summary could not tell a stop from a failure, nor which signal it was.
The second fix wraps every handler Dagster installs so that it first calls ``runlock.note_stop``.
"""

from __future__ import annotations

import time
from typing import Any

from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._utils import interrupts

from pipeline.runlock import note_stop


def _interval_to_next_pending_claim_check(self: InstanceConcurrencyContext) -> float:
    if not self._pending_claims or not self._pending_timeouts:
        return 0.0
    return max(0.0, min(self._pending_timeouts.values()) - time.time())


InstanceConcurrencyContext.interval_to_next_pending_claim_check = _interval_to_next_pending_claim_check  # type: ignore[method-assign]


_replace_interrupt_signal = interrupts._replace_interrupt_signal


def _noting(handler: Any) -> Any:
    if not callable(handler) or getattr(handler, "notes_stops", False):
        return handler

    def noted(signum: int, frame: Any) -> Any:
        note_stop(signum)
        return handler(signum, frame)

    noted.notes_stops = True  # type: ignore[attr-defined]
    return noted


interrupts._replace_interrupt_signal = lambda handler: _replace_interrupt_signal(_noting(handler))
