"""From the deployment review: `cryptowire serve` and /readyz against Redis and Postgres outages, on real servers.

- serve refuses to start with Redis unreachable (one line, exit 1) or a URL of another scheme (one line, exit 2);
- /readyz is 503 not-ready while Redis or Postgres is down and 200 again once they are back, probing them at most
  about once a second;
- the first request after Postgres restarts succeeds (the pool's dead connections are not handed out).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from accounts.postgres import PostgresStore
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_articles, make_events
from tests.support.servers import (
    PG_BINDIR,
    REDIS_MISSING,
    _as_postgres,
    free_port,
    reachable_by_postgres,
    redis_server,
)
from warehouse.config import Settings

PROJECT = Path(__file__).resolve().parents[1]


def serve(home: Path, redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
    env.update({"CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_REDIS_URL": redis_url, "CRYPTOWIRE_PDF_PREWARM": "false",
                "PYTHONPATH": str(PROJECT)})
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", "--port", str(free_port())], cwd=PROJECT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_serve_says_a_redis_password_is_missing_or_wrong(tmp_path: Path) -> None:
    # A deployment review: Redis with a password (as deploy/Procfile starts it) and a URL without it, or with
    # another: serve said only "(ResponseError)".
    if REDIS_MISSING:
        pytest.skip(REDIS_MISSING)
    with redis_server(tmp_path / "redis", password="right") as right:
        port = urlsplit(right).port
        for url in (f"redis://127.0.0.1:{port}/0", f"redis://:wrong@127.0.0.1:{port}/0"):
            done = serve(tmp_path / "home", url)
            assert done.returncode == 1, done.stderr
            assert "the password in the URL (redis://:PASSWORD@host:6379/0) is missing or wrong" in done.stderr
            assert "wrong@" not in done.stderr


@pytest.mark.parametrize("url,code,says", [
    ("redis://:s3cret@127.0.0.1:{port}/0", 1, "cannot use Redis at 127.0.0.1:{port}/0"),
    ("http://s3cret@x", 2, "must start with redis://, rediss:// or unix:// (got http://)"),
])
def test_serve_refuses_to_start_without_a_usable_redis(tmp_path: Path, url: str, code: int, says: str) -> None:
    port = free_port()  # nothing listens there
    done = serve(tmp_path / "home", url.format(port=port))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: CRYPTOWIRE_REDIS_URL"), done.stderr
    assert says.format(port=port) in lines[0]
    assert "s3cret" not in done.stderr + done.stdout


# --- servers that can be stopped and started again on the same port ------------------------------------------
def pg_ctl(tmp_path: Path, url: str, action: str) -> None:
    """Stop or start the ``postgres_url`` fixture's server (its cluster is in tmp_path/postgres)."""
    work = (tmp_path / "postgres").resolve()  # as root, a directory of its own (tests.support.servers)
    opts = f"-p {urlsplit(url).port} -k {work / 'pgsock'} -c listen_addresses=127.0.0.1 -c fsync=off"
    args = ["-m", "fast", "-w", "stop"] if action == "stop" else ["-l", str(work / "postgres.log"), "-o", opts,
                                                                     "-w", "-t", "60", "start"]
    if action != "stop":
        reachable_by_postgres(work)
    subprocess.run([str(PG_BINDIR / "pg_ctl"), "-D", str(work / "pgdata"), *args],  # type: ignore[operator]
                   check=True, capture_output=True, **_as_postgres())  # type: ignore[arg-type]


def wait_for(url: str, status: int, seconds: float = 10) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        r = httpx.get(url, timeout=10)
        if r.status_code == status or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


@pytest.mark.skipif(bool(REDIS_MISSING), reason=str(REDIS_MISSING))
def test_readyz_is_not_ready_while_redis_or_postgres_is_down(tmp_path: Path, postgres_url: str) -> None:
    home = tmp_path / "home"
    build(home, Data(make_articles(5, 2), make_events(2)))
    port = free_port()
    redis_url = f"redis://127.0.0.1:{port}/0"
    settings = Settings(home=home, redis_url=redis_url, database_url=postgres_url, pdf_prewarm=False)
    from api.app import create_app

    with ApiServer(create_app(settings)) as srv:
        ready = srv.url("/readyz")
        with redis_server(tmp_path / "redis", port):
            assert wait_for(ready, 200).json()["status"] == "ready"
            # cheap: 30 probes in a row reach Redis about once a second, not 30 times
            rc = redis.Redis(port=port)
            before = int(rc.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))
            t0 = time.monotonic()
            for _ in range(30):
                assert httpx.get(ready).status_code == 200
            pings = int(rc.info("commandstats")["cmdstat_ping"]["calls"]) - before
            assert pings <= 2 * (time.monotonic() - t0 + 1), pings
            rc.close()
        r = wait_for(ready, 503)
        assert r.status_code == 503 and r.json()["status"] == "not ready" and "Redis" in r.json()["reason"], r.text
        with redis_server(tmp_path / "redis", port):
            assert wait_for(ready, 200).status_code == 200
            pg_ctl(tmp_path, postgres_url, "stop")
            r = wait_for(ready, 503)
            assert r.status_code == 503 and "Postgres" in r.json()["reason"], r.text
            pg_ctl(tmp_path, postgres_url, "start")
            assert wait_for(ready, 200).status_code == 200


def test_the_first_call_after_postgres_restarts_succeeds(tmp_path: Path, postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    try:
        # several pooled connections, all of which die with the server
        gate = threading.Barrier(4)

        def hold() -> None:
            with store._conn() as conn:
                gate.wait(10)
                conn.execute("SELECT 1")

        threads = [threading.Thread(target=hold) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert store._pool.get_stats()["pool_size"] >= 4
        pg_ctl(tmp_path, postgres_url, "stop")
        pg_ctl(tmp_path, postgres_url, "start")
        for _ in range(4):  # every call succeeds, the first one included
            assert store.used("key_000000000000", "2026-01-01") == 0
    finally:
        store.close()
