"""The fixes of pipeline.dagster_fixes that can be checked without a run (a run's own are in test_crash_recovery)."""

from __future__ import annotations

import logging
import sqlite3

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.pool import NullPool

import pipeline.dagster_fixes  # noqa: F401  (applies the fixes)
from pipeline import runlock


def _close_interrupted(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Open and close a NullPool connection whose close is interrupted, as a redelivered Ctrl-C can do."""
    engine = create_engine("sqlite://", poolclass=NullPool)

    class Interrupted(sqlite3.Connection):
        def close(self) -> None:
            super().close()
            raise KeyboardInterrupt

    @event.listens_for(engine, "do_connect")
    def connect(dialect, conn_rec, cargs, cparams):  # type: ignore[no-untyped-def]
        return sqlite3.connect(":memory:", factory=Interrupted)

    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="sqlalchemy.pool"), pytest.raises(KeyboardInterrupt):
        with engine.connect() as con:  # SQLAlchemy logs the interruption, then raises it on
            con.execute(text("select 1"))
    return [r for r in caplog.records if r.name.startswith("sqlalchemy.pool")]


def test_a_stop_raised_while_a_storage_connection_closes_logs_no_traceback(caplog: pytest.LogCaptureFixture,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runlock, "stop_requested", runlock.threading.Event())
    monkeypatch.setattr(pipeline.dagster_fixes, "stop_requested", runlock.stop_requested)
    # Without a stop requested, SQLAlchemy's report stands: an interruption there is then something else.
    (logged,) = _close_interrupted(caplog)
    assert logged.getMessage().startswith("Exception closing connection") and logged.exc_info
    runlock.stop_requested.set()
    assert _close_interrupted(caplog) == []
