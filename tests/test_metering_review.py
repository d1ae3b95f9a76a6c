"""From the metering review (2026-11-26), on real servers: what a client gets and is charged when things fail.

- a refund the counters cannot take right then (Postgres down) is retried until they can; the client is told its
  own error, and the CU come back;
- a GraphQL request that fails on our side (500) is not charged;
- while Postgres is down, requests are refused at once after the first finds out (not each after the store's
  timeouts), and served again when it is back;
- after Redis restarts, the next requests succeed (the pool's dead connections are replaced, not handed out);
- a request costing more than the plan's whole daily allowance is told so (403), not to wait for midnight;
- `cryptowire usage` on a key whose plan left the plans file says why there is no allowance;
- `serve --workers 2` without Redis says that each worker keeps its own token bucket.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from accounts import build_access
from api.errors import ApiError
from tests.support.apiserver import ApiServer, free_port
from tests.support.metered import metering_settings, write_plans
from tests.support.newsdata import Data, build, make_articles, make_events
from tests.support.servers import REDIS_MISSING, redis_server
from tests.test_outage_review import pg_ctl

CLI = str(Path(sys.executable).parent / "cryptowire")


def test_a_refund_while_postgres_is_down_is_made_once_it_is_back(tmp_path: Path, postgres_url: str) -> None:
    async def run() -> None:
        access = build_access(metering_settings(tmp_path / "home", {"p": (100_000, 50)}, database_url=postgres_url))
        try:
            key_id, key = access.store.create_key("r", "p", ["pdf"])
            caller = await access.check(key, "pdf")
            charge = await access.reserve(caller, 20_000)
            assert await access._counters.used(key_id, charge.info["day"]) == 20_000
            pg_ctl(tmp_path, postgres_url, "stop")
            await access.refund(charge)  # does not raise: the render's own error is what the client gets
            assert access.headers(caller, charge)["X-CU-Cost"] == "0"
            pg_ctl(tmp_path, postgres_url, "start")
            deadline = time.monotonic() + 60
            while access._refunds:
                assert time.monotonic() < deadline, "the deferred refund was never made"
                await asyncio.sleep(0.2)
            assert await access._counters.used(key_id, charge.info["day"]) == 0
            await access.refund(charge)  # idempotent: nothing more is given back
            assert await access._counters.used(key_id, charge.info["day"]) == 0
        finally:
            await access.close()

    asyncio.run(run())


def test_a_refund_still_pending_at_shutdown_is_logged_once_and_not_made_twice(
    tmp_path: Path, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> tuple[str, str]:
        settings = metering_settings(tmp_path / "home", {"p": (100_000, 50)}, database_url=postgres_url)
        access = build_access(settings)
        key_id, key = access.store.create_key("s", "p", ["pdf"])
        charge = await access.reserve(await access.check(key, "pdf"), 20_000)
        pg_ctl(tmp_path, postgres_url, "stop")
        await access.refund(charge)
        await access.close()  # Postgres still down: the last attempt fails, and says so
        return key_id, charge.info["day"]

    with caplog.at_level("ERROR", logger="accounts.access"):
        key_id, day = asyncio.run(run())
    lost = [r.getMessage() for r in caplog.records if "not made at shutdown" in r.getMessage()]
    assert len(lost) == 1 and "20000 CU" in lost[0] and key_id in lost[0], lost
    pg_ctl(tmp_path, postgres_url, "start")
    again = build_access(metering_settings(tmp_path / "home", {"p": (100_000, 50)}, database_url=postgres_url))
    try:
        assert asyncio.run(again._counters.used(key_id, day)) == 20_000  # neither refunded nor refunded twice
    finally:
        asyncio.run(again.close())


def test_while_postgres_is_down_requests_are_refused_at_once(tmp_path: Path, postgres_url: str) -> None:
    from accounts.access import FAIL_FAST_SECONDS

    async def run() -> None:
        access = build_access(metering_settings(tmp_path / "home", {"p": (100_000, 1000)}, database_url=postgres_url))
        try:
            _, key = access.store.create_key("f", "p", ["news"])
            await access.check(key, "news")
            access._cache.clear()  # a key not looked up yet: the store must be asked
            pg_ctl(tmp_path, postgres_url, "stop")
            with pytest.raises(ApiError) as err:
                await access.check(key, "news")  # the first one finds out (the store's timeouts)
            assert err.value.code == "METERING_UNAVAILABLE"
            started = time.monotonic()
            for _ in range(10):
                with pytest.raises(ApiError) as err:
                    await access.check(key, "news")
                assert err.value.status == 503 and err.value.headers["Retry-After"] == "1"
            assert time.monotonic() - started < 0.5  # not ten waits on the store
            await asyncio.sleep(FAIL_FAST_SECONDS + 0.1)

            async def timed() -> float:
                t0 = time.monotonic()
                with pytest.raises(ApiError):
                    await access.check(key, "news")
                return time.monotonic() - t0

            waits = await asyncio.gather(*(timed() for _ in range(10)))  # then one tries, the others are refused
            assert sum(w < 0.5 for w in waits) >= 9, waits
            pg_ctl(tmp_path, postgres_url, "start")
            await asyncio.sleep(FAIL_FAST_SECONDS + 0.1)
            deadline = time.monotonic() + 30
            while True:  # served again without a restart
                try:
                    await access.check(key, "news")
                    break
                except ApiError:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.5)
        finally:
            await access.close()

    asyncio.run(run())


def test_a_graphql_request_failing_on_our_side_costs_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    build(home, Data(make_articles(300, 50), make_events(40)))
    settings = metering_settings(home, {"p": (100_000, 50)})
    access = build_access(settings)
    _, key = access.store.create_key("g", "p", ["news"])
    access.store.close()
    from api.app import create_app

    with ApiServer(create_app(settings)) as api:
        for snap in (home / "snapshots").glob("snapshot-*.duckdb"):  # a disk fault under the running server
            os.truncate(snap, snap.stat().st_size // 4)
        query = '{ cryptoNews(first: 5, search: "bitcoin") { edges { node { id } } } }'
        r = httpx.post(api.url(f"/crypto-news/{key}"), json={"query": query})
        assert r.status_code == 503, r.text  # the damaged file is named, with what to do (a 500 before)
        error = r.json()["errors"][0]
        assert error["extensions"]["code"] == "NOT_READY" and "publish again" in error["message"], error
        assert r.headers["x-cu-cost"] == "0"
        assert httpx.get(api.url(f"/api/usage/{key}")).json()["today"]["cuUsedToday"] == 0


@pytest.mark.skipif(bool(REDIS_MISSING), reason=str(REDIS_MISSING))
def test_after_redis_restarts_the_next_burst_is_served(tmp_path: Path) -> None:
    port = free_port()

    async def burst(access, key: str, n: int) -> list[str]:  # noqa: ANN001
        async def one() -> str:
            try:
                await access.reserve(await access.check(key, "news"), 1)
                return "ok"
            except ApiError as exc:
                return exc.code

        return list(await asyncio.gather(*(one() for _ in range(n))))

    async def run() -> None:
        url = f"redis://127.0.0.1:{port}/0"
        access = build_access(metering_settings(tmp_path / "home", {"p": (10**9, 1000)}, redis_url=url))
        _, key = access.store.create_key("b", "p", ["news"])
        try:
            with redis_server(tmp_path / "redis", port):
                assert set(await burst(access, key, 40)) == {"ok"}  # fills the pool with connections
            with redis_server(tmp_path / "redis", port):  # the same port: Redis went away and came back
                await asyncio.sleep(1.5)
                got = await burst(access, key, 40)
                assert got.count("ok") == 40, sorted(set(got))
        finally:
            await access.close()

    asyncio.run(run())


def test_a_request_costing_more_than_the_whole_plan_is_told_so(tmp_path: Path) -> None:
    async def run() -> None:
        access = build_access(metering_settings(tmp_path / "home", {"tiny": (1000, 10)}))
        try:
            key_id, key = access.store.create_key("t", "tiny", ["news"])
            caller = await access.check(key, "news")
            with pytest.raises(ApiError) as err:
                await access.reserve(caller, 1465)
            assert err.value.status == 403 and err.value.code == "COST_EXCEEDS_PLAN"
            assert "Retry-After" not in err.value.headers
            assert "1465 CU" in err.value.message and "1000 CU" in err.value.message
            assert await access._counters.used(key_id, caller.info["day"]) == 0
            charge = await access.reserve(caller, 1000)  # the whole allowance still fits
            assert charge.cost == 1000
        finally:
            await access.close()

    asyncio.run(run())


def test_usage_of_a_key_whose_plan_was_removed_says_why(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = metering_settings(home, {"old": (1000, 10), "new": (2000, 10)})
    access = build_access(settings)
    key_id, _ = access.store.create_key("k", "old", ["news"])
    access.store.close()
    write_plans(settings.plans_file, {"new": (2000, 10)})  # the operator dropped "old"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
    env.update(CRYPTOWIRE_HOME=str(home), CRYPTOWIRE_PLANS_FILE=str(settings.plans_file))
    out = subprocess.run([CLI, "usage", key_id], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "plan 'old' is not in the plans file" in out.stdout and f"keys set-plan {key_id} PLAN" in out.stdout


def test_serve_with_two_workers_and_no_redis_says_the_rate_is_per_worker(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
    env.update(CRYPTOWIRE_HOME=str(tmp_path / "home"), CRYPTOWIRE_PDF_PREWARM="false")
    proc = subprocess.Popen([CLI, "serve", "--workers", "2", "--port", str(free_port())], env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert "each of the 2 workers keeps its own token bucket" in first and "CRYPTOWIRE_REDIS_URL" in first, first
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
