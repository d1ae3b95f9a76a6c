"""From the operator's metering review (s43), on real servers: a store that hangs, and what a client is billed.

- a Postgres that hangs (SIGSTOP: TCP up, no answers) gets metered requests a 503 METERING_UNAVAILABLE within the
  store's call timeout, not held until it answers; the store recovers by itself, and nothing answered 503 is
  charged;
- a charge or refund whose COMMIT Postgres never confirmed (here: a synchronous standby that does not exist, so
  the COMMIT waits) is undone before the store's next write when it did commit: the 503 and the bill agree, and a
  refund made again is made once;
- a charge or refund Redis runs after the client's socket timeout (Redis stopped with it queued) is cancelled:
  undone, or stopped before it runs;
- a 503 past the key check (the rate-limit step failed) carries X-CU-Cost 0 and the X-RateLimit-* headers;
- `cryptowire serve --log-level trace` logs no key (uvicorn's ASGI scopes), nor does a key sent under
  /assets/graphiql/.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
import redis

import accounts.postgres
from accounts import build_access
from accounts.keys import new_key
from accounts.limits import MeteringUnavailable, RedisCounters
from accounts.store import StoreUnavailable
from tests.support.apiserver import ApiServer, free_port
from tests.support.metered import metered_app, metering_settings
from tests.support.servers import REDIS_MISSING, redis_server, wait_serving

PROJECT = Path(__file__).resolve().parents[1]
CALL_TIMEOUT = 1.5  # the Postgres store's call timeout in these tests (5 s in production)
DAY = "2026-01-01"


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


@contextmanager
def frozen(pids: list[int]) -> Iterator[None]:
    """The processes stopped (SIGSTOP: their sockets stay open, nothing answers), continued after the block."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def postgres_pids(tmp_path: Path) -> list[int]:
    """The ``postgres_url`` fixture's postmaster and every backend and worker it started."""
    postmaster = int((tmp_path / "postgres" / "pgdata" / "postmaster.pid").read_text().split()[0])
    return [postmaster, *_children(postmaster)]


def test_a_hung_postgres_gets_503_at_once_not_held_and_recovers(tmp_path: Path, postgres_url: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accounts.postgres, "CALL_TIMEOUT", CALL_TIMEOUT, raising=False)
    settings = metering_settings(tmp_path / "home", {"p": (10**9, 1000)}, database_url=postgres_url)
    access = build_access(settings)
    key_id, key = access.store.create_key("hang", "p", ["news"])
    answers: list[httpx.Response] = []
    with ApiServer(metered_app(access, settings, close=True)) as srv:
        warm = httpx.get(srv.url(f"/metered/{key}?cost=10"), timeout=30)  # key cached, a pooled connection
        assert warm.status_code == 200, warm.text
        answers.append(warm)
        paths = [f"/metered/{key}?cost=10"] * 4 + [f"/api/usage/{key}", f"/metered/{new_key()}?cost=10"]

        def timed(path: str) -> tuple[str, httpx.Response, float]:
            t0 = time.monotonic()
            r = httpx.get(srv.url(path), timeout=60)
            return path, r, time.monotonic() - t0

        with ThreadPoolExecutor(len(paths)) as pool:
            with frozen(postgres_pids(tmp_path)):
                futures = [pool.submit(timed, p) for p in paths]
                stop = time.monotonic() + 4.5  # the freeze: longer than any answer may take
                while time.monotonic() < stop and not all(f.done() for f in futures):
                    time.sleep(0.05)
            results = [f.result() for f in futures]
        for path, r, took in results:
            # answered while Postgres was still stopped, within about the call timeout (twice, with some margin)
            assert r.status_code == 503 and took < 2 * CALL_TIMEOUT + 0.5, (path, r.status_code, took, r.text)
            assert r.json()["error"]["code"] == "METERING_UNAVAILABLE" and r.headers["Retry-After"] == "1"
            if path.startswith(f"/metered/{key}"):
                assert r.headers["X-CU-Cost"] == "0"
            answers.append(r)
        # recovers by itself: within a few seconds of Postgres answering again, requests are served
        deadline = time.monotonic() + 5
        while True:
            r = httpx.get(srv.url(f"/metered/{key}?cost=10"), timeout=30)
            answers.append(r)
            if r.status_code == 200:
                break
            assert r.status_code == 503 and time.monotonic() < deadline, r.text
            time.sleep(0.2)
        usage = httpx.get(srv.url(f"/api/usage/{key}?days=1"), timeout=30)
        assert usage.status_code == 200, usage.text
    # the bill is what the clients were told: nothing for the 503s
    told = sum(int(r.headers.get("X-CU-Cost", "0")) for r in answers)
    assert told == 20
    assert usage.json()["today"]["cuUsedToday"] == told
    assert usage.json()["days"][-1]["requests"] == 2


def _sync_standby(url: str, on: bool) -> None:
    """Make every COMMIT wait for a synchronous standby that does not exist (``on``), or stop that. A COMMIT
    waiting so has committed locally: it shows once the wait ends (setting cleared, backend ended)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'" if on
                     else "ALTER SYSTEM RESET synchronous_standby_names")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.3)  # every backend has read it


def _in_thread(fn, *args):  # type: ignore[no-untyped-def]
    """``fn(*args)`` in a thread, given at most 3 call timeouts: what it returned or raised, or 'hung'."""
    out: list[object] = ["hung"]

    def run() -> None:
        try:
            out[0] = fn(*args)
        except Exception as exc:  # noqa: BLE001
            out[0] = exc

    t = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(3 * CALL_TIMEOUT)
    return out[0], time.monotonic() - t0


def test_a_write_whose_commit_postgres_never_confirmed_is_undone(postgres_url: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accounts.postgres, "CALL_TIMEOUT", CALL_TIMEOUT, raising=False)
    store = accounts.postgres.PostgresStore(postgres_url)
    key_id, _ = store.create_key("commit", "p", ["news"])
    try:
        assert store.charge(key_id, DAY, "news", 7, 10**6) == (True, 7)
        # a charge whose COMMIT gets no answer: refused (the API's 503) within the call timeout...
        _sync_standby(postgres_url, True)
        try:
            got, took = _in_thread(store.charge, key_id, DAY, "news", 100, 10**6)
        finally:
            _sync_standby(postgres_url, False)  # ...though it committed, as Postgres shows now
        assert isinstance(got, StoreUnavailable) and took < 2 * CALL_TIMEOUT, (got, took)
        # ...and it is refunded before the next write: the bill is the charges the callers were told of
        assert store.charge(key_id, DAY, "news", 500, 10**6) == (True, 507)
        assert store.history(key_id, [DAY])[DAY]["news"] == (507, 2)
        # a refund whose COMMIT gets no answer: it raised, so the caller makes it again; made once in all
        _sync_standby(postgres_url, True)
        try:
            got, took = _in_thread(store.refund, key_id, DAY, "news", 500)
        finally:
            _sync_standby(postgres_url, False)
        assert isinstance(got, StoreUnavailable) and took < 2 * CALL_TIMEOUT, (got, took)
        assert store.refund(key_id, DAY, "news", 500) == 7
        assert store.history(key_id, [DAY])[DAY]["news"] == (7, 1)
    finally:
        _sync_standby(postgres_url, False)
        store.close()


@pytest.mark.skipif(bool(REDIS_MISSING), reason=str(REDIS_MISSING))
def test_a_write_redis_ran_after_its_timeout_is_cancelled(tmp_path: Path) -> None:
    import redis.asyncio as aioredis

    async def run(url: str, pid: int) -> None:
        # redis-py's socket timeout (5 s in production) cut short: the freeze outlasts it
        client = aioredis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5, decode_responses=True)
        counters = RedisCounters(client)
        key_id = "key_000000000001"
        try:
            assert await counters.charge(key_id, DAY, "news", 5, 10**6) == (True, 5)
            with frozen([pid]):  # the script is sent, Redis runs it only when it continues
                with pytest.raises(MeteringUnavailable):
                    await counters.charge(key_id, DAY, "news", 11, 10**6)
            await asyncio.sleep(0.5)  # Redis has run what was queued
            # the next charge comes after the cancel: the one answered 503 is not billed
            assert await counters.charge(key_id, DAY, "news", 2, 10**6) == (True, 7)
            assert (await counters.history(key_id, [DAY]))[DAY]["news"] == (7, 2)
            # a refund that timed out is made again by its caller: once in all
            assert await counters.charge(key_id, DAY, "news", 100, 10**6) == (True, 107)
            assert await counters.charge(key_id, DAY, "news", 100, 10**6) == (True, 207)
            with frozen([pid]):
                with pytest.raises(MeteringUnavailable):
                    await counters.refund(key_id, DAY, "news", 100)
            await asyncio.sleep(0.5)
            assert await counters.refund(key_id, DAY, "news", 100) == 107
            assert (await counters.history(key_id, [DAY]))[DAY]["news"] == (107, 3)
        finally:
            await counters.close()

    with redis_server(tmp_path / "redis") as url:
        pid = int(redis.Redis.from_url(url).info("server")["process_id"])
        asyncio.run(run(url, pid))


def test_a_503_past_the_key_check_carries_the_metering_headers(tmp_path: Path) -> None:
    # Redis (the rate limits and the counters) cannot be reached: the rate-limit step is the one that fails
    settings = metering_settings(tmp_path / "home", {"p": (1000, 5)}, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    access = build_access(settings)
    _, key = access.store.create_key("headers", "p", ["news"])
    with ApiServer(metered_app(access, settings, close=True)) as srv:
        r = httpx.get(srv.url(f"/metered/{key}?cost=10"), timeout=30)
    assert r.status_code == 503 and r.json()["error"]["code"] == "METERING_UNAVAILABLE", r.text
    assert r.headers["X-CU-Cost"] == "0" and r.headers["Retry-After"] == "1"
    assert r.headers["X-RateLimit-Limit"] == "5" and r.headers["X-RateLimit-Remaining"] == "0"
    assert r.headers["X-RateLimit-Reset"] == "1"


def test_serve_at_trace_level_logs_no_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
    env.update({"CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_PDF_PREWARM": "false", "PYTHONPATH": str(PROJECT)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "serve", "--port", str(port), "--log-level", "trace"],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    secret = new_key()
    try:
        wait_serving(f"http://127.0.0.1:{port}/healthz", proc, 60, "cryptowire serve")
        base = f"http://127.0.0.1:{port}"
        assert httpx.post(f"{base}/crypto-news/{secret}?k={secret}", json={"query": "{ tickers }"}).status_code == 401
        assert httpx.get(f"{base}/assets/graphiql/{secret}").status_code == 404
        assert httpx.get(f"{base}/assets/graphiql/graphiql.min.css").status_code in (200, 404)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert "Started scope=" in out, out[-2000:]  # trace level is on: uvicorn logged the scopes
    assert secret not in out and secret[8:] not in out
    assert '"POST /crypto-news/***?*** HTTP/1.1" 401' in out
    assert '"GET /assets/graphiql/*** HTTP/1.1" 404' in out
    assert "/assets/graphiql/graphiql.min.css" in out  # the explorer's own files are still logged as they are


def test_a_key_under_the_explorer_assets_prefix_is_redacted() -> None:
    from pipeline.commands.serve import redact_path

    secret = new_key()
    assert redact_path(f"/assets/graphiql/{secret}") == "/assets/graphiql/***"
    assert redact_path(f"/assets/graphiql/{secret}?x=1") == "/assets/graphiql/***?***"
    assert redact_path("/assets/graphiql/graphiql.min.js") == "/assets/graphiql/graphiql.min.js"


def test_the_log_filters_take_keys_out_of_trace_scopes_and_any_line() -> None:
    from pipeline.commands.serve import RedactKeyShaped, RedactTraceScope

    secret = new_key()
    scope = {"type": "http", "path": f"/crypto-news/{secret}", "raw_path": f"/crypto-news/{secret}".encode(),
             "query_string": f"k={secret}".encode(), "headers": "<...>"}
    record = logging.LogRecord("uvicorn.asgi", 5, __file__, 1, "%s [%d] Started scope=%s",
                               ("127.0.0.1:5000 - ASGI", 1, scope), None)
    assert RedactTraceScope().filter(record) and secret[8:] not in record.getMessage()
    assert "'path': '/crypto-news/***'" in record.getMessage()
    # and whatever logger writes a key anywhere in a line, the handlers' filter takes it out
    record = logging.LogRecord("api", logging.WARNING, __file__, 1, "lookup of %s failed: %r", (secret, {"k": secret}),
                               None)
    assert RedactKeyShaped().filter(record) and secret[8:] not in record.getMessage()
    assert "cw_live_***" in record.getMessage()


def test_an_access_line_with_a_key_deep_under_the_explorer_prefix_is_logged_redacted() -> None:
    # A security review: `POST /assets/graphiql/<key>/x` kept its path (the key was not the last segment); the
    # line filter then scrubbed the key but, seeing "cw_live_***" still, cleared the record's arguments, and
    # uvicorn's access formatter failed on it ("--- Logging error ---"): the line was lost.
    from uvicorn.logging import AccessFormatter

    from pipeline.commands.serve import RedactAccessKeys, RedactKeyShaped, redact_path

    secret = new_key()
    assert redact_path(f"/assets/graphiql/{secret}/x") == "/assets/graphiql/***"
    assert redact_path(f"/assets/graphiql/{secret[8:]}") == "/assets/graphiql/***"  # a key without its prefix
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "POST", f"/x/{secret}/y", "1.1", 404), None)
    record.args = (*record.args[:2], f"/assets/graphiql/{secret}/x", *record.args[3:])  # as a filter above it left it
    assert RedactKeyShaped().filter(record)
    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False).format(record)
    assert secret[8:] not in line and '"POST /assets/graphiql/cw_live_***/x HTTP/1.1" 404' in line, line
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "POST", f"/assets/graphiql/{secret}/x", "1.1", 404), None)
    assert RedactAccessKeys().filter(record) and RedactKeyShaped().filter(record)
    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False).format(record)
    assert '"POST /assets/graphiql/*** HTTP/1.1" 404' in line, line
