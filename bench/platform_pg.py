"""Metered API requests/s with 1 vs 2 API processes on one Postgres platform store (+ Redis for the rate buckets).

Starts a throwaway Postgres (initdb + pg_ctl, as the tests do) and redis-server, publishes a small serving snapshot,
creates a key on a plan with no practical limits, and starts two `cryptowire serve` processes with
CRYPTOWIRE_DATABASE_URL and CRYPTOWIRE_REDIS_URL set. Each request is a metered GraphQL
``cryptoNews(first: 10)`` (11 CU: key lookup, Redis token bucket, a Postgres charge committed before the answer).
Rounds alternate: all the load on one process, then the same load split over both (one wrk per process, half the
connections each), and, for reference, one process on the embedded SQLite store (no Postgres, no Redis). The
figures are medians over the rounds; the Postgres charges are checked against the 2xx seen.

    .venv/bin/python bench/platform_pg.py [--seconds 4] [--rounds 3] [--connections 32]

Needs wrk, Postgres (initdb) and redis-server. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this folder leads sys.path, and bench/graphql.py would shadow the graphql package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from bench.metering import _ms, cpu_seconds  # noqa: E402  (after sys.path is set)

BENCH_PLANS = """plans:
  bench:
    title: Bench
    price_usd: "0"
    cu_per_day: 1000000000000000
    requests_per_second: 1000000000
"""
QUERY = "query Q($first: Int) { cryptoNews(first: $first) { edges { node { id title sentiment } } } }"
COST = 11  # cryptoNews(first: 10)


def machine() -> dict[str, object]:
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "loadavg_1m": os.getloadavg()[0]}


def wrk(url: str, script: Path, seconds: float, connections: int, out: list[dict[str, float]]) -> None:
    text = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    out.append({
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text)[1]),  # type: ignore[index]
        "p50_ms": _ms(re.search(r"^\s+50%\s+(\S+)", text, re.M)[1]),  # type: ignore[index]
        "requests": int(re.search(r"(\d+) requests in", text)[1]),  # type: ignore[index]
        "non_2xx": int(bad[1]) if bad else 0,
    })


def serve(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"], cwd=ROOT, env=env,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("an API process exited during startup (see its output above)")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise TimeoutError("an API process did not become ready within 90 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (the median is reported)")
    ap.add_argument("--connections", type=int, default=32, help="concurrent keep-alive connections in all")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench/platform_pg.py needs wrk (Debian package wrk; `make setup` installs it as root)")

    from accounts.postgres import PostgresStore
    from tests.support.newsdata import Data, build, make_articles, make_events
    from tests.support.servers import (
        POSTGRES_MISSING,
        REDIS_MISSING,
        free_port,
        postgres_server,
        redis_server,
    )

    if POSTGRES_MISSING or REDIS_MISSING:
        sys.exit(POSTGRES_MISSING or REDIS_MISSING)
    work = Path(tempfile.mkdtemp(prefix="cw-bench-platform-pg-"))
    home = work / "home"
    build(home, Data(make_articles(200, 10), make_events(20)))
    (home / "plans.yaml").write_text(BENCH_PLANS)
    script = work / "post.lua"
    body = json.dumps({"query": QUERY, "variables": {"first": 10}})
    script.write_text(f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                      f"wrk.body = {json.dumps(body)}\n")

    with postgres_server(work / "postgres") as pg_url, redis_server(work / "redis") as redis_url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRYPTOWIRE_")}
        env.update({"CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_DATABASE_URL": pg_url,
                    "CRYPTOWIRE_REDIS_URL": redis_url, "CRYPTOWIRE_PLANS_FILE": str(home / "plans.yaml"),
                    "CRYPTOWIRE_PDF_PREWARM": "false", "PYTHONPATH": str(ROOT)})
        store = PostgresStore(pg_url)
        from accounts import load_plans

        store.sync_plans(load_plans(home / "plans.yaml").values())
        key_id, key = store.create_key("bench", "bench", ["news"])
        # the reference: the same app on the embedded SQLite store under the same data home
        from accounts import SqliteStore

        lite = SqliteStore(home / "platform.sqlite")
        lite.sync_plans(load_plans(home / "plans.yaml").values())
        _, lite_key = lite.create_key("bench", "bench", ["news"])
        lite.close()
        lite_env = {k: v for k, v in env.items() if k not in ("CRYPTOWIRE_DATABASE_URL", "CRYPTOWIRE_REDIS_URL")}
        ports = [free_port(), free_port(), free_port()]
        procs = [serve(env, ports[0]), serve(env, ports[1]), serve(lite_env, ports[2])]
        urls = [f"http://127.0.0.1:{p}/crypto-news/{k}" for p, k in zip(ports, (key, key, lite_key), strict=True)]
        configs = {1: [0], 2: [0, 1], "sqlite": [2]}

        def measure(n: int | str, seconds: float) -> dict[str, float]:
            targets = configs[n]
            cpu0 = [cpu_seconds(p.pid) or 0.0 for p in procs]
            results: list[dict[str, float]] = []
            per = max(1, args.connections // len(targets))
            threads = [threading.Thread(target=wrk, args=(urls[i], script, seconds, per, results)) for i in targets]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cpu = sum((cpu_seconds(p.pid) or 0.0) - c for p, c in zip(procs, cpu0, strict=True))
            requests = sum(int(r["requests"]) for r in results)
            return {"rps": sum(r["rps"] for r in results), "p50_ms": max(r["p50_ms"] for r in results),
                    "requests": requests, "non_2xx": sum(int(r["non_2xx"]) for r in results),
                    "api_cpu_us_per_request": cpu / requests * 1e6 if requests else 0.0}

        seen_2xx = 0
        try:
            for n in (1, 2):  # warm-up: caches, prepared statements, pool connections
                w = measure(n, 1.0)
                seen_2xx += int(w["requests"] - w["non_2xx"])
            measure("sqlite", 1.0)
            rounds: dict[int | str, list[dict[str, float]]] = {1: [], 2: [], "sqlite": []}
            order: tuple[int | str, ...] = (1, 2, "sqlite")
            for r in range(args.rounds):
                for n in (order if r % 2 == 0 else order[::-1]):
                    got = measure(n, args.seconds)
                    if n != "sqlite":
                        seen_2xx += int(got["requests"] - got["non_2xx"])
                    rounds[n].append(got)
        finally:
            for p in procs:
                p.send_signal(signal.SIGINT)
            for p in procs:
                p.wait(timeout=30)
        charged = store.used(key_id, time.strftime("%Y-%m-%d", time.gmtime()))
        store.close()

    def summary(n: int | str) -> dict[str, object]:
        rs = rounds[n]
        return {"rps": round(statistics.median(x["rps"] for x in rs), 1),
                "p50_ms": round(statistics.median(x["p50_ms"] for x in rs), 2),
                "api_cpu_us_per_request": round(statistics.median(x["api_cpu_us_per_request"] for x in rs), 1),
                "non_2xx": sum(int(x["non_2xx"]) for x in rs),
                "rounds_rps": [round(x["rps"], 1) for x in rs]}

    one, two = summary(1), summary(2)
    print(json.dumps({
        "benchmark": "platform_pg",
        "request": "POST /crypto-news/{key} cryptoNews(first: 10), 11 CU, metered: Postgres charge + Redis bucket",
        "connections": args.connections,
        "seconds_per_round": args.seconds,
        "api_processes_1": one,
        "api_processes_2": two,
        "reference_sqlite_1_process": summary("sqlite"),
        "speedup": round(float(two["rps"]) / float(one["rps"]), 2),  # type: ignore[arg-type]
        # every request charged in Postgres vs the 2xx the clients saw (wrk does not count the requests still
        # open when it stops, so it may see a few less than were charged; never more)
        "charged_requests": charged // COST,
        "charged_cu_exact_multiple": charged % COST == 0,
        "seen_2xx": seen_2xx,
        "machine": machine(),
    }))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
