"""Four fixes to Dagster 1.13, applied on import (the version is pinned in pyproject.toml).

``InstanceConcurrencyContext.interval_to_next_pending_claim_check`` returns ``min(0, ...)``, never a positive
interval, so a step waiting for a pool slot makes its executor poll the instance storage in a loop at 100 % of a
core. The fix returns the time until the next claim check is due.

While a run executes, Dagster's own SIGINT/SIGTERM handlers replace the CLI's and turn the signal into an
interruption without recording it, so the summary could not tell a stop from a failure, nor which signal it was.
The second fix wraps every handler Dagster installs so that it first calls ``runlock.note_stop``.

Each step's stdout/stderr capture starts two helper processes (``tail`` and a Python watcher that kills it if the
run's process dies). In the terminal's process group they get Ctrl-C too, and the watcher prints a
KeyboardInterrupt traceback of its own. The third fix starts them in a session of their own; Dagster still stops
them when the step ends, and the watcher still notices the run's process dying (it watches its parent pid).

A stop redelivered while Dagster's storage closes a SQLite connection is raised inside SQLAlchemy's pool, which
logs it as "Exception closing connection" with a traceback: the fourth fix drops that record once a stop is
requested (the stop itself is reported, and the connection is a file that a later run opens again).
"""

from __future__ import annotations

import logging
import subprocess
import time
import types
from typing import Any

from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.execution import compute_logs
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._utils import interrupts

from pipeline.runlock import note_stop, stop_requested


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


class _OwnSession(subprocess.Popen):  # type: ignore[type-arg]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("start_new_session", True)
        super().__init__(*args, **kwargs)


# compute_logs alone sees this Popen: nothing else in the process changes
compute_logs.subprocess = types.SimpleNamespace(**{**vars(subprocess), "Popen": _OwnSession})  # type: ignore[attr-defined]


class _StopWhileClosing(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (stop_requested.is_set() and isinstance(exc, KeyboardInterrupt | DagsterExecutionInterruptedError))


# The pool logs under its class's own logger, where a logger filter applies (an ancestor's would not).
for _pool in ("NullPool", "QueuePool", "SingletonThreadPool", "StaticPool"):
    logging.getLogger(f"sqlalchemy.pool.impl.{_pool}").addFilter(_StopWhileClosing())
