"""Metering through a real HTTP server (uvicorn on 127.0.0.1): exact charges under concurrency, limits, errors,
headers, refunds, the usage route, and counts surviving a restart."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from accounts import MeteredAccess, build_access
from tests.support.apiserver import ApiServer
from tests.support.metered import DEFAULT_COST, metered_app, metering_settings
from warehouse.config import Settings

HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-CU-Cost", "X-CU-Remaining-Today")
BULK = 10**12  # a plan with room for everything


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def _settings(tmp_path: Path, **plans: tuple[int, float]) -> Settings:
    return metering_settings(tmp_path / "home", plans or None)


class Served:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.access: MeteredAccess = build_access(settings)
        self.server = ApiServer(metered_app(self.access, settings))

    def url(self, path: str) -> str:
        return self.server.url(path)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(_settings(tmp_path, bulk=(BULK, 100_000), tight=(150 * DEFAULT_COST + 50, 100_000)))
    with s.server:
        yield s
    asyncio.run(s.access.close())


async def _burst(urls: list[str]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(urls), max_keepalive_connections=len(urls))
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        return list(await asyncio.gather(*(client.get(u) for u in urls)))


def test_200_concurrent_requests_charge_exactly_n_times_cost(served: Served) -> None:
    key_id, key = served.access.store.create_key("load", "bulk", ["news"])
    responses = asyncio.run(_burst([served.url(f"/metered/{key}")] * 250))
    assert Counter(r.status_code for r in responses) == {200: 250}
    assert served.access.store.used(key_id, today()) == 250 * DEFAULT_COST
    assert served.access.store.history(key_id, [today()]) == {
        today(): {"news": (250 * DEFAULT_COST, 250), "events": (0, 0), "pdf": (0, 0)}
    }
    remaining = sorted(int(r.headers["X-CU-Remaining-Today"]) for r in responses)
    # every response saw its own charge: 250 distinct balances, one cost apart
    assert remaining == [BULK - n * DEFAULT_COST for n in range(250, 0, -1)]


def test_quota_boundary_under_concurrency_and_retry_after(served: Served) -> None:
    key_id, key = served.access.store.create_key("tight", "tight", ["news"])
    responses = asyncio.run(_burst([served.url(f"/metered/{key}")] * 200))
    by_status = Counter(r.status_code for r in responses)
    assert by_status == {200: 150, 429: 50}
    assert served.access.store.used(key_id, today()) == 150 * DEFAULT_COST
    refused = [r for r in responses if r.status_code == 429]
    midnight = math.ceil(86400 - time.time() % 86400)
    for r in refused:
        assert r.json()["error"]["code"] == "QUOTA_EXCEEDED"
        assert "resets at 00:00 UTC" in r.json()["error"]["message"]
        assert abs(int(r.headers["Retry-After"]) - midnight) <= 5
        assert r.headers["X-CU-Remaining-Today"] == "50"
    # exactly the 50 CU left can still be spent, and not one more
    ok = httpx.get(served.url(f"/metered/{key}?cost=50"))
    assert ok.status_code == 200 and ok.headers["X-CU-Remaining-Today"] == "0" and ok.headers["X-CU-Cost"] == "50"
    no = httpx.get(served.url(f"/metered/{key}?cost=1"))
    assert no.status_code == 429 and no.json()["error"]["code"] == "QUOTA_EXCEEDED"
    assert served.access.store.used(key_id, today()) == 150 * DEFAULT_COST + 50


def test_rate_limit_token_bucket_free_plan(tmp_path: Path) -> None:
    s = Served(_settings(tmp_path))  # the bundled plans: free is 1 request/s, burst 1
    key_id, key = s.access.store.create_key("free", "free", ["news"])
    with s.server, httpx.Client() as client:
        first = client.get(s.url(f"/metered/{key}"))
        second = client.get(s.url(f"/metered/{key}"))
        time.sleep(1.05)
        third = client.get(s.url(f"/metered/{key}"))
    assert first.status_code == 200
    assert first.headers["X-RateLimit-Limit"] == "1" and first.headers["X-RateLimit-Remaining"] == "0"
    assert first.headers["X-RateLimit-Reset"] == "1"
    assert second.status_code == 429 and second.json()["error"]["code"] == "RATE_LIMITED"
    assert second.headers["Retry-After"] == "1" and "1 request per second" in second.json()["error"]["message"]
    assert second.headers["X-CU-Cost"] == "0"
    assert third.status_code == 200
    # the refused request cost nothing
    assert s.access.store.used(key_id, today()) == 2 * DEFAULT_COST
    asyncio.run(s.access.close())


def test_burst_equals_rate(tmp_path: Path) -> None:
    async def run() -> None:
        access = build_access(_settings(tmp_path))
        _, key = access.store.create_key("basic", "basic", ["news"])  # 10 requests/s, burst 10
        t0 = time.monotonic()
        passed = 0
        for _ in range(30):
            try:
                await access.check(key, "news")
                passed += 1
            except Exception as exc:
                assert getattr(exc, "code", None) == "RATE_LIMITED"
        elapsed = time.monotonic() - t0
        assert 10 <= passed <= 10 + math.ceil(elapsed * 10)
        assert passed < 30
        await access.close()

    asyncio.run(run())


def test_unknown_revoked_and_not_enabled(served: Served) -> None:
    key_id, key = served.access.store.create_key("n", "bulk", ["news"])
    gone_id, gone = served.access.store.create_key("g", "bulk", ["news"])
    served.access.store.revoke_key(gone_id)
    made_up = "cw_live_" + "A" * 32
    with httpx.Client() as client:
        for bad in (made_up, "not-a-key", gone, key[:-1] + ("B" if key[-1] != "B" else "C")):
            r = client.get(served.url(f"/metered/{bad}"))
            assert r.status_code == 401, bad
            assert r.json()["error"]["code"] == "UNAUTHENTICATED"
            assert bad not in r.text and key not in r.text
        r = client.get(served.url(f"/metered/{key}?api=pdf"))
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"
        assert "not enabled for the pdf API" in r.json()["error"]["message"] and key not in r.text
        r = client.get(served.url(f"/api/usage/{made_up}"))
        assert r.status_code == 401
    assert served.access.store.used(key_id, today()) == 0


def test_headers_refund_and_usage_route(served: Served) -> None:
    key_id, key = served.access.store.create_key("h", "bulk", ["news", "pdf"])
    with httpx.Client() as client:
        ok = client.get(served.url(f"/metered/{key}?cost=20000&api=pdf"))
        assert ok.status_code == 200
        assert all(h in ok.headers for h in HEADERS)
        assert ok.headers["X-CU-Cost"] == "20000"
        assert int(ok.headers["X-CU-Remaining-Today"]) == BULK - 20_000
        assert ok.headers["X-RateLimit-Limit"] == "100000"
        # a failed render is refunded: costs nothing
        failed = client.get(served.url(f"/metered/{key}?cost=20000&api=pdf&fail=1"))
        assert failed.status_code == 422 and failed.headers["X-CU-Cost"] == "0"
        assert int(failed.headers["X-CU-Remaining-Today"]) == BULK - 20_000
        client.get(served.url(f"/metered/{key}?cost=5"))
        usage = client.get(served.url(f"/api/usage/{key}?days=2"))
        assert usage.status_code == 200 and all(h in usage.headers for h in HEADERS)
        assert usage.headers["X-CU-Cost"] == "0"
        bad = client.get(served.url(f"/api/usage/{key}?days=abc"))
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "BAD_REQUEST"
        assert "days must be a whole number" in bad.json()["error"]["message"]
    body = usage.json()
    assert body["id"] == key_id and key not in usage.text
    assert body["today"]["cuUsedToday"] == 20_005 and body["today"]["cuRemainingToday"] == BULK - 20_005
    assert body["today"]["resetAt"].endswith("T00:00:00.000Z")
    assert [d["date"] for d in body["days"]][-1] == today() and len(body["days"]) == 2
    assert body["days"][-1]["apis"]["pdf"] == {"cu": 20_000, "requests": 1}
    assert body["days"][-1]["apis"]["news"] == {"cu": 5, "requests": 1}
    assert body["days"][-1]["cu"] == 20_005 and body["days"][-1]["requests"] == 2


def test_counts_survive_a_restart(tmp_path: Path) -> None:
    settings = _settings(tmp_path, bulk=(BULK, 100_000))
    first = Served(settings)
    key_id, key = first.access.store.create_key("r", "bulk", ["news"])
    with first.server:
        responses = asyncio.run(_burst([first.url(f"/metered/{key}")] * 40))
    assert all(r.status_code == 200 for r in responses)
    asyncio.run(first.access.close())

    second = Served(settings)  # a new process's view: new Access on the same SQLite file
    with second.server:
        r = httpx.get(second.url(f"/api/usage/{key}"))
        more = httpx.get(second.url(f"/metered/{key}"))
    assert r.json()["today"]["cuUsedToday"] == 40 * DEFAULT_COST
    assert int(more.headers["X-CU-Remaining-Today"]) == BULK - 41 * DEFAULT_COST
    asyncio.run(second.access.close())


def test_the_app_uses_metering_and_serves_usage(tmp_path: Path) -> None:
    from api.app import create_app

    settings = _settings(tmp_path)
    app = create_app(settings)
    access = app.state.cw.access
    assert isinstance(access, MeteredAccess)
    key_id, key = access.store.create_key("app", "pro", ["news"])
    with ApiServer(app) as srv:
        r = httpx.get(srv.url(f"/api/usage/{key}?days=1"))
        unknown = httpx.get(srv.url("/api/usage/cw_live_" + "Z" * 32))
    assert r.status_code == 200 and r.json()["id"] == key_id and r.json()["today"]["cuLimit"] == 100_000_000
    assert r.headers["X-RateLimit-Limit"] == "10" and r.headers["X-CU-Cost"] == "0"
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "UNAUTHENTICATED"


def test_one_group_commit_for_many_keys_is_exact(tmp_path: Path) -> None:
    async def run() -> None:
        access = build_access(_settings(tmp_path, bulk=(BULK, 100_000), tight=(10 * DEFAULT_COST, 100_000)))
        keys = [access.store.create_key(f"k{i}", "bulk" if i else "tight", ["news", "pdf"]) for i in range(4)]
        callers = [await access.check(k, "news") for _, k in keys]
        # 4 keys x 15 charges reach the same event-loop turn: one batch, one transaction, one commit
        results = await asyncio.gather(
            *(access.reserve(c, DEFAULT_COST) for c in callers for _ in range(15)), return_exceptions=True
        )
        refused = [r for r in results if isinstance(r, Exception)]
        assert len(refused) == 5 and all(getattr(r, "code", "") == "QUOTA_EXCEEDED" for r in refused)
        for i, (key_id, _) in enumerate(keys):
            assert access.store.used(key_id, today()) == (15 if i else 10) * DEFAULT_COST
        await access.close()

    asyncio.run(run())
