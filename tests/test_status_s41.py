"""`cryptowire status` as an operator of the multi-machine layout (deploy/README.md) read it: on an API machine's data
home (snapshots copied from the writer, no warehouse) it invited running `cryptowire materialize` there, which
builds a second warehouse and records its runs in the shared instance; a run left NOT_STARTED by a failed launch
was listed as "running". Real CLI processes on real data homes and a real (SQLite) Dagster instance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from tests.support.newsdata import Data, build, make_articles, make_events
from warehouse.config import Settings

CLI = str(Path(sys.executable).parent / "cryptowire")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    return {**env, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "false", "CRYPTOWIRE_PRICE_SOURCE_URL": ""}


def _status(home: Path) -> tuple[dict[str, Any], str]:
    got = subprocess.run([CLI, "status", "--json"], env=_env(home), capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    text = subprocess.run([CLI, "status"], env=_env(home), capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr[-3000:]
    return json.loads(got.stdout), text.stdout


def test_status_on_a_home_that_serves_copied_snapshots(tmp_path: Path) -> None:
    """An API machine's data home holds only snapshots/ (parts and CURRENT, copied from the writer): status said
    "no warehouse yet: run `cryptowire materialize` to create it", and doing so there built a second warehouse.
    Now it says the home serves copies, that materialize runs on the writer, and shows the served set."""
    from warehouse.parts import read_manifest
    from warehouse.published import current_snapshot

    home = tmp_path / "home"
    home.mkdir()
    build(home, Data(make_articles(30, 3), make_events(5)), parts=True)
    (home / "warehouse.duckdb").unlink()  # what an API machine has: the copied snapshots/ only
    assert [p.name for p in home.iterdir()] == ["snapshots"]
    manifest = read_manifest(current_snapshot(home / "snapshots"))  # type: ignore[arg-type]

    report, text = _status(home)
    assert report["exists"] is False and report.get("serves_copies") is True, report
    assert "materialize" in report["hint"] and "writer machine" in report["hint"], report["hint"]
    serving = report["serving"]
    assert serving["complete"] and serving["tag"] == manifest["tag"], serving
    assert serving["contents"] == {"articles": 30, "events": 5, "parts": len(manifest["parts"])}, serving
    assert serving["watermarks"]["news"] == manifest["watermarks"]["news"], serving

    assert "no warehouse yet" not in text and "to create it" not in text, text
    (said,) = [x for x in text.splitlines() if x.startswith("no warehouse here: ")]
    assert "serves snapshots copied from the writer machine" in said and "runs on the writer machine only" in said
    (line,) = [x for x in text.splitlines() if x.startswith("serving snapshot: ")]
    assert line.startswith(f"serving snapshot: {serving['current']} (complete), published ") and manifest["tag"] in line
    assert f"  serves 30 articles, 5 events, {len(manifest['parts'])} parts; newest change per table: news " in text
    assert not home.joinpath("warehouse.duckdb").exists()  # status created nothing

    # A home with neither warehouse nor snapshots is still a new one: materialize creates it.
    empty = tmp_path / "empty"
    empty.mkdir()
    report, text = _status(empty)
    assert "serves_copies" not in report and "no warehouse yet: run `cryptowire materialize` to create it" in text


def test_a_run_left_not_started_is_labelled_so_and_says_what_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launch that failed (the webserver lost its Postgres connection) leaves a run NOT_STARTED: status listed it
    as "running" with "no process is recorded for it here", and its assets as "queued"."""
    from pipeline.automation import ingest_job
    from pipeline.definitions import defs
    from pipeline.jobs import open_instance
    from warehouse.db import connect

    home = tmp_path / "home"
    home.mkdir()
    connect(home / "warehouse.duckdb").close()  # the writer's home: a warehouse, nothing published yet
    settings = Settings(home=home)
    monkeypatch.setenv("DAGSTER_HOME", str(settings.dagster_home.resolve()))  # open_instance points it there
    instance = open_instance(settings)  # the data home's instance, with the project's dagster.yaml
    try:
        run = instance.create_run_for_job(defs.resolve_job_def(ingest_job.name), status=dg.DagsterRunStatus.NOT_STARTED)
        start_timeout = instance.run_monitoring_start_timeout_seconds
        assert instance.run_monitoring_enabled and start_timeout > 0
    finally:
        instance.dispose()

    report, text = _status(home)
    (listed,) = report["runs_in_progress"]
    assert listed["run_id"] == run.run_id and listed["status"] == "NOT_STARTED", listed
    why = listed["why"]
    assert "never launched nor queued" in why and "no process is recorded" not in why, why
    assert f"run monitoring marks it failed {start_timeout} s after it was created" in why, why
    assert "`cryptowire doctor`" in why and "delete it in the Dagster UI" in why, why
    planned = [a for a in report["assets"] if a["last_run"] and a["last_run"]["run_id"] == run.run_id]
    assert planned and all(a["last_run"]["outcome"] == "not started" for a in planned), report["assets"]

    (line,) = [x for x in text.splitlines() if x.startswith(f"  {run.run_id[:8]} ")]
    assert line.startswith(f"  {run.run_id[:8]} NOT_STARTED not started since "), text
    assert "running" not in line.split(":", 1)[0] and "DEAD" not in line, line
    assert "repairs dead runs" not in text, text
