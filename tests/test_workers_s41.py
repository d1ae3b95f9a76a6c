"""The Dagster job `articles_on_workers` with no `cryptowire worker` running: the run fails with a clear message
once no worker has taken or finished a partition for CRYPTOWIRE_WORKER_WAIT_SECONDS, instead of holding one of the
instance's run slots forever (four such runs kept `poll_feeds` queued and stopped ingestion). What it queued stays
queued: a worker started afterwards scores it once, and the partition run again merges that result without scoring
it again. (The job completing on a worker: tests/test_workers.py::test_the_dagster_job_scores_its_day_on_a_worker.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.rawgen import generate, insert_raw
from tests.test_workers import DAYS, PROJECT, _env, start_worker, stop, wait_ready
from warehouse import db

pytestmark = pytest.mark.slow
WAIT = 3.0


# The job, in a process of its own: Celery's app keeps the first broker it connected to, which an earlier test in
# this process may have pointed at its own Redis, gone since.
_JOB = """
import json, sys
import dagster as dg
from pipeline.automation import articles_on_workers
with dg.DagsterInstance.ephemeral() as instance:
    r = articles_on_workers.execute_in_process(partition_key=sys.argv[1], instance=instance, raise_on_error=False)
failed = [e.event_specific_data.error.message for e in r.all_events if e.event_type_value == "STEP_FAILURE"]
merged = [e.event_specific_data.metadata["merged"].value for e in r.all_events if e.event_type_value == "STEP_OUTPUT"]
print(json.dumps({"success": r.success, "failures": failed, "merged": merged}))
"""


def _run(partition: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _JOB, partition], env=env, cwd=PROJECT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_job_gives_up_without_workers_and_a_later_worker_finishes_the_day(
        tmp_path: Path, redis_url_server: str, sentiment_cache: Path) -> None:
    home = tmp_path / "home"
    con = db.connect(home / "warehouse.duckdb")
    insert_raw(con, generate(DAYS[:1], 10))
    con.close()
    shutil.copytree(sentiment_cache, home / "models", dirs_exist_ok=True)
    env = _env(home, redis_url_server, CRYPTOWIRE_WORKER_WAIT_SECONDS=str(WAIT))
    day = DAYS[0].isoformat()
    log = tmp_path / "worker.log"
    worker = None
    try:
        started = time.monotonic()
        result = _run(day, env)  # no worker anywhere
        seconds = time.monotonic() - started
        assert not result["success"]
        assert seconds < WAIT + 60, f"gave up after {seconds:.1f} s"
        [message] = result["failures"]
        assert f"no worker took or finished a partition for {WAIT:g} s" in message, message
        assert "CRYPTOWIRE_WORKER_WAIT_SECONDS" in message and day in message, message
        assert "start `cryptowire worker` against the same CRYPTOWIRE_REDIS_URL" in message, message
        assert "run these partitions again" in message, message

        # what it queued is not lost: a worker started now takes it and leaves the day's result on disk
        worker = start_worker(env, log)
        wait_ready(worker, log)
        deadline = time.monotonic() + 120
        while not list((home / "partitions").glob(f"{day}/result-*.parquet")):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        again = _run(day, env)  # the partition run again: merges that result
        assert again["success"], again
    finally:
        if worker is not None:
            stop(worker)
    assert again["merged"] == [10]
    # scored once: the queued task computed it, the second run's task found the result
    text = log.read_text()
    assert text.count("'computed': True") == 1 and text.count("'computed': False") == 1, text[-3000:]
    con = db.connect(home / "warehouse.duckdb", read_only=True)
    try:
        assert con.execute("SELECT count(*), count(model_version) FROM articles").fetchall() == [(10, 10)]
    finally:
        con.close()


def test_a_busy_fleet_is_not_idle(tmp_path: Path, redis_url_server: str, sentiment_cache: Path) -> None:
    """A worker that holds the day longer than the wait bound is progress, not absence: the run waits for it."""
    home = tmp_path / "home"
    con = db.connect(home / "warehouse.duckdb")
    insert_raw(con, generate(DAYS[:1], 6))
    con.close()
    shutil.copytree(sentiment_cache, home / "models", dirs_exist_ok=True)
    env = _env(home, redis_url_server, CRYPTOWIRE_WORKER_WAIT_SECONDS="2")
    log = tmp_path / "worker.log"
    worker = start_worker({**env, "CRYPTOWIRE_TEST_PARTITION_HOLD": "6"}, log)  # holds the day 6 s: > the bound
    # the op's call, in a process of its own (Celery's app keeps the first broker it connected to)
    script = (
        "from datetime import date\n"
        "from pipeline.backfill import run_backfill\n"
        "from warehouse.config import get_settings\n"
        "s = get_settings()\n"
        f"r = run_backfill(s, date.fromisoformat('{DAYS[0]}'), date.fromisoformat('{DAYS[0]}'), say=print, "
        "idle_timeout=s.worker_wait_seconds)\n"
        "print('merged', r.merged_articles, r.ok)\n"
    )
    try:
        wait_ready(worker, log)
        out = subprocess.run([sys.executable, "-c", script], env=env, cwd=PROJECT, capture_output=True, text=True,
                             timeout=120)
    finally:
        stop(worker)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "merged 6 True" in out.stdout, out.stdout
