"""Which errors of a run the CLI reports as one line, and which keep their traceback.

A run's errors that are the user's to fix (an unknown asset, a feeds file, a newer cryptowire's data, a wait that
timed out) are one `error: ...` line; anything else is a defect in cryptowire, and a one-line message without the
traceback would hide where it is. Until 2026-11-28 every ValueError of `materialize` and `backfill` was taken for
the user's, so an internal ValueError read like a mistake in the command line.
"""

from __future__ import annotations

import pytest
import typer

from pipeline.commands import core
from pipeline.jobs import UnknownAssets


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CRYPTOWIRE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _raising(exc: BaseException):
    def materialize(*args, **kwargs):
        raise exc
    return materialize


def test_a_users_error_is_one_line(home, monkeypatch, capsys):
    monkeypatch.setattr("pipeline.jobs.materialize", _raising(UnknownAssets("unknown asset(s) nope: choose from ...")))
    with pytest.raises((SystemExit, typer.Exit)) as info:
        core.run_materialize(None, "prediction_events", as_json=False)
    assert getattr(info.value, "code", getattr(info.value, "exit_code", None)) == 1
    assert "error: unknown asset(s) nope" in capsys.readouterr().err


def test_a_defect_keeps_its_traceback(home, monkeypatch):
    # A stand-in for a bug deep in a run (the injected fault is the defect, not the code under test).
    monkeypatch.setattr("pipeline.jobs.materialize", _raising(ValueError("not enough values to unpack")))
    with pytest.raises(ValueError, match="not enough values to unpack"):
        core.run_materialize(None, "prediction_events", as_json=False)
