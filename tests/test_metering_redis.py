"""The Redis limiter and counters against a real redis-server on 127.0.0.1: API instances share limits."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from accounts import MeteredAccess, build_access
from accounts.limits import RedisCounters, RedisRateLimiter
from api.errors import ApiError
from tests.support.apiserver import ApiServer, free_port
from tests.support.metered import DEFAULT_COST, metered_app, metering_settings
from tests.support.servers import REDIS_MISSING

pytestmark = pytest.mark.skipif(REDIS_MISSING is not None, reason=f"{REDIS_MISSING}; `make test` installs it")


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def _pair(tmp_path: Path, redis_url: str, plans: dict[str, tuple[int, float]]) -> tuple[MeteredAccess, ...]:
    """Two API instances: each its own Access and Redis connection; the keys in one shared platform db."""
    settings = metering_settings(tmp_path / "home", plans, redis_url=redis_url)
    a, b = build_access(settings), build_access(settings)
    assert isinstance(a._limiter, RedisRateLimiter) and isinstance(b._counters, RedisCounters)
    return a, b


def test_two_instances_share_the_rate_limit(tmp_path: Path, redis_url_server: str) -> None:
    async def run() -> None:
        a, b = _pair(tmp_path, redis_url_server, {"five": (10**9, 5)})
        _, key = a.store.create_key("r", "five", ["news"])
        t0 = time.monotonic()
        passed = 0
        last_error: ApiError | None = None
        for i in range(12):  # alternate instances, as a load balancer would
            try:
                await (a if i % 2 == 0 else b).check(key, "news")
                passed += 1
            except ApiError as exc:
                last_error = exc
        elapsed = time.monotonic() - t0
        assert 5 <= passed <= 5 + math.ceil(elapsed * 5)  # one bucket of 5, not two
        assert last_error is not None and last_error.status == 429 and last_error.code == "RATE_LIMITED"
        assert int(last_error.headers["Retry-After"]) >= 1
        await a.close()
        await b.close()

    asyncio.run(run())


def test_two_instances_share_the_daily_allowance_exactly(tmp_path: Path, redis_url_server: str) -> None:
    async def run() -> None:
        a, b = _pair(tmp_path, redis_url_server, {"tight": (100 * DEFAULT_COST, 100_000)})
        key_id, key = a.store.create_key("q", "tight", ["news", "pdf"])

        async def one(i: int) -> str:
            acc = a if i % 2 == 0 else b
            caller = await acc.check(key, "news")
            try:
                await acc.reserve(caller, DEFAULT_COST)
                return "ok"
            except ApiError as exc:
                assert exc.code == "QUOTA_EXCEEDED" and int(exc.headers["Retry-After"]) > 0
                return exc.code

        results = Counter(await asyncio.gather(*(one(i) for i in range(160))))
        assert results == {"ok": 100, "QUOTA_EXCEEDED": 60}
        for acc in (a, b):
            u = await acc.usage(await acc.check(key, "pdf"))
            assert u["cuUsedToday"] == 100 * DEFAULT_COST and u["cuRemainingToday"] == 0
        caller = await b.check(key, "news")
        with pytest.raises(ApiError) as err:
            await b.reserve(caller, 1)  # not one CU more, from either instance
        assert err.value.code == "QUOTA_EXCEEDED"
        rep = await a.report(key_id, days=2)
        assert rep["days"][-1]["apis"]["news"] == {"cu": 100 * DEFAULT_COST, "requests": 100}
        await a.close()
        await b.close()

    asyncio.run(run())


def test_refund_and_history_in_redis(tmp_path: Path, redis_url_server: str) -> None:
    async def run() -> None:
        a, b = _pair(tmp_path, redis_url_server, {"p": (100_000, 1000)})
        key_id, key = a.store.create_key("f", "p", ["pdf", "news"])
        charge = await a.reserve(await a.check(key, "pdf"), 20_000)
        await b.reserve(await b.check(key, "news"), 30)
        assert a.headers(charge.caller, charge)["X-CU-Remaining-Today"] == str(100_000 - 20_000)
        await a.refund(charge)
        await a.refund(charge)  # idempotent
        assert a.headers(charge.caller, charge)["X-CU-Cost"] == "0"
        rep = await b.report(key_id, days=1)
        assert rep["today"]["cuUsedToday"] == 30
        assert rep["days"] == [{"date": today(), "cu": 30, "requests": 1,
                                "apis": {"news": {"cu": 30, "requests": 1}, "pdf": {"cu": 0, "requests": 0},
                                         "events": {"cu": 0, "requests": 0}}}]
        await a.close()
        await b.close()

    asyncio.run(run())


def test_two_real_servers_behind_a_balancer_charge_exactly(tmp_path: Path, redis_url_server: str) -> None:
    a, b = _pair(tmp_path, redis_url_server, {"bulk": (10**12, 100_000)})
    key_id, key = a.store.create_key("lb", "bulk", ["news"])
    with ApiServer(metered_app(a)) as sa, ApiServer(metered_app(b)) as sb:
        urls = [(sa if i % 2 == 0 else sb).url(f"/metered/{key}") for i in range(200)]

        async def burst() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            async with httpx.AsyncClient(limits=limits, timeout=60) as client:
                return list(await asyncio.gather(*(client.get(u) for u in urls)))

        responses = asyncio.run(burst())
        usage = httpx.get(sb.url(f"/api/usage/{key}")).json()
    assert Counter(r.status_code for r in responses) == {200: 200}
    assert usage["today"]["cuUsedToday"] == 200 * DEFAULT_COST
    assert usage["days"][-1]["apis"]["news"] == {"cu": 200 * DEFAULT_COST, "requests": 200}
    # the embedded SQLite counters were not used: the charges are in Redis only
    assert a.store.used(key_id, today()) == 0
    a.store.close()  # the Redis clients belonged to the servers' event loops, now gone
    b.store.close()


def test_redis_down_refuses_instead_of_serving_free(tmp_path: Path) -> None:
    async def run() -> None:
        dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
        access = build_access(metering_settings(tmp_path / "home", {"p": (1000, 10)}, redis_url=dead))
        _, key = access.store.create_key("d", "p", ["news"])
        with pytest.raises(ApiError) as err:
            await access.check(key, "news")
        assert err.value.status == 503 and err.value.code == "METERING_UNAVAILABLE"
        assert "127.0.0.1" not in err.value.message
        await access.close()

    asyncio.run(run())
