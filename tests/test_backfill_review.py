"""Deployment review of `cryptowire backfill` and `cryptowire worker`, on real processes (redis-server, workers):
a backfill run again after the warehouse lost its merge scores the day again; a Redis restart while the backfill
waits is survived, and a Redis that stays away is one error line; a non-Redis CRYPTOWIRE_REDIS_URL is one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pytest

from tests.support.rawgen import generate, insert_raw
from tests.support.servers import REDIS_MISSING, REDIS_SERVER, free_port
from tests.test_workers import PROJECT, _env, held_by, start_worker, stop, wait_ready
from warehouse import db

DAY = date(2026, 3, 2)
PER_DAY = 6


def start_redis(port: int, workdir: Path) -> subprocess.Popen:
    """A redis-server that loads workdir's dump.rdb if there is one (a restart keeps what it saved)."""
    import redis

    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
            time.sleep(0.05)


@pytest.fixture
def redis_port(tmp_path: Path):
    if REDIS_MISSING:
        pytest.skip(REDIS_MISSING)
    port, workdir = free_port(), tmp_path / "redis"
    workdir.mkdir()
    procs = [start_redis(port, workdir)]
    yield port, workdir, procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def shutdown_redis(port: int, save: bool) -> None:
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "save" if save else "nosave"], capture_output=True,
                   timeout=30)


def home_with_articles(tmp_path: Path, sentiment_cache: Path) -> Path:
    home = tmp_path / "home"
    con = db.connect(home / "warehouse.duckdb")
    insert_raw(con, generate([DAY], PER_DAY, seed=9))
    con.close()
    shutil.copytree(sentiment_cache, home / "models", dirs_exist_ok=True)
    return home


def backfill_args() -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "backfill", "--since", DAY.isoformat(), "--until",
            DAY.isoformat(), "--timeout", "120", "--json"]


def run_beside_a_worker(script: str, env: dict[str, str], log: Path,
                        worker_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a Python ``script`` (a backfill, patched) while one real worker serves the queue."""
    worker = start_worker({**env, **(worker_env or {})}, log)
    try:
        wait_ready(worker, log)
        return subprocess.run([sys.executable, "-c", script], env=env, cwd=PROJECT, capture_output=True, text=True,
                              timeout=300)
    finally:
        stop(worker)


def scored(home: Path) -> int:
    con = db.connect(home / "warehouse.duckdb", read_only=True)
    try:
        return con.execute("SELECT count(sentiment) FROM articles").fetchall()[0][0]
    finally:
        con.close()


@pytest.mark.slow
def test_a_backfill_run_again_after_the_warehouse_lost_its_merge_scores_the_day_again(
        tmp_path: Path, redis_url_server: str, sentiment_cache: Path) -> None:
    home = home_with_articles(tmp_path, sentiment_cache)
    env = _env(home, redis_url_server)
    log = tmp_path / "worker.log"
    worker = start_worker(env, log)
    warehouse, copy = home / "warehouse.duckdb", tmp_path / "warehouse-copy.duckdb"
    shutil.copy(warehouse, copy)
    runs = []
    try:
        wait_ready(worker, log)
        for reset in (None, "restore", "model_version"):
            if reset == "restore":  # the warehouse restored from a copy taken before the first backfill
                shutil.copy(copy, warehouse)
            elif reset == "model_version":  # scores dropped for the day (a version reset)
                con = db.connect(warehouse)
                con.execute("UPDATE articles SET model_version = NULL, sentiment = NULL")
                con.close()
            assert scored(home) == 0
            out = subprocess.run(backfill_args(), env=env, cwd=PROJECT, capture_output=True, text=True, timeout=300)
            runs.append((reset, out.returncode, out.stdout, out.stderr))
            assert out.returncode == 0, runs
            [part] = json.loads(out.stdout)["partitions"]
            assert part["status"] == "merged" and part["applied"] == PER_DAY, runs
            assert scored(home) == PER_DAY
    finally:
        stop(worker)


@pytest.mark.slow
def test_a_merged_marker_without_the_merge_in_the_warehouse_fails_the_day(
        tmp_path: Path, redis_url_server: str, sentiment_cache: Path) -> None:
    """A marker that appears after the export (so the export could not clear it) makes the worker drop its result:
    the backfill checks the warehouse, reports the day failed and exits 1, rather than "merged" with 0 articles."""
    home = home_with_articles(tmp_path, sentiment_cache)
    env = _env(home, redis_url_server)
    script = f"""
import sys
from pathlib import Path
import pipeline.workers
from pipeline.cli import main
queue = pipeline.workers.queue
def queue_with_stale_marker(inputs):
    for rel in inputs:
        path = Path({str(home / "partitions")!r}) / rel
        path.with_name(path.name.replace("input-", "merged-").replace(".parquet", ".json")).write_text("{{}}")
    return queue(inputs)
pipeline.workers.queue = queue_with_stale_marker
sys.argv = ["cryptowire", *{backfill_args()[3:]!r}]
main()
"""
    out = run_beside_a_worker(script, env, tmp_path / "worker.log")
    assert out.returncode == 1, out
    [part] = json.loads(out.stdout)["partitions"]
    assert part["status"] == "failed" and f"{PER_DAY} of its articles are still unscored" in part["error"], part
    assert scored(home) == 0


@pytest.mark.slow
def test_a_day_merged_elsewhere_does_not_break_the_wait_for_the_others(
        tmp_path: Path, redis_url_server: str, sentiment_cache: Path) -> None:
    """Two days, the first with a merged marker (another run's): while the backfill waits for the second, its Redis
    checks must go on working (a variable of the marker branch once shadowed the Redis key: a false "unreachable")."""
    home = tmp_path / "home"
    con = db.connect(home / "warehouse.duckdb")
    insert_raw(con, generate([DAY, date(2026, 3, 3)], PER_DAY, seed=9))
    con.close()
    shutil.copytree(sentiment_cache, home / "models", dirs_exist_ok=True)
    env = _env(home, redis_url_server)
    script = f"""
import sys
from pathlib import Path
import pipeline.backfill, pipeline.workers
from pipeline.cli import main
pipeline.backfill.REDIS_RETRY_SECONDS = 3.0  # the false alarm, if any, comes within the second day's hold
queue = pipeline.workers.queue
def queue_with_one_stale_marker(inputs):
    first = sorted(inputs)[0]
    path = Path({str(home / "partitions")!r}) / first
    path.with_name(path.name.replace("input-", "merged-").replace(".parquet", ".json")).write_text("{{}}")
    return queue(inputs)
pipeline.workers.queue = queue_with_one_stale_marker
sys.argv = ["cryptowire", "backfill", "--since", "2026-03-02", "--until", "2026-03-03", "--timeout", "120", "--json"]
main()
"""
    out = run_beside_a_worker(script, env, tmp_path / "worker.log", {"CRYPTOWIRE_TEST_PARTITION_HOLD": "6"})
    assert "unreachable" not in out.stderr + out.stdout, out
    parts = sorted(json.loads(out.stdout)["partitions"], key=lambda p: p["day"])
    assert [p["status"] for p in parts] == ["failed", "merged"], parts
    assert scored(home) == PER_DAY


@pytest.mark.slow
def test_a_backfill_survives_a_redis_restart_while_it_waits(tmp_path: Path, redis_port, sentiment_cache: Path) -> None:
    port, workdir, procs = redis_port
    home = home_with_articles(tmp_path, sentiment_cache)
    env = _env(home, f"redis://127.0.0.1:{port}/0")
    log = tmp_path / "worker.log"
    worker = start_worker({**env, "CRYPTOWIRE_TEST_PARTITION_HOLD": "6"}, log)  # holds the day while Redis restarts
    backfill = None
    try:
        wait_ready(worker, log)
        backfill = subprocess.Popen(backfill_args(), env=env, cwd=PROJECT, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while held_by(home, worker.pid) is None:
            assert backfill.poll() is None and time.monotonic() < deadline, backfill.communicate()
            time.sleep(0.05)
        shutdown_redis(port, save=True)  # a restart that keeps its data (persistence)
        time.sleep(2)  # the backfill polls a Redis that is away
        procs.append(start_redis(port, workdir))
        out, err = backfill.communicate(timeout=300)
    finally:
        stop(worker)
        if backfill is not None and backfill.poll() is None:
            backfill.kill()
    assert backfill.returncode == 0, (out, err, log.read_text()[-3000:])
    assert "Traceback" not in err
    assert "Redis lost its data" not in out + err  # it kept its data: nothing is queued twice
    [part] = json.loads(out)["partitions"]
    assert part["status"] == "merged" and part["applied"] == PER_DAY
    assert scored(home) == PER_DAY


@pytest.mark.slow
def test_a_backfill_queues_again_what_a_redis_without_persistence_lost(
        tmp_path: Path, redis_port, sentiment_cache: Path) -> None:
    """Redis restarts empty (no RDB/AOF) while the day waits in its queue: the backfill sees the new server and
    queues the day again, instead of waiting on a task that no longer exists until --timeout."""
    import redis

    port, workdir, procs = redis_port
    home = home_with_articles(tmp_path, sentiment_cache)
    env = _env(home, f"redis://127.0.0.1:{port}/0")
    log = tmp_path / "worker.log"
    backfill = subprocess.Popen(backfill_args(), env=env, cwd=PROJECT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        client, deadline = redis.Redis(port=port), time.monotonic() + 60
        while client.llen("cryptowire-partitions") < 1:  # queued, and no worker to take it yet
            assert backfill.poll() is None and time.monotonic() < deadline, backfill.communicate()
            time.sleep(0.05)
        shutdown_redis(port, save=False)
        procs.append(start_redis(port, workdir))
        assert client.llen("cryptowire-partitions") == 0  # the task is gone with the old server
        worker = start_worker(env, log)
        out, err = backfill.communicate(timeout=300)
    finally:
        if worker is not None:
            stop(worker)
        if backfill.poll() is None:
            backfill.kill()
    assert backfill.returncode == 0, (out, err, log.read_text()[-3000:] if log.exists() else "")
    assert "Redis lost its data (restarted without persistence?): queuing 1 partition(s) again" in out + err
    [part] = json.loads(out)["partitions"]
    assert part["status"] == "merged" and part["applied"] == PER_DAY
    assert scored(home) == PER_DAY


def test_a_redis_that_stays_away_is_one_error_line(tmp_path: Path, redis_port) -> None:
    # In a process of its own (Celery's app keeps its connections): Redis is shut down once the day is queued, and
    # the backfill retries for 2 s instead of REDIS_RETRY_SECONDS.
    port, _, _ = redis_port
    home = tmp_path / "home"
    con = db.connect(home / "warehouse.duckdb")
    insert_raw(con, generate([DAY], PER_DAY, seed=9))
    con.close()
    script = f"""
import subprocess, sys
import pipeline.backfill, pipeline.workers
from pipeline.cli import main
pipeline.backfill.REDIS_RETRY_SECONDS = 2.0
queue = pipeline.workers.queue
def queue_then_lose_redis(inputs):
    sent = queue(inputs)
    subprocess.run(["redis-cli", "-p", "{port}", "shutdown", "nosave"], capture_output=True)
    return sent
pipeline.workers.queue = queue_then_lose_redis
sys.argv = ["cryptowire", "backfill", "--since", "{DAY}", "--until", "{DAY}"]
main()
"""
    out = subprocess.run([sys.executable, "-c", script], env=_env(home, f"redis://127.0.0.1:{port}/0"), cwd=PROJECT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "Redis at CRYPTOWIRE_REDIS_URL is unreachable" in errors[0]
    assert "run the same backfill again" in errors[0]


def test_a_non_redis_url_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    env = _env(tmp_path / "home", "http://x")
    for args in (["worker"], ["backfill", "--since", "2026-03-01"]):
        out = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], env=env, cwd=PROJECT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
        assert "CRYPTOWIRE_REDIS_URL must start with redis://, rediss:// or unix:// (got http://)" in out.stderr


def test_a_malformed_day_is_a_command_line_mistake(tmp_path: Path) -> None:
    env = _env(tmp_path / "home", "redis://127.0.0.1:1/0")
    for args, option in ((["--since", "2026-13-01"], "--since"), (["--since", "2026-03-01", "--until", "3/4"], "--until")):
        out = subprocess.run([sys.executable, "-m", "pipeline.cli", "backfill", *args], env=env, cwd=PROJECT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and "Usage:" in out.stderr and "Traceback" not in out.stderr, out
        assert option in out.stderr and "is not a date: write it as YYYY-MM-DD" in out.stderr, out.stderr


def test_a_unix_socket_url_reaches_redis(tmp_path: Path) -> None:
    """unix:///path?db=N (redis-py's spelling, allowed in CRYPTOWIRE_REDIS_URL) is what Celery uses too."""
    import redis

    if REDIS_MISSING:
        pytest.skip(REDIS_MISSING)
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen([REDIS_SERVER, "--port", "0", "--unixsocket", str(sock), "--save", "", "--dir",
                             str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    script = """
from pipeline.workers import app, configure, queue
configure()
queue(["2026-03-01/input-x.parquet"])
app.backend.store_result("t1", {"done": True}, "SUCCESS")
assert app.AsyncResult("t1").state == "SUCCESS"
"""
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        out = subprocess.run([sys.executable, "-c", script], env=_env(tmp_path / "home", f"unix://{sock}?db=2"),
                             cwd=PROJECT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        client = redis.Redis(unix_socket_path=str(sock), db=2)
        assert client.llen("cryptowire-partitions") == 1 and client.exists("celery-task-meta-t1")
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)
