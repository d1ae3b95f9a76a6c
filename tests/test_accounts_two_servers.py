"""Two real API processes (`cryptowire serve`, separate OS processes) on one Postgres database and one Redis:
400 concurrent metered GraphQL requests charge exactly the CU of their 2xx responses (read back through the
`cryptowire usage` CLI), a daily allowance holds across both processes, and a key revoked through the CLI is
refused by both processes within a second."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import redis

from tests.support.apiserver import free_port
from tests.support.metered import write_plans
from tests.support.newsdata import Data, build, make_articles, make_events

PROJECT = Path(__file__).resolve().parents[1]
QUERY = "query Q($first: Int) { cryptoNews(first: $first) { edges { node { id title } } } }"
TIGHT_CU = 50 * 11  # exactly 50 requests of cryptoNews(first: 10) = 11 CU


def env_for(home: Path, postgres_url: str, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
    env.update({
        "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_DATABASE_URL": postgres_url, "CRYPTOWIRE_REDIS_URL": redis_url,
        "CRYPTOWIRE_PLANS_FILE": str(home / "plans.yaml"), "CRYPTOWIRE_PDF_PREWARM": "false",
        "PYTHONPATH": str(PROJECT),  # the subprocesses run this checkout's code
    })
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


class Serve:
    """`python -m pipeline.cli serve` in its own process."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "warning"],
            cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, self.proc.stdout.read() if self.proc.stdout else ""
            try:
                if httpx.get(self.url("/readyz"), timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.2)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=30)
        return out or ""


@pytest.mark.slow
def test_two_api_processes_on_postgres_charge_exactly_and_revoke_within_a_second(
    tmp_path: Path, postgres_url: str, redis_url_server: str
) -> None:
    home = tmp_path / "home"
    build(home, Data(make_articles(60, 10), make_events(5)))
    write_plans(home / "plans.yaml", {"bulk": (10**12, 100_000), "tight": (TIGHT_CU, 100_000)})
    env = env_for(home, postgres_url, redis_url_server)
    code = "import accounts, api, pipeline; print(accounts.__file__, api.__file__, pipeline.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    assert [Path(w).resolve().parent.parent for w in where] == [PROJECT] * 3  # this checkout's code, not another

    bulk = json.loads(cli(env, "keys", "create", "--plan", "bulk", "--name", "bulk", "--apis", "news",
                          "--json").stdout)
    tight = json.loads(cli(env, "keys", "create", "--plan", "tight", "--name", "tight", "--apis", "news",
                           "--json").stdout)
    servers = [Serve(env), Serve(env)]
    try:
        for s in servers:
            s.wait_ready()
        assert servers[0].proc.pid != servers[1].proc.pid

        # 400 requests at once, alternating between the two processes: 300 on the bulk key with first = 1..10
        # (cost 2..11 CU), 100 on the tight key with first = 10 (11 CU; its allowance holds 50 of them).
        plan = [(bulk, (i % 10) + 1) for i in range(300)] + [(tight, 10) for _ in range(100)]
        plan = [plan[(i * 7) % 400] for i in range(400)]  # mix the keys (7 is prime to 400)

        async def burst() -> list[tuple[int, str, httpx.Response]]:
            limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
            async with httpx.AsyncClient(limits=limits, timeout=120) as client:
                async def one(i: int) -> tuple[int, str, httpx.Response]:
                    key, first = plan[i]
                    r = await client.post(servers[i % 2].url(f"/crypto-news/{key['key']}"),
                                          json={"query": QUERY, "variables": {"first": first}})
                    return i % 2, key["id"], r

                return list(await asyncio.gather(*(one(i) for i in range(400))))

        t0 = time.monotonic()
        results = asyncio.run(burst())
        burst_seconds = time.monotonic() - t0
        statuses = Counter(r.status_code for _, _, r in results)
        bad = [(srv, r.text) for srv, _, r in results if r.status_code not in (200, 429)][:3]
        assert set(statuses) <= {200, 429}, (statuses, bad, [s.stop() for s in servers])
        for _, _, r in results:
            if r.status_code == 200:
                assert "errors" not in r.json(), r.text
            else:
                assert r.json()["errors"][0]["extensions"]["code"] == "QUOTA_EXCEEDED"
                assert r.headers["X-CU-Cost"] == "0"
        by_server = Counter(srv for srv, _, r in results if r.status_code == 200)
        assert by_server[0] > 0 and by_server[1] > 0  # both processes served and charged

        charged = {k["id"]: sum(int(r.headers["X-CU-Cost"]) for _, kid, r in results
                                if kid == k["id"] and r.status_code == 200) for k in (bulk, tight)}
        ok = {k["id"]: sum(1 for _, kid, r in results if kid == k["id"] and r.status_code == 200)
              for k in (bulk, tight)}
        assert charged[bulk["id"]] == sum(1 + (i % 10) + 1 for i in range(300))  # every bulk request passed
        assert ok[tight["id"]] == 50 and charged[tight["id"]] == TIGHT_CU  # the allowance, across processes

        for k in (bulk, tight):  # usage read back through the CLI equals the CU of the 2xx responses, exactly
            usage = json.loads(cli(env, "usage", k["id"], "--days", "1", "--json").stdout)
            assert usage["today"]["cuUsedToday"] == charged[k["id"]]
            assert usage["days"][-1]["apis"]["news"] == {"cu": charged[k["id"]], "requests": ok[k["id"]]}
        # the counters are in Postgres; Redis holds only the request-rate buckets
        rc = redis.Redis.from_url(redis_url_server)
        assert list(rc.scan_iter("cw:usage:*")) == []
        stats = rc.info("commandstats")
        scripts = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))
        assert scripts >= 400  # one token-bucket script per request
        rc.close()

        # revoke through the CLI: both processes refuse the key within a second
        for s in servers:  # the key is in both processes' caches
            r = httpx.post(s.url(f"/crypto-news/{bulk['key']}"), json={"query": QUERY, "variables": {"first": 1}})
            assert r.status_code == 200
        t_cli = time.monotonic()
        cli(env, "keys", "revoke", bulk["id"], "--json")
        t_revoked = time.monotonic()
        refused_after: dict[int, float] = {}
        with httpx.Client(timeout=5) as client:
            while len(refused_after) < 2 and time.monotonic() - t_revoked < 5:
                for n, s in enumerate(servers):
                    if n in refused_after:
                        continue
                    r = client.post(s.url(f"/crypto-news/{bulk['key']}"),
                                    json={"query": QUERY, "variables": {"first": 1}})
                    if r.status_code == 401:
                        assert r.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
                        refused_after[n] = time.monotonic() - t_revoked
                time.sleep(0.005)
        print(f"\n400 requests in {burst_seconds:.2f} s; revoke CLI took {t_revoked - t_cli:.2f} s; "
              f"refused after {refused_after}")
        assert sorted(refused_after) == [0, 1], refused_after
        assert max(refused_after.values()) < 1.0
    finally:
        logs = [s.stop() for s in servers]
    for out in logs:
        assert "Traceback" not in out, out
