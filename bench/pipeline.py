"""Throughput of each pipeline stage on this machine, for docs/scaling.md.

    .venv/bin/python bench/pipeline.py [--feeds 40]

Generates N feeds of about 50 KB (the bench/ingest.py generator) as local files, then runs each stage the way the
assets do, on a fresh warehouse, and prints JSON: seconds and items per second per stage.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ingest as ingest_bench  # noqa: E402  (bench/ingest.py: the feed generator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feeds", type=int, default=40, help="number of generated feeds (about 50 items each)")
    args = parser.parse_args()

    from models.sentiment import article_text, load_model
    from models.tagging import get_tagger, load_registry
    from pipeline.enrich import load_crypto_assets, score, tag
    from pipeline.events import ArticleIn, derive_events
    from pipeline.ingest import Feed, ingest
    from warehouse import db
    from warehouse.config import Settings
    from warehouse.events import merge_events
    from warehouse.publish import publish_snapshot

    stages: dict[str, dict[str, float]] = {}

    def timed(name: str, items_of, fn):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - start
        items = items_of(result)
        stages[name] = {"seconds": round(seconds, 3), "items": items, "per_second": round(items / seconds, 1)}
        return result

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        feeds = []
        for i in range(args.feeds):
            path = root / f"feed-{i}.xml"
            path.write_bytes(ingest_bench.make_feed(i, args.feeds))
            feeds.append(Feed(name=f"bench {i}", url=path.as_uri()))
        settings = Settings(home=root / "home")
        con = db.connect(root / "w.duckdb")
        timed("ingest", lambda r: r.new, lambda: ingest(con, feeds, settings))
        load_crypto_assets(con, load_registry())
        con.execute("INSERT INTO articles BY NAME SELECT * EXCLUDE (guid, date_inferred, updated_at) FROM raw_articles")
        model = timed("sentiment_load", lambda m: 1, lambda: load_model(cache_dir=settings.models_dir))  # a first build
        timed("sentiment", lambda n: n, lambda: score(con, model, article_text, db.utcnow()))
        timed("tagging", lambda n: n, lambda: tag(con, get_tagger(), db.utcnow()))
        names = {a.symbol: a.name for a in load_registry()}
        rows = con.execute(
            "SELECT id, title, summary, url, image_url, source_name, published_at, tickers, topics FROM articles"
        ).fetchall()
        inputs = [
            ArticleIn(id=r[0], title=r[1], summary=r[2], url=r[3], image_url=r[4], source_name=r[5],
                      published_at=r[6], tickers=tuple(r[7] or ()), topics=tuple(r[8] or ()))
            for r in rows
        ]
        candidates = timed("events_derive", lambda c: len(inputs), lambda: derive_events(inputs, names))
        timed("events_merge", lambda r: len(candidates), lambda: merge_events(con, candidates, db.utcnow()))
        timed("snapshot_publish", lambda p: len(rows), lambda: publish_snapshot(con, root / "snapshots"))
        con.close()

    print(json.dumps({
        "bench": "pipeline stages",
        "feeds": args.feeds,
        "stages": stages,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
    }, indent=2))


if __name__ == "__main__":
    main()
