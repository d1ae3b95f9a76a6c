"""GraphQL serving benchmark: throughput and latency of the real API against a bare Starlette baseline.

    .venv/bin/python bench/graphql.py [--articles 1000000] [--events 100000] [--duration 10] [--connections 8]
                                      [--data DIR] [--out FILE]

1. Generates a warehouse with ``--articles`` articles and ``--events`` prediction events directly in DuckDB SQL
   (hundreds of equal publication times included) and publishes a serving snapshot with the real
   ``warehouse.publish.publish_snapshot``. With ``--data DIR`` the generated snapshot is kept and reused.
2. Starts the real app under uvicorn as ``cryptowire serve`` runs it (1 worker, httptools/uvloop, the redacting
   access log on, to /dev/null) with development keys (``StaticKeys``: metering has its own benchmark,
   bench/metering.py) and, in the same run, a bare Starlette endpoint returning the same 20 items as JSON from
   memory (the baseline), under the same uvicorn settings (access log included).
3. Loads each from 127.0.0.1 with ``wrk`` (one thread; it needs a core of its own) for: ``cryptoNews(first: 20)``,
   the page at item 900,000 via its cursor, ``cryptoNews(first: 20, tickers: ["ETH"])``,
   ``predictionEvents(first: 20)``, and the baseline.
4. Prints JSON: requests/s, latency percentiles, ratios (deep/first, first/baseline), and the machine.

The issue's goals (one worker on 2 cores): first page >= 1,000 requests/s with p99 <= 25 ms; deep page within
1.2x of the first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder leads sys.path and this module would shadow the graphql package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KEY = "bench-key"
NEWS_FIELDS = "id title text sentiment sentimentScore tickers topics sourceName newsUrl imageUrl date"
NEWS_QUERY = (
    "query News($first: Int, $after: String, $tickers: [String!]) { cryptoNews(first: $first, after: $after, "
    "tickers: $tickers) { pageInfo { hasNextPage endCursor hasPreviousPage startCursor } "
    f"edges {{ cursor node {{ {NEWS_FIELDS} }} }} }} }}"
)
EVENTS_QUERY = (
    "query Events($first: Int) { predictionEvents(first: $first) { pageInfo { hasNextPage endCursor } "
    "edges { node { id eventTitle eventDescription sourceUrl imageUrl createdAt date options tags status } } } }"
)
TICKERS = [
    "BTC", "ETH", "SOL", "XRP", "ADA", "DOGE", "DOT", "AVAX", "LINK", "LTC", "BNB", "TRX", "TON", "SHIB", "ATOM",
    "UNI", "XLM", "NEAR", "APT", "ARB", "OP", "SUI", "PEPE", "FIL", "ICP", "HBAR", "INJ", "AAVE", "MKR", "POL",
]


# --------------------------------------------------------------------------------------------- data


def generate_snapshot(home: Path, articles: int, events: int) -> Path:
    """A warehouse with synthetic rows, published as a snapshot under ``home/snapshots``; returns its path."""
    from warehouse.db import connect
    from warehouse.publish import publish_snapshot

    home.mkdir(parents=True, exist_ok=True)
    con = connect(home / "warehouse.duckdb")
    tickers = "[" + ", ".join(f"'{t}'" for t in TICKERS) + "]"
    # Four articles per minute share a publication time; every 100,000 articles, 400 share one (a feed's backfill).
    con.execute(f"""
        INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories, image_url,
            published_at, fetched_at, content_hash, sentiment, sentiment_score, tickers, topics)
        SELECT 'a_' || lpad(lower(to_hex(hash(i))), 16, '0'),
            'Source ' || (i % 25), 'https://feeds.example/' || (i % 25), 'https://news.example/a/' || i,
            'Market update ' || i || ': ' || ({tickers})[1 + (hash(i) % 30)::BIGINT] || ' moves as traders weigh the outlook',
            'Summary of article ' || i || '. ' || repeat('Prices moved and analysts commented on the flows. ', 5),
            [], [], CASE WHEN i % 3 = 0 THEN 'https://img.example/' || i || '.jpg' END,
            TIMESTAMP '2026-01-01' - to_minutes(CASE WHEN i % 100000 < 400 THEN (i - i % 100000) // 4 ELSE i // 4 END),
            TIMESTAMP '2026-01-01', 'h' || i,
            (['positive', 'negative', 'neutral'])[1 + (hash(i * 3) % 3)::BIGINT], ((hash(i * 5) % 2001)::DOUBLE - 1000) / 1000,
            CASE WHEN hash(i * 7) % 100 < 15 THEN ['ETH', ({tickers})[1 + (hash(i) % 30)::BIGINT]]
                 ELSE [({tickers})[1 + (hash(i) % 30)::BIGINT]] END,
            [(['markets', 'regulation', 'defi', 'etf', 'mining'])[1 + (hash(i * 11) % 5)::BIGINT]]
        FROM range({articles}) t(i)
    """)
    con.execute(f"""
        INSERT INTO prediction_events (id, event_title, event_description, source_url, image_url, source_article_id,
            source_published_at, created_at, updated_at, date, options, tags, asset, kind, comparator, threshold,
            currency, resolution_criteria, resolution_source, status)
        SELECT 'pevt_' || substr(upper(md5(i::VARCHAR)) || lower(md5((i + 1)::VARCHAR)), 1, 20),
            'Will ' || ({tickers})[1 + i % 30] || ' close above $' || (1000 + i % 500) || ' on its date?',
            'Derived from article ' || i || '.', 'https://news.example/a/' || i, NULL, 'a_x' || i,
            TIMESTAMP '2026-01-01' - to_milliseconds(i * 1000 + 60000),
            TIMESTAMP '2026-01-01' - to_milliseconds(i * 1000 + i % 7),
            TIMESTAMP '2026-01-01' - to_milliseconds(i * 1000 + i % 7),
            TIMESTAMP '2026-01-01' - to_milliseconds(i * 1000) + INTERVAL 30 DAY,
            ['Yes', 'No'], [({tickers})[1 + i % 30], 'pricemovement'], ({tickers})[1 + i % 30], 'price_threshold',
            'above', 1000 + i % 500, 'USD', 'Yes if the price closes above the threshold on the date.',
            'CoinGecko', 'open'
        FROM range({events}) t(i)
    """)
    path = publish_snapshot(con, home / "snapshots", keep=1)
    con.close()
    (home / "warehouse.duckdb").unlink()  # only the snapshot is needed from here on
    return path


def cursor_at(snapshot: Path, position: int) -> str:
    """The news cursor of the item just before ``position`` (so ``after`` it the page starts at ``position``)."""
    import duckdb

    from warehouse.cursors import encode_news_cursor

    con = duckdb.connect(str(snapshot), read_only=True)
    tag = con.execute("SELECT tag FROM snapshot_info").fetchall()[0][0]
    us, article_id = con.execute(
        "SELECT epoch_us(published_at), id FROM news WHERE pos = ?", [position - 1]
    ).fetchall()[0]
    con.close()
    return encode_news_cursor(us, article_id, tag, position - 1)


def direct_query_ms(snapshot: Path, cursor: str, repeat: int = 200) -> dict[str, float]:
    """The read side alone (no HTTP, no GraphQL): mean ms per page, for the record."""
    import duckdb

    from warehouse.cursors import decode_news_cursor
    from warehouse.read import NewsFilters, PageRequest, SnapshotReader

    con = duckdb.connect(str(snapshot), read_only=True)
    reader = SnapshotReader(con.cursor(), *SnapshotReader.info(con))
    cases = {
        "first": (PageRequest(first=20), NewsFilters()),
        "deep": (PageRequest(first=20, after=decode_news_cursor(cursor)), NewsFilters()),
        "eth": (PageRequest(first=20), NewsFilters(tickers=("ETH",))),
    }
    out = {}
    for name, (req, filters) in cases.items():
        reader.news_page(req, filters)
        t = time.perf_counter()
        for _ in range(repeat):
            reader.news_page(req, filters)
        out[name] = round((time.perf_counter() - t) / repeat * 1000, 3)
    con.close()
    return out


def executor_ms(snapshot: Path, repeat: int = 300) -> dict[str, float]:
    """In process, CPU ms per request for the first page: what the document cache saves, and graphql-core's
    executor against the fast one (same plan, same cached page)."""
    from graphql import parse, validate

    from api.gql_documents import DocumentCache
    from api.gql_exec import Context, coerce_variables, execute_plan, plan_operation
    from api.gql_schema import SCHEMA
    from api.snapshots import Snapshot

    snap = Snapshot(snapshot, cache_size=16)
    variables = {"first": 20}
    prepared = DocumentCache().get(NEWS_QUERY)
    op = prepared.operation(None)
    plan = plan_operation(prepared, op, coerce_variables(op, variables), variables)

    def cpu(f: Any) -> float:
        f()
        t = time.process_time()
        for _ in range(repeat):
            f()
        return round((time.process_time() - t) / repeat * 1000, 3)

    def run(fast: bool) -> None:
        with snap.reader() as reader:
            execute_plan(plan, Context(reader=reader), fast=fast)

    try:
        return {
            "parse_and_validate": cpu(lambda: validate(SCHEMA, parse(NEWS_QUERY))),
            "execute_graphql_core": cpu(lambda: run(False)),
            "execute_fast": cpu(lambda: run(True)),
        }
    finally:
        snap.close()


# --------------------------------------------------------------------------------------------- servers


def api_app() -> Any:
    """The real app with development keys: metering has its own benchmark (bench/metering.py)."""
    from api.access import StaticKeys
    from api.app import create_app
    from warehouse.config import get_settings

    return create_app(get_settings(), access=StaticKeys([KEY]))


def baseline_app() -> Any:
    """A bare Starlette endpoint returning the same 20 items from memory (``uvicorn --factory``)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    body = json.loads(Path(os.environ["CW_BENCH_BASELINE"]).read_text())

    async def endpoint(request: Any) -> JSONResponse:
        await request.body()
        return JSONResponse(body)

    return Starlette(routes=[Route("/baseline", endpoint, methods=["GET", "POST"])])


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    import httpx

    proc = subprocess.Popen(
        [sys.executable, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        try:
            path = "/readyz" if "bench.graphql:api_app" in args else "/baseline"
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_server(proc)
    raise TimeoutError("server did not become ready within 60 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------------------------- load


LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = {body}
"""


def _ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", value.strip())
    if not m:
        raise ValueError(f"unexpected wrk latency {value!r}")
    n = float(m.group(1))
    return {"us": n / 1000, "ms": n, "s": n * 1000}[m.group(2)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(
    url: str, body: dict[str, Any], duration: int, connections: int, workdir: Path, pid: int
) -> dict[str, Any]:
    script = workdir / "post.lua"
    script.write_text(LUA.format(body=json.dumps(json.dumps(body))))
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url]
    cpu_before = cpu_seconds(pid)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    cpu_used = cpu_seconds(pid) - cpu_before
    result: dict[str, Any] = {"requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}
    for pct in ("50", "90", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", out, re.M)
        result[f"p{pct}_ms"] = round(_ms(m.group(1)), 3) if m else None
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    result["non_2xx"] = int(errors.group(1)) if errors else 0
    socket_errors = re.search(r"Socket errors: (.*)", out)
    result["socket_errors"] = socket_errors.group(1) if socket_errors else None
    result["requests"] = int(re.search(r"(\d+) requests in", out).group(1))
    # The server's own CPU per request: what bounds one worker, and steadier than requests/s on a shared machine.
    result["server_cpu_us_per_request"] = round(cpu_used / max(result["requests"], 1) * 1e6, 1)
    return result


def machine() -> dict[str, Any]:
    import duckdb
    import graphql
    import starlette
    import uvicorn

    return {
        "cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(), "duckdb": duckdb.__version__,
        "graphql_core": graphql.__version__, "starlette": starlette.__version__, "uvicorn": uvicorn.__version__,
        "load_average_at_start": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--articles", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--duration", type=int, default=10, help="Seconds of load per scenario.")
    parser.add_argument("--warmup", type=int, default=2, help="Unmeasured seconds of load after each start.")
    parser.add_argument("--connections", type=int, default=8, help="Concurrent connections wrk keeps open.")
    parser.add_argument("--data", type=Path, help="Keep (and reuse) the generated data home here.")
    parser.add_argument("--out", type=Path, help="Also write the JSON here.")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install -y wrk")
    import httpx

    from warehouse.published import current_snapshot

    tmp = Path(tempfile.mkdtemp(prefix="cw-bench-"))
    home = args.data or tmp / "home"
    report: dict[str, Any] = {"benchmark": "graphql", "machine": machine(), "articles": args.articles,
                              "events": args.events, "duration_s": args.duration, "connections": args.connections}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        snapshot = current_snapshot(home / "snapshots") if (home / "snapshots").exists() else None
        t = time.perf_counter()
        if snapshot is None:
            snapshot = generate_snapshot(home, args.articles, args.events)
            report["generate_and_publish_s"] = round(time.perf_counter() - t, 1)
        report["snapshot_mb"] = round(snapshot.stat().st_size / 1e6, 1)
        deep_position = min(900_000, args.articles - 20)
        deep_cursor = cursor_at(snapshot, deep_position)
        report["read_side_ms"] = direct_query_ms(snapshot, deep_cursor)
        report["in_process_cpu_ms"] = executor_ms(snapshot)

        env = {**os.environ, "CRYPTOWIRE_HOME": str(home), "PYTHONPATH": str(ROOT)}
        from pipeline.commands.serve import log_config

        log_file = tmp / "log_config.json"
        log_file.write_text(json.dumps(log_config()))

        def start_api(extra_env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
            port = free_port()
            proc = start_server(
                ["-m", "uvicorn", "bench.graphql:api_app", "--factory", "--host", "127.0.0.1", "--port", str(port),
                 "--workers", "1", "--log-config", str(log_file)], {**env, **extra_env}, port)
            procs.append(proc)
            return proc, f"http://127.0.0.1:{port}/crypto-news/{KEY}"

        scenarios = {
            "first_page": {"query": NEWS_QUERY, "variables": {"first": 20}},
            "deep_page_900k": {"query": NEWS_QUERY, "variables": {"first": 20, "after": deep_cursor}},
            "tickers_eth": {"query": NEWS_QUERY, "variables": {"first": 20, "tickers": ["ETH"]}},
            "events_first_page": {"query": EVENTS_QUERY, "variables": {"first": 20}},
        }
        results: dict[str, Any] = {}
        first_body = None
        # The API as configured by default (pages of an immutable snapshot cached in memory), then with the page
        # cache off: every request runs its DuckDB query.
        for variant, extra_env in (("api", {}), ("api_page_cache_off", {"CRYPTOWIRE_PAGE_CACHE_SIZE": "0"})):
            proc, api_url = start_api(extra_env)
            for name, body in scenarios.items():  # each must answer 20 items before it is measured
                r = httpx.post(api_url, json=body, timeout=30)
                data = r.json()
                if r.status_code != 200:
                    raise RuntimeError(f"{name}: unexpected answer {r.status_code} {str(data)[:500]}")
                root = data["data"]["cryptoNews" if "cryptoNews" in body["query"] else "predictionEvents"]
                if len(root["edges"]) != 20:
                    raise RuntimeError(f"{name}: {len(root['edges'])} edges instead of 20")
                if name == "first_page":
                    first_body = data
            # A freshly started process is still warming up (first pages cached, allocator and caches growing):
            # a short unmeasured run first, so that the figures are the steady state a running server shows.
            run_wrk(api_url, scenarios["first_page"], args.warmup, args.connections, tmp, proc.pid)
            results[variant] = {
                name: run_wrk(api_url, body, args.duration, args.connections, tmp, proc.pid)
                for name, body in scenarios.items()
            }
            stop_server(proc)

        baseline_file = tmp / "baseline.json"
        baseline_file.write_text(json.dumps(first_body))
        base_port = free_port()
        base_proc = start_server(
            ["-m", "uvicorn", "bench.graphql:baseline_app", "--factory", "--host", "127.0.0.1", "--port",
             str(base_port), "--workers", "1", "--log-config", str(log_file)], {**env, "CW_BENCH_BASELINE": str(baseline_file)},
            base_port)
        procs.append(base_proc)
        run_wrk(f"http://127.0.0.1:{base_port}/baseline", scenarios["first_page"], args.warmup, args.connections, tmp,
                base_proc.pid)
        results["baseline"] = run_wrk(f"http://127.0.0.1:{base_port}/baseline", scenarios["first_page"],
                                      args.duration, args.connections, tmp, base_proc.pid)
        report["results"] = results
        base = results["baseline"]
        report["ratios"] = {}
        for variant in ("api", "api_page_cache_off"):
            first, deep = results[variant]["first_page"], results[variant]["deep_page_900k"]
            report["ratios"][variant] = {
                "deep_vs_first_p50": round(deep["p50_ms"] / first["p50_ms"], 3),
                "deep_vs_first_throughput": round(first["requests_per_s"] / deep["requests_per_s"], 3),
                "first_vs_baseline_throughput": round(first["requests_per_s"] / base["requests_per_s"], 3),
                "first_vs_baseline_server_cpu": round(
                    first["server_cpu_us_per_request"] / base["server_cpu_us_per_request"], 3),
                "deep_vs_first_server_cpu": round(
                    deep["server_cpu_us_per_request"] / first["server_cpu_us_per_request"], 3),
            }
        first = results["api"]["first_page"]
        report["goals"] = {
            "first_page_1000_rps": first["requests_per_s"] >= 1000,
            "first_page_p99_25ms": first["p99_ms"] is not None and first["p99_ms"] <= 25,
            "deep_within_1.2x": report["ratios"]["api"]["deep_vs_first_p50"] <= 1.2,
            "deep_within_1.2x_page_cache_off": report["ratios"]["api_page_cache_off"]["deep_vs_first_p50"] <= 1.2,
        }
        report["load_average_at_end"] = os.getloadavg()
    finally:
        for proc in procs:
            stop_server(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
