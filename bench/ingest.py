"""Ingestion speed: 200 feeds of about 50 KB served from 127.0.0.1, cold run, warm run, naive baseline.

    .venv/bin/python bench/ingest.py [--feeds 200] [--repeat 3] [--out FILE]

A separate process serves the generated feeds (RSS 2.0 with HTML descriptions, content:encoded,
media:content, tracking parameters; a tenth of the articles appear in two feeds) with ETags, answering
304 to a matching If-None-Match. Measured in the same run, wall-clock:

* naive — ``for url in urls: feedparser.parse(url)`` (fetch and parse, nothing stored);
* cold  — ``ingest()`` into an empty warehouse (fetch, parse, normalise, merge, commit);
* warm  — ``ingest()`` again on that warehouse: every feed answers 304.

The three are interleaved (naive, cold, warm, naive, ...) and medians reported, so that a machine shared
with other work loads both sides alike; the client's CPU time is reported beside wall time.

Prints one JSON document (figures and machine info). Goals: cold at least 5x faster than naive; warm < 1 s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import socket
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from xml.sax.saxutils import escape

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ASSETS = [
    "Bitcoin",
    "Ether",
    "Solana",
    "XRP",
    "Cardano",
    "Dogecoin",
    "Avalanche",
    "Polygon",
    "Chainlink",
    "Toncoin",
]
TICKERS = ["BTC", "ETH", "SOL", "XRP", "ADA", "DOGE", "AVAX", "POL", "LINK", "TON"]
VERBS = ["rallies", "slides", "holds", "breaks out", "tests support", "extends gains", "retreats", "stalls"]
EVENTS = [
    "ETF decision",
    "network upgrade",
    "exchange listing",
    "court ruling",
    "token unlock",
    "Fed meeting",
]
CATEGORIES = [
    "Markets",
    "Policy",
    "DeFi",
    "Business",
    "Tech",
    "Regulation",
    "Layer 2",
    "Stablecoins",
    "Mining",
]
WORDS = (
    "analysts traders said market volume liquidity funding rates open interest whales exchange inflows "
    "outflows derivatives spot demand supply resistance support level weekly close momentum sentiment "
    "institutional investors custody regulators approval filing deadline mainnet validators staking yields"
).split()
TARGET_BYTES = 50_000


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _item(rng: random.Random, article: int, when: datetime) -> str:
    a = article % len(ASSETS)
    price = rng.randint(1, 120_000)
    title = f"{ASSETS[a]} {rng.choice(VERBS)} near ${price:,} ahead of {rng.choice(EVENTS)}"
    link = f"https://news{article % 7}.example.com/markets/{when:%Y/%m/%d}/story-{article}?utm_source=rss&utm_medium=feed"
    paras = "".join(f"<p>{escape(_sentence(rng, rng.randint(18, 30)))}</p>" for _ in range(6))
    desc = f"<p>{escape(TICKERS[a])} &amp; friends: {escape(_sentence(rng, 28))}</p>"
    cats = "".join(f"<category><![CDATA[{c}]]></category>" for c in rng.sample(CATEGORIES, 3))
    return (
        f"<item><title><![CDATA[{title}]]></title><link>{escape(link)}</link>"
        f'<guid isPermaLink="false">story-{article}</guid><pubDate>{format_datetime(when)}</pubDate>'
        f"<dc:creator>Reporter {article % 23}</dc:creator>{cats}"
        f"<description><![CDATA[{desc}]]></description>"
        f'<content:encoded><![CDATA[<figure><img src="https://img.example.com/{article}.jpg"></figure>{paras}]]></content:encoded>'
        f'<media:content url="https://img.example.com/{article}.jpg?w=1200&amp;h=630" medium="image" type="image/jpeg"/>'
        "</item>"
    )


def make_feed(index: int, n_feeds: int) -> bytes:
    """About 50 KB of RSS; a tenth of the articles also appear in the next feed."""
    head = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0" '
        'xmlns:content="http://purl.org/rss/1.0/modules/content/" xmlns:dc="http://purl.org/dc/elements/1.1/" '
        'xmlns:media="http://search.yahoo.com/mrss/"><channel>'
        f"<title>Bench source {index}</title><link>https://source{index}.example.com/</link><language>en</language>"
    )
    parts, size, k = [head], len(head), 0
    while size < TARGET_BYTES - 400:
        # Article ids: feed-local ones, and every 10th item borrowed from the previous feed (the same
        # article, byte for byte, so it is stored once).
        article = ((index - 1) % n_feeds) * 1000 + k - 1 if k % 10 == 9 else index * 1000 + k
        when = datetime(2025, 3, 1, tzinfo=UTC) + timedelta(
            hours=article // 1000, minutes=-37 * (article % 1000)
        )
        piece = _item(random.Random(article), article, when)
        parts.append(piece)
        size += len(piece)
        k += 1
    parts.append("</channel></rss>\n")
    return "".join(parts).encode()


def _serve(n_feeds: int, conn) -> None:  # type: ignore[no-untyped-def]
    docs = {f"/feed/{i}.xml": make_feed(i, n_feeds) for i in range(n_feeds)}
    etags = {path: f'"{hash(body) & 0xFFFFFFFF:08x}"' for path, body in docs.items()}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            body = docs.get(self.path)
            if body is None:
                status, body, extra = 404, b"not found", ""
            elif self.headers.get("If-None-Match") == etags[self.path]:
                status, body, extra = 304, b"", f"ETag: {etags[self.path]}\r\n"
            else:
                status, extra = (
                    200,
                    f"ETag: {etags[self.path]}\r\nContent-Type: application/rss+xml; charset=utf-8\r\n",
                )
            reason = {200: "OK", 304: "Not Modified", 404: "Not Found"}[status]
            head = f"HTTP/1.1 {status} {reason}\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode()
            self.wfile.write(head + body)  # one write: no Nagle / delayed-ACK stall between header and body

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256

    server = Server(("127.0.0.1", 0), Handler)
    conn.send((server.server_address[1], sum(len(b) for b in docs.values())))
    server.serve_forever(poll_interval=0.05)


def machine() -> dict:
    import duckdb
    import feedparser
    import httpx
    import polars

    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "load_avg_1m": os.getloadavg()[0],
        "duckdb": duckdb.__version__,
        "httpx": httpx.__version__,
        "feedparser": feedparser.__version__,
        "polars": polars.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--feeds", type=int, default=200, help="number of feeds (default 200)")
    parser.add_argument("--repeat", type=int, default=3, help="cold and warm runs, each on a fresh warehouse")
    parser.add_argument("--naive-repeat", type=int, default=3, help="naive feedparser loops (interleaved)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    import feedparser

    from pipeline.ingest import Feed, ingest
    from warehouse.config import Settings
    from warehouse.db import connect

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(args.feeds, child), daemon=True)
    proc.start()
    try:
        port, total_bytes = parent.recv()
        urls = [f"http://127.0.0.1:{port}/feed/{i}.xml" for i in range(args.feeds)]
        feeds = [Feed(f"Bench {i}", url) for i, url in enumerate(urls)]

        naive, naive_cpu, naive_items = [], [], 0
        cold, warm, cold_cpu, warm_cpu, rows, timings = [], [], [], [], 0, {}
        with tempfile.TemporaryDirectory() as tmp:
            # Interleaved (naive, cold, warm, naive, ...) so that both sides see the same machine load.
            for i in range(max(args.repeat, args.naive_repeat)):
                if i < args.naive_repeat:
                    t0, c0 = time.perf_counter(), time.process_time()
                    parsed = [feedparser.parse(url) for url in urls]
                    naive.append(time.perf_counter() - t0)
                    naive_cpu.append(time.process_time() - c0)
                    naive_items = sum(len(d.entries) for d in parsed)
                    assert all(d.get("status") == 200 for d in parsed), "naive loop: a feed was not fetched"
                if i >= args.repeat:
                    continue
                home = Path(tmp) / f"run{i}"
                settings = Settings(home=home)
                con = connect(home / "warehouse.duckdb")
                t0, c0 = time.perf_counter(), time.process_time()
                first = ingest(con, feeds, settings)
                cold.append(time.perf_counter() - t0)
                cold_cpu.append(time.process_time() - c0)
                t0, c0 = time.perf_counter(), time.process_time()
                second = ingest(con, feeds, settings)
                warm.append(time.perf_counter() - t0)
                warm_cpu.append(time.process_time() - c0)
                rows = con.execute("SELECT count(*) FROM raw_articles").fetchall()[0][0]
                con.close()
                assert not first.failed, [r.error for r in first.failed][:3]
                assert all(r.not_modified for r in second.results), "warm run: not every feed answered 304"
                assert second.new == second.updated == 0
                timings = {
                    "cold": {k: round(v) for k, v in first.timings_ms.items()},
                    "warm": {k: round(v) for k, v in second.timings_ms.items()},
                }
    finally:
        proc.terminate()
        proc.join(5)

    naive_s, cold_s, warm_s = statistics.median(naive), statistics.median(cold), statistics.median(warm)
    out = {
        "benchmark": "ingest",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/ingest.py " + " ".join(sys.argv[1:]),
        "feeds": args.feeds,
        "bytes_total": total_bytes,
        "bytes_per_feed": round(total_bytes / args.feeds),
        "items_total": naive_items,
        "rows_stored": rows,
        "naive_feedparser_s": [round(x, 3) for x in naive],
        "cold_s": [round(x, 3) for x in cold],
        "warm_304_s": [round(x, 3) for x in warm],
        "median": {"naive_s": round(naive_s, 3), "cold_s": round(cold_s, 3), "warm_s": round(warm_s, 3)},
        # CPU time of this (client) process: steadier than wall time on a shared machine.
        "client_cpu_median_s": {
            "naive": round(statistics.median(naive_cpu), 3),
            "cold": round(statistics.median(cold_cpu), 3),
            "warm": round(statistics.median(warm_cpu), 3),
        },
        "cold_speedup_vs_naive": round(naive_s / cold_s, 2),
        "warm_speedup_vs_naive": round(naive_s / warm_s, 2),
        "last_run_breakdown_ms": timings,
        "goals": {"cold_at_least_5x_naive": naive_s / cold_s >= 5, "warm_under_1s": warm_s < 1.0},
        "machine": machine(),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
