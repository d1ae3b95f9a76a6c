"""The partitioned backfill on real processes: a real redis-server, two `cryptowire worker` processes, a
`cryptowire backfill` of five days of generated articles. One worker is killed with SIGKILL while it holds a
partition; the other worker gets that partition once the visibility timeout has passed, and every article ends up
scored once, with the same labels and scores as the in-process path."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import date, datetime
from pathlib import Path

import pytest

from pipeline.enrich import enrich_articles
from tests.support.rawgen import generate, insert_raw
from tests.test_partitions import rows_of
from warehouse import db

pytestmark = pytest.mark.slow
PROJECT = Path(__file__).resolve().parents[1]
DAYS = [date(2026, 3, d) for d in (1, 2, 3, 4, 5)]
PER_DAY = 24


def _env(home: Path, redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    return {**env, "PYTHONPATH": str(PROJECT), "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_REDIS_URL": redis_url,
            "CRYPTOWIRE_PDF_PREWARM": "false", "CRYPTOWIRE_PRICE_SOURCE_URL": "", "CRYPTOWIRE_SENTIMENT_THREADS": "1",
            **extra}


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeline.cli", "worker"], env=env, cwd=PROJECT,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while " ready." not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def held_by(home: Path, pid: int) -> Path | None:
    for marker in (home / "partitions").glob("*/running-*.json"):
        try:
            if json.loads(marker.read_text()).get("pid") == pid:
                return marker
        except (OSError, ValueError):
            continue
    return None


@pytest.fixture(scope="module")
def model(sentiment_cache: Path):
    from models.sentiment import load_model

    return load_model(cache_dir=sentiment_cache)


def test_backfill_on_two_workers_survives_a_killed_worker(tmp_path: Path, redis_url_server: str, model,
                                                         sentiment_cache: Path) -> None:
    from models.sentiment import article_text
    from models.tagging import get_tagger

    tagger = get_tagger()
    raw = generate(DAYS, PER_DAY)
    con = db.connect(tmp_path / "inproc.duckdb")
    insert_raw(con, raw)
    enrich_articles(con, model, article_text, tagger, now=datetime(2026, 3, 6))
    expected = rows_of(con)
    con.close()

    home = tmp_path / "home"
    con = db.connect(home / "warehouse.duckdb")
    insert_raw(con, raw)
    con.close()
    shutil.copytree(sentiment_cache, home / "models", dirs_exist_ok=True)  # the int8 graph: not built again

    env = _env(home, redis_url_server, CRYPTOWIRE_WORKER_VISIBILITY_TIMEOUT="5")
    log_a, log_b = tmp_path / "worker-a.log", tmp_path / "worker-b.log"
    # worker A sleeps once it holds a partition: the test kills it there
    a = start_worker({**env, "CRYPTOWIRE_TEST_PARTITION_HOLD": "120"}, log_a)
    b = start_worker(env, log_b)
    backfill = None
    try:
        wait_ready(a, log_a)
        wait_ready(b, log_b)
        started = time.monotonic()
        backfill = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "backfill", "--since", DAYS[0].isoformat(),
             "--until", DAYS[-1].isoformat(), "--timeout", "240", "--json"],
            env=env, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        marker = None
        while marker is None:
            marker = held_by(home, a.pid)
            assert backfill.poll() is None, backfill.communicate()
            assert time.monotonic() - started < 120, "worker A never took a partition"
            time.sleep(0.1)
        held_day = marker.parent.name
        os.kill(a.pid, signal.SIGKILL)  # while it holds the partition
        a.wait(10)
        out, err = backfill.communicate(timeout=300)
        assert backfill.returncode == 0, (out, err, log_b.read_text()[-3000:])
        report = json.loads(out)
    finally:
        for proc in (a, b):
            stop(proc)
        if backfill is not None and backfill.poll() is None:
            backfill.kill()

    # every partition merged; the killed worker's partition was redone by worker B after the visibility timeout
    by_day = {p["day"]: p for p in report["partitions"]}
    assert sorted(by_day) == [d.isoformat() for d in DAYS]
    assert all(p["status"] == "merged" and p["applied"] == PER_DAY and p["stale"] == 0 for p in by_day.values())
    b_name = f"-{b.pid}"
    assert by_day[held_day]["worker"].endswith(b_name) and by_day[held_day]["computed"] is True
    assert report["articles"] == report["merged_articles"] == len(raw)
    # worker A had taken exactly one task (one at a time); worker B ran that same task, delivered again
    taken = re.findall(r"Task cryptowire\.score_partition\[([0-9a-f-]+)\] received", log_a.read_text())
    assert len(taken) == 1, log_a.read_text()[-3000:]
    redone = [line for line in log_b.read_text().splitlines() if f"[{taken[0]}] succeeded" in line]
    assert len(redone) == 1 and f"{held_day}/input-" in redone[0], log_b.read_text()[-3000:]

    # every article scored exactly once: one row each, current versions, the in-process path's values
    con = db.connect(home / "warehouse.duckdb", read_only=True)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT id) FROM articles").fetchall()[0] == (len(raw), len(raw))
        versions = con.execute("SELECT DISTINCT model_version, tagger_version FROM articles").fetchall()
        assert versions == [(model.version, tagger.version)]
        got = rows_of(con)
    finally:
        con.close()
    assert got == expected
    # what is left on disk: one merged marker per day; no input, result, partial or running file
    left = sorted(p.name.split("-")[0] for p in (home / "partitions").glob("*/*"))
    assert left == ["merged"] * len(DAYS), sorted(str(p) for p in (home / "partitions").glob("*/*"))

    # a second backfill of the same days finds nothing to do
    again = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "backfill", "--since", DAYS[0].isoformat(), "--until",
         DAYS[-1].isoformat(), "--timeout", "30", "--json"], env=env, cwd=PROJECT, capture_output=True, text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["partitions"] == []


def test_without_redis_the_commands_say_what_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(PROJECT), CRYPTOWIRE_HOME=str(tmp_path / "home"))
    for args in (["worker"], ["backfill", "--since", "2026-03-01"]):
        out = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], env=env, cwd=PROJECT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 1 and "CRYPTOWIRE_REDIS_URL is not set" in out.stderr, out


def test_the_dagster_job_scores_its_day_on_a_worker(tmp_path: Path, redis_url_server: str, model,
                                                   sentiment_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`articles_on_workers`, one run per day: the run's day is scored by a worker process, the other day is not."""
    import dagster as dg

    from pipeline.automation import articles_on_workers
    from warehouse.config import get_settings

    home = tmp_path / "home"
    raw = generate(DAYS[:2], 10)
    con = db.connect(home / "warehouse.duckdb")
    insert_raw(con, raw)
    con.close()
    shutil.copytree(sentiment_cache, home / "models", dirs_exist_ok=True)
    env = _env(home, redis_url_server)
    for key in ("CRYPTOWIRE_HOME", "CRYPTOWIRE_REDIS_URL"):
        monkeypatch.setenv(key, env[key])
    get_settings.cache_clear()
    log = tmp_path / "worker.log"
    worker = start_worker(env, log)
    try:
        wait_ready(worker, log)
        with dg.DagsterInstance.ephemeral() as instance:
            result = articles_on_workers.execute_in_process(partition_key=DAYS[1].isoformat(), instance=instance)
        assert result.success
    finally:
        stop(worker)
        get_settings.cache_clear()
    [mat] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    meta = mat.event_specific_data.metadata  # type: ignore[union-attr]
    assert meta["merged"].value == 10 and meta["by_partition"].value[0]["worker"].endswith(f"-{worker.pid}")
    con = db.connect(home / "warehouse.duckdb", read_only=True)
    try:
        by_day = con.execute("SELECT published_at::DATE, count(model_version) FROM articles GROUP BY 1 ORDER BY 1")
        assert by_day.fetchall() == [(DAYS[0], 0), (DAYS[1], 10)]
    finally:
        con.close()


def test_a_backfill_killed_midway_is_finished_by_running_it_again(tmp_path: Path, redis_url_server: str, model,
                                                                  sentiment_cache: Path) -> None:
    """`cryptowire backfill` killed with SIGKILL after its first merge: the same backfill run again merges the rest
    (results already on disk are not computed again), and every article is scored once."""
    from models.sentiment import article_text
    from models.tagging import get_tagger

    days, per_day = DAYS[:4], 8
    raw = generate(days, per_day, seed=5)
    con = db.connect(tmp_path / "inproc.duckdb")
    insert_raw(con, raw)
    enrich_articles(con, model, article_text, get_tagger(), now=datetime(2026, 3, 6))
    expected = rows_of(con)
    con.close()
    home = tmp_path / "home"
    con = db.connect(home / "warehouse.duckdb")
    insert_raw(con, raw)
    con.close()
    shutil.copytree(sentiment_cache, home / "models", dirs_exist_ok=True)
    env = _env(home, redis_url_server)
    log = tmp_path / "worker.log"
    worker = start_worker({**env, "CRYPTOWIRE_TEST_PARTITION_HOLD": "2"}, log)  # each day takes 2 s or more
    args = [sys.executable, "-m", "pipeline.cli", "backfill", "--since", days[0].isoformat(), "--until",
            days[-1].isoformat(), "--timeout", "120", "--json"]
    try:
        wait_ready(worker, log)
        first = subprocess.Popen(args, env=env, cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not list((home / "partitions").glob("*/merged-*.json")):
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        first.kill()  # SIGKILL, after its first merge
        first.wait(10)
        assert len(list((home / "partitions").glob("*/merged-*.json"))) < len(days)
        again = subprocess.run(args, env=env, cwd=PROJECT, capture_output=True, text=True, timeout=300)
    finally:
        stop(worker)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert 0 < len(report["partitions"]) < len(days)  # only the days not merged before the kill
    assert all(p["status"] == "merged" and p["applied"] == per_day for p in report["partitions"])
    con = db.connect(home / "warehouse.duckdb", read_only=True)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT id) FROM articles").fetchall()[0] == (len(raw), len(raw))
        assert rows_of(con) == expected
    finally:
        con.close()
    # no input, result or running file is left; a day merged just before the kill may lack its marker
    left = {p.name.split("-")[0] for p in (home / "partitions").glob("*/*")}
    assert left == {"merged"}, sorted(str(p) for p in (home / "partitions").glob("*/*"))
