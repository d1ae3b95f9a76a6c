"""From the operations review (2026-11-26): a run started with Dagster's own CLI is tied to its process.

`dagster asset materialize` records no pid of its own. Such a run used to be judged by its silence alone, so a
step fetching a hung feed (or scoring for minutes) was taken for dead after 120 s and its writer slot freed while
it ran. Its first step now tags it with the process that coordinates it: alive while that process lives, dead
the moment it is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.recovery import TAG_PID, inspect_run, recover
from tests.support.httpserver import LocalServer, hang
from tests.test_crash_recovery import _env, _instance

pytestmark = pytest.mark.slow
DAGSTER = str(Path(sys.executable).parent / "dagster")
PROJECT = Path(__file__).resolve().parents[1]


def _started_run(home: Path, deadline: float):  # noqa: ANN202
    from dagster import DagsterRunStatus, RunsFilter

    while True:
        instance = _instance(home)
        try:
            records = instance.get_run_records(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED]))
            tagged = [r for r in records if TAG_PID in r.dagster_run.tags]
            if tagged:
                return tagged[0], inspect_run(instance, tagged[0])
        finally:
            instance.dispose()
        assert time.monotonic() < deadline, "the run never recorded its process"
        time.sleep(0.5)


def test_a_dagster_cli_run_is_alive_while_its_process_lives_and_dead_once_killed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _instance(home).dispose()  # the data home's Dagster home, with the project's dagster.yaml
    with LocalServer() as feeds:
        feeds.routes["/slow.xml"] = hang(60)
        feeds_file = tmp_path / "feeds.yaml"
        feeds_file.write_text(f"feeds:\n  - name: Slow\n    url: {feeds.url('/slow.xml')}\n")
        env = _env(home, DAGSTER_HOME=str(home / "dagster"), CRYPTOWIRE_FEEDS_FILE=str(feeds_file))
        proc = subprocess.Popen(
            [DAGSTER, "asset", "materialize", "-m", "pipeline.definitions", "--select", "raw_articles"],
            cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )
        try:
            record, seen = _started_run(home, time.monotonic() + 120)
            assert seen.alive and seen.reason == f"its process (pid {seen.pid}) is running", seen
            assert seen.pid == proc.pid  # the CLI process coordinates the run; its step runs in a child
            instance = _instance(home)
            try:
                assert not [line for line in recover(instance, fix=False) if record.dagster_run.run_id in line]
            finally:
                instance.dispose()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    instance = _instance(home)
    try:  # at once, not after 120 s of silence
        lines = recover(instance, fix=False)
        assert any(record.dagster_run.run_id in line and "its process" in line and "is gone" in line
                   for line in lines), lines
    finally:
        instance.dispose()
