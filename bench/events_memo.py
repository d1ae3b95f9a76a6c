"""The ``prediction_events`` step with the derivation memo: a run with nothing new, and one with 1 % new articles,
against the full pass every run made before (the memo's first run), on one warehouse in the same run.

    .venv/bin/python bench/events_memo.py [--articles 50000]

The warehouse holds copies of every labelled article bench/events.py reads (models/eval/events.jsonl and
events_unseen.jsonl: real headlines and summaries, tagged once), each copy with its own id and a publication time shifted by whole days. Each step is
what the asset does: derive (the memo's stale articles only) and merge into ``prediction_events``. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def labelled() -> list[dict]:
    """bench/events.py's articles (the labelled ones, tagged once), as rows of ``articles``."""
    sys.path.insert(0, str(ROOT / "bench"))
    from events import articles  # bench/events.py

    return [{"title": a["title"], "summary": a["summary"], "source_name": a["source"] or "Bench Wire",
             "published_at": datetime.fromisoformat(a["published_at"]).replace(tzinfo=None),
             "tickers": a["tickers"], "topics": a["topics"]} for a in articles()]


def copies(items: list[dict], n: int, start: int) -> list[dict]:
    rows = []
    for i in range(start, start + n):
        item = items[i % len(items)]
        rows.append({**item, "id": f"a_bench{i:09d}", "url": f"https://bench.example/{i}",
                     "published_at": item["published_at"] + timedelta(days=i // len(items))})
    return rows


def put(con, rows: list[dict]) -> None:
    import pyarrow as pa

    con.register("_bench", pa.Table.from_pylist(rows))
    con.execute(
        "INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories, published_at, "
        "fetched_at, content_hash, tickers, topics) SELECT id, source_name, 'https://bench.example/rss', url, title, "
        "summary, [], [], published_at, published_at, id, tickers, topics FROM _bench")
    con.unregister("_bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--articles", type=int, default=50_000)
    args = parser.parse_args()

    from models.tagging import load_registry
    from pipeline.events.memo import derive_and_merge
    from pipeline.events.reference import default_reference
    from warehouse.db import connect, utcnow

    names = {a.symbol: a.name for a in load_registry()}
    items = labelled()
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "warehouse.duckdb")
        put(con, copies(items, args.articles, 0))

        def step() -> dict:
            started, cpu = time.perf_counter(), time.process_time()
            derivation, _ = derive_and_merge(con, names, utcnow())  # what the asset runs
            return {"seconds": round(time.perf_counter() - started, 3), "cpu_s": round(time.process_time() - cpu, 3),
                    "derived": derivation.derived, "events": len(derivation.candidates), "why": derivation.why}

        full = step()
        nothing_new = step()
        put(con, copies(items, args.articles // 100, args.articles))
        one_percent = step()
        # the next day's reference price of every asset the price asset fetches (those of the reference table)
        last = max(item["published_at"] for item in copies(items, args.articles // 100, args.articles)).date()
        tickers = sorted(default_reference().coingecko_ids())
        con.executemany("INSERT INTO asset_prices VALUES (?, ?, 1.0, 'bench', now())",
                        [(t, last + timedelta(days=1)) for t in tickers])
        new_price = step()
        con.close()
    print(json.dumps({
        "bench": "events_memo", "at": datetime.now().isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_1m": os.getloadavg()[0]},
        "articles": args.articles, "labelled_items": len(items),
        "full_pass": full, "nothing_new": nothing_new, "one_percent_new": one_percent, "new_day_prices": new_price,
        "ratio_nothing_new_to_full": round(nothing_new["seconds"] / full["seconds"], 4),
        "ratio_one_percent_to_full": round(one_percent["seconds"] / full["seconds"], 4),
    }, indent=2))


if __name__ == "__main__":
    main()
