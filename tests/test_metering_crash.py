"""`kill -9` of a metered server process under load: at most the requests in flight are lost, nothing is
charged twice, no balance goes negative, and the counts carry on after a restart."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from accounts import SqliteStore
from tests.support.metered import DEFAULT_COST, MeteredProcess, metering_settings

WORKERS = 24  # concurrent clients, each with at most one request in flight


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


async def _hammer(srv: MeteredProcess, key: str, kill_after: int) -> tuple[int, int]:
    """Requests from WORKERS clients until the server dies; it is killed once ``kill_after`` succeeded.
    Returns (answered with 200, sent but never answered)."""
    ok = 0
    lost = 0
    killed = asyncio.Event()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal ok, lost
        while True:
            try:
                r = await client.get(srv.url(f"/metered/{key}"))
            except httpx.ConnectError:
                return  # the server is gone; this request never reached it
            except httpx.TransportError:
                lost += 1  # sent, never answered: in flight at the kill
                return
            assert r.status_code == 200, r.text
            ok += 1
            if ok >= kill_after and not killed.is_set():
                killed.set()
                srv.kill9()

    limits = httpx.Limits(max_connections=WORKERS, max_keepalive_connections=WORKERS)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        await asyncio.gather(*(worker(client) for _ in range(WORKERS)))
    return ok, lost


@pytest.mark.slow
def test_kill_9_under_load_loses_only_in_flight_and_never_double_charges(tmp_path: Path) -> None:
    settings = metering_settings(tmp_path / "home", {"bulk": (10**12, 100_000)})
    store = SqliteStore(settings.platform_db)
    key_id, key = store.create_key("crash", "bulk", ["news"])
    store.close()

    srv = MeteredProcess(settings).start()
    try:
        ok, lost = asyncio.run(_hammer(srv, key, kill_after=300))
    finally:
        srv.stop()
    assert srv.proc is not None and srv.proc.returncode == -9

    with sqlite3.connect(settings.platform_db) as db:  # the file as the dead process left it
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = db.execute("SELECT used, news_cu, news_requests FROM usage_daily WHERE key_id = ?", (key_id,))
        used, news_cu, news_requests = rows.fetchall()[0]
    assert used % DEFAULT_COST == 0 and used >= 0
    charged = used // DEFAULT_COST
    # every answered request is charged exactly once; beyond that, only requests that were in flight
    print(f"kill -9: answered {ok}, lost in flight {lost}, charged {charged}")
    assert ok <= charged <= ok + WORKERS, (ok, lost, charged)
    assert (news_cu, news_requests) == (used, charged)

    # restart on the same file: the count carries on, and 200 concurrent requests add exactly 200 charges
    with MeteredProcess(settings) as again:
        before = httpx.get(again.url(f"/api/usage/{key}")).json()["today"]["cuUsedToday"]

        async def burst() -> list[int]:
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            async with httpx.AsyncClient(limits=limits, timeout=60) as client:
                rs = await asyncio.gather(*(client.get(again.url(f"/metered/{key}")) for _ in range(200)))
            return [r.status_code for r in rs]

        statuses = asyncio.run(burst())
        after = httpx.get(again.url(f"/api/usage/{key}")).json()
    assert before == used
    assert Counter(statuses) == {200: 200}
    assert after["today"]["cuUsedToday"] == used + 200 * DEFAULT_COST
    assert after["days"][-1] == {
        "date": today(),
        "cu": used + 200 * DEFAULT_COST,
        "requests": charged + 200,
        "apis": {"news": {"cu": used + 200 * DEFAULT_COST, "requests": charged + 200},
                 "events": {"cu": 0, "requests": 0}, "pdf": {"cu": 0, "requests": 0}},
    }


def test_two_processes_on_one_sqlite_file_share_the_allowance_exactly(tmp_path: Path) -> None:
    allowed = 120
    settings = metering_settings(tmp_path / "home", {"tight": (allowed * DEFAULT_COST + 30, 100_000)})
    store = SqliteStore(settings.platform_db)
    key_id, key = store.create_key("two", "tight", ["news"])
    store.close()
    with MeteredProcess(settings) as a, MeteredProcess(settings) as b:
        urls = [(a if i % 2 else b).url(f"/metered/{key}") for i in range(200)]

        async def burst() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            async with httpx.AsyncClient(limits=limits, timeout=60) as client:
                return list(await asyncio.gather(*(client.get(u) for u in urls)))

        responses = asyncio.run(burst())
    assert Counter(r.status_code for r in responses) == {200: allowed, 429: 200 - allowed}
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 429} == {"QUOTA_EXCEEDED"}
    store = SqliteStore(settings.platform_db)
    assert store.used(key_id, today()) == allowed * DEFAULT_COST
    assert store.history(key_id, [today()])[today()]["news"] == (allowed * DEFAULT_COST, allowed)
    store.close()
