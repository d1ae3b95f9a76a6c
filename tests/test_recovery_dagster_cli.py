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


CHILD = """
import multiprocessing, sys, time
from pathlib import Path


def step(home, run_id):
    time.sleep(2)  # the coordinator is killed meanwhile: this process now belongs to init
    from pipeline.recovery import claim_run
    from tests.test_crash_recovery import _instance

    instance = _instance(Path(home))
    claim_run(instance, run_id)
    instance.dispose()
    time.sleep(4)


if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=step, args=sys.argv[1:3])
    child.start()
    print(child.pid, flush=True)
    time.sleep(60)
"""


def test_a_step_whose_coordinator_was_killed_keeps_the_run_alive_until_it_ends(tmp_path: Path) -> None:
    """The coordinator killed alone: its step process goes on writing. The run is alive while the step lives (not
    tied to init, pid 1, which would keep it alive forever), and dead once the step ends."""
    from dagster import DagsterRun, DagsterRunStatus

    from pipeline.recovery import TAG_STEP_PID

    home = tmp_path / "home"
    instance = _instance(home)
    run_id = instance.add_run(DagsterRun(job_name="refresh", status=DagsterRunStatus.STARTED)).run_id
    instance.dispose()
    script = tmp_path / "coordinator.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(home), run_id], cwd=PROJECT, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert proc.stdout is not None
    step = int(proc.stdout.readline())
    proc.kill()
    proc.wait(10)

    def seen():  # noqa: ANN202
        instance = _instance(home)
        try:
            record = instance.get_run_records()[0]
            return record.dagster_run.tags, inspect_run(instance, record)
        finally:
            instance.dispose()

    deadline = time.monotonic() + 60
    while TAG_STEP_PID not in seen()[0]:
        assert time.monotonic() < deadline, "the step never recorded itself"
        time.sleep(0.2)
    tags, run = seen()
    assert TAG_PID not in tags, tags  # not init's pid
    assert tags[TAG_STEP_PID] == str(step) and run.alive and "step's process" in run.reason, run
    deadline = time.monotonic() + 60
    while seen()[1].alive:
        assert time.monotonic() < deadline, "the run stayed alive after its step ended"
        time.sleep(0.2)
    assert "is gone" in seen()[1].reason
