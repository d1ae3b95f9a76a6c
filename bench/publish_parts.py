"""Publishing partitioned serving snapshots (warehouse/parts/) against the full copy, as history grows.

    .venv/bin/python bench/publish_parts.py [--sizes 100000,1000000] [--new 1000] [--rounds 5] [--pages 300]
                                            [--out FILE]      (defaults: 100000,1000000, 1000, 5, 300)

For each history size N (articles):

1. Generates a warehouse in DuckDB SQL: N articles, four a minute back from ``NOW`` (2026-01-15 12:00 UTC; so
   1,000,000 articles span 174 days and 100,000 span 17: the same daily volume, a longer history), with tickers
   (``article_tickers`` with per-asset sentiment), stories (every article in one; one in five joins the story of
   the article before it), N/10 prediction events over the same time, and ``asset_sentiment`` computed by the
   pipeline's own ``refresh_asset_sentiment``.
2. Publishes a first set at ``NOW`` + 30 min (every part built; not timed: the history's parts already published).
3. ``--rounds`` times, the sizes in turns (round 1 of each, then round 2, ...: a change of the machine's load
   during the run weighs on both alike): adds ``--new`` articles in the current hour (one in five joining a story of the last hours,
   which updates that story), refreshes ``asset_sentiment`` (the pipeline's step before publishing; not timed),
   and times ``publish_set`` (the next set: fingerprints, changed and head parts, manifest, CURRENT, pruning).
4. Times the old full copy (``publish_snapshot``) of the same warehouse once.
5. Times reading pages from both (the read side as the API calls it, page cache off): ``cryptoNews(first: 20)``,
   the page after a cursor 90 % deep, and ``tickers: ["ETH"]``; p50 and p99 over ``--pages`` calls each.

Prints JSON: per size the median publish time of the next set, the full copy's time, the page latencies; the
ratio of the next-set publish at the largest size to the smallest (the goal: at most 1.5 with 1,000 new articles
at 1,000,000 vs 100,000), and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NOW = datetime(2026, 1, 15, 12, 30)  # the publish time: the head is 12:00-13:00 that day
END = datetime(2026, 1, 15, 12, 0)  # the history's newest article
TICKERS = [
    "BTC", "ETH", "SOL", "XRP", "ADA", "DOGE", "DOT", "AVAX", "LINK", "LTC", "BNB", "TRX", "TON", "SHIB", "ATOM",
    "UNI", "XLM", "NEAR", "APT", "ARB", "OP", "SUI", "PEPE", "FIL", "ICP", "HBAR", "INJ", "AAVE", "MKR", "POL",
]
T = "[" + ", ".join(f"'{t}'" for t in TICKERS) + "]"

ARTICLES_SQL = """
INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories, image_url,
    published_at, fetched_at, content_hash, sentiment, sentiment_score, tickers, topics, enriched_at, tagged_at,
    model_version, tagger_version)
SELECT '{prefix}' || lpad(lower(to_hex(hash(i + {salt}))), 16, '0'),
    'Source ' || (i % 25), 'https://feeds.example/' || (i % 25), 'https://news.example/{prefix}' || i,
    'Market update ' || i || ': ' || ({T})[1 + (hash(i) % 30)::BIGINT] || ' moves as traders weigh the outlook',
    'Summary of article ' || i || '. ' || repeat('Prices moved and analysts commented on the flows. ', 5),
    [], [], CASE WHEN i % 3 = 0 THEN 'https://img.example/' || i || '.jpg' END,
    {published}, {published}, 'h' || i,
    (['positive', 'negative', 'neutral'])[1 + (hash(i * 3) % 3)::BIGINT], ((hash(i * 5) % 2001)::DOUBLE - 1000) / 1000,
    CASE WHEN hash(i * 7) % 100 < 15 AND ({T})[1 + (hash(i) % 30)::BIGINT] <> 'ETH'
         THEN ['ETH', ({T})[1 + (hash(i) % 30)::BIGINT]]
         ELSE [({T})[1 + (hash(i) % 30)::BIGINT]] END,
    [(['markets', 'regulation', 'defi', 'etf', 'mining'])[1 + (hash(i * 11) % 5)::BIGINT]],
    {published}, {published}, 'bench', 'bench'
FROM range({n}) t(i)
"""


def generate(con: Any, n: int) -> None:
    from warehouse.sentiment import refresh_asset_sentiment

    published = f"(TIMESTAMP '{END}' - to_seconds(i * 15))"  # four a minute, newest first
    con.execute(ARTICLES_SQL.format(prefix="a_", salt=0, T=T, published=published, n=n))
    _children(con, "a_")
    events = max(1, n // 10)
    con.execute(f"""
        INSERT INTO prediction_events (id, event_title, event_description, source_url, image_url, source_article_id,
            source_published_at, created_at, updated_at, date, options, tags, asset, kind, comparator, threshold,
            currency, resolution_criteria, resolution_source, status)
        SELECT 'pevt_' || substr(upper(md5(i::VARCHAR)) || lower(md5((i + 1)::VARCHAR)), 1, 20),
            'Will ' || ({T})[1 + i % 30] || ' close above $' || (1000 + i % 500) || ' on its date?',
            'Derived from article ' || i || '.', 'https://news.example/a/' || i, NULL, 'a_x' || i,
            TIMESTAMP '{END}' - to_seconds(i * 150) - INTERVAL 1 MINUTE,
            TIMESTAMP '{END}' - to_milliseconds(i * 150000 + i % 7),
            TIMESTAMP '{END}' - to_milliseconds(i * 150000 + i % 7),
            TIMESTAMP '{END}' + INTERVAL 30 DAY - to_seconds(i * 150),
            ['Yes', 'No'], [({T})[1 + i % 30], 'pricemovement'], ({T})[1 + i % 30], 'price_threshold',
            'above', 1000 + i % 500, 'USD', 'Yes if the price closes above the threshold on the date.',
            'CoinGecko', 'open'
        FROM range({events}) t(i)
    """)
    refresh_asset_sentiment(con)


def _children(con: Any, prefix: str) -> None:
    """article_tickers and stories for the articles whose id starts with ``prefix`` and have none yet."""
    con.execute(f"""
        INSERT INTO article_tickers (article_id, ticker, salience, in_title, sentiment, sentiment_score)
        SELECT id, unnest(tickers), 1.0, true, CASE sentiment WHEN 'positive' THEN 'Positive'
               WHEN 'negative' THEN 'Negative' ELSE 'Neutral' END, sentiment_score
        FROM articles WHERE id LIKE '{prefix}%' AND id NOT IN (SELECT article_id FROM article_tickers)
    """)
    # In publication order, one article in five joins the story of the article before it; the rest start one.
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _grouped AS
        WITH a AS (SELECT id, published_at, source_name, row_number() OVER (ORDER BY published_at, id) AS k
                   FROM articles WHERE id LIKE '{prefix}%' AND id NOT IN (SELECT article_id FROM story_articles)),
        b AS (SELECT *, lag(id) OVER (ORDER BY k) AS prev FROM a)
        SELECT id, published_at, source_name, 'st_' || substr(CASE WHEN k % 5 = 0 AND prev IS NOT NULL THEN prev
               ELSE id END, 3) AS story_id FROM b
    """)
    con.execute("""INSERT INTO story_articles SELECT id, story_id, published_at, published_at FROM _grouped""")
    con.execute("""
        INSERT INTO stories
        SELECT g.story_id, arg_min(a.title, a.published_at), min(a.published_at), max(a.published_at), count(*),
               count(DISTINCT a.source_name), avg(a.sentiment_score), [], [], max(a.published_at)
        FROM _grouped g JOIN articles a ON a.id = g.id GROUP BY g.story_id
    """)


def add_new(con: Any, n_new: int, round_no: int) -> None:
    """``n_new`` articles in the current hour; one in five joins a story of the hours before (updating it)."""
    from warehouse.sentiment import refresh_asset_sentiment

    prefix = f"n{round_no}_"
    base = END + timedelta(minutes=1 + round_no * 9)
    published = f"(TIMESTAMP '{base}' + to_milliseconds(i * 500))"
    con.execute(ARTICLES_SQL.format(prefix=prefix, salt=10_000_000 * (round_no + 1), T=T, published=published,
                                    n=n_new))
    con.execute(f"""
        INSERT INTO article_tickers (article_id, ticker, salience, in_title, sentiment, sentiment_score)
        SELECT id, unnest(tickers), 1.0, true, 'Neutral', sentiment_score FROM articles WHERE id LIKE '{prefix}%'
    """)
    # Joining: story of a random recent article (published in the 6 hours before), else its own story.
    stamp = NOW + timedelta(seconds=round_no)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _joins AS
        WITH recent AS (SELECT story_id, row_number() OVER (ORDER BY article_id) AS r FROM story_articles
                        WHERE published_at >= TIMESTAMP '{END}' - INTERVAL 6 HOUR AND published_at <= TIMESTAMP '{END}'),
        n AS (SELECT id, published_at, row_number() OVER (ORDER BY id) AS r FROM articles WHERE id LIKE '{prefix}%')
        SELECT n.id, n.published_at, coalesce(CASE WHEN n.r % 5 = 0 THEN
               (SELECT story_id FROM recent WHERE recent.r = 1 + (n.r * 7919) % (SELECT count(*) FROM recent)) END,
               'st_' || substr(n.id, 3)) AS story_id FROM n
    """)
    con.execute(f"INSERT INTO story_articles SELECT id, story_id, published_at, TIMESTAMP '{stamp}' FROM _joins")
    con.execute(f"""
        INSERT INTO stories
        SELECT j.story_id, any_value(a.title), min(a.published_at), max(a.published_at), count(*), 1,
               avg(a.sentiment_score), [], [], TIMESTAMP '{stamp}'
        FROM _joins j JOIN articles a ON a.id = j.id WHERE j.story_id NOT IN (SELECT id FROM stories)
        GROUP BY j.story_id
    """)
    con.execute(f"""
        UPDATE stories SET articles = stories.articles + g.n, last_seen = g.last, updated_at = TIMESTAMP '{stamp}'
        FROM (SELECT story_id, count(*) AS n, max(published_at) AS last FROM _joins GROUP BY story_id) g
        WHERE stories.id = g.story_id AND stories.updated_at < TIMESTAMP '{stamp}'
    """)
    refresh_asset_sentiment(con)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def page_latency(path: Path, pages: int) -> dict[str, Any]:
    from warehouse.cursors import decode_news_cursor
    from warehouse.parts import open_snapshot
    from warehouse.read import NewsFilters, PageCache, PageRequest, SnapshotReader

    con, layout = open_snapshot(path)
    try:
        tag, articles, events = SnapshotReader.info(con)
        cur = con.cursor()
        reader = SnapshotReader(cur, tag, articles, events, PageCache(0), layout)
        deep_pos = int(articles * 0.9)
        row = reader.news_page(PageRequest(first=1, after=None), NewsFilters(), need_previous=False)
        # the cursor of the row just before the deep page: page there by a plain keyset bound from SQL
        us, aid = con.execute("SELECT epoch_us(published_at), id FROM news WHERE pos = ?", [deep_pos - 1]).fetchall()[0]
        from warehouse.cursors import encode_news_cursor

        deep = decode_news_cursor(encode_news_cursor(us, aid, "0", 0))  # a foreign cursor: looked up by key
        cases = {
            "first_page": (PageRequest(first=20), NewsFilters()),
            "deep_page_90pct": (PageRequest(first=20, after=deep), NewsFilters()),
            "tickers_eth": (PageRequest(first=20), NewsFilters(tickers=("ETH",))),
        }
        out: dict[str, Any] = {}
        for name, (req, filters) in cases.items():
            for _ in range(20):
                reader.news_page(req, filters)
            times = []
            for _ in range(pages):
                t0 = time.perf_counter()
                page = reader.news_page(req, filters)
                times.append((time.perf_counter() - t0) * 1000)
            assert len(page.rows) == 20, (name, len(page.rows))
            out[name] = {"p50_ms": round(_pct(times, 0.5), 3), "p99_ms": round(_pct(times, 0.99), 3)}
        assert row.rows
        return out
    finally:
        con.close()


class Size:
    """One history size: its warehouse, its sets, and what was measured."""

    def __init__(self, n: int, work: Path) -> None:
        from warehouse.db import connect
        from warehouse.parts import publish_set

        self.n = n
        self.home = work / f"n{n}"
        self.home.mkdir(parents=True)
        self.con = connect(self.home / "warehouse.duckdb")
        t0 = time.perf_counter()
        generate(self.con, n)
        self.generate_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.last = publish_set(self.con, self.home / "snapshots", keep=3, now=NOW)
        self.first_set_s = time.perf_counter() - t0
        self.times: list[float] = []
        self.rebuilt: list[list[str]] = []

    def round(self, r: int, n_new: int) -> None:
        from warehouse.parts import publish_set, read_manifest

        add_new(self.con, n_new, r)
        before = {e["period"]: e["name"] for e in read_manifest(self.last)["parts"]}
        t0 = time.perf_counter()
        self.last = publish_set(self.con, self.home / "snapshots", keep=3, now=NOW)
        self.times.append(time.perf_counter() - t0)
        after = read_manifest(self.last)["parts"]
        self.rebuilt.append(sorted(e["period"] for e in after if before.get(e["period"]) != e["name"]))

    def full_copy(self) -> None:
        from warehouse.publish import publish_snapshot

        t0 = time.perf_counter()
        self.single = publish_snapshot(self.con, self.home / "full", keep=1)
        self.full_s = time.perf_counter() - t0

    def report(self, pages: int) -> dict[str, Any]:
        from warehouse.parts import read_manifest

        rows = self.con.execute("SELECT count(*) FROM articles").fetchall()[0][0]
        self.con.close()
        manifest = read_manifest(self.last)
        sizes = sum((self.home / "snapshots" / e["name"]).stat().st_size for e in manifest["parts"])
        return {
            "articles": rows,
            "history_days": round(self.n / 4 / 60 / 24, 1),
            "generate_s": round(self.generate_s, 2),
            "first_set_publish_s": round(self.first_set_s, 3),
            "next_set_publish_s": [round(t, 3) for t in self.times],
            "next_set_publish_median_s": round(statistics.median(self.times), 3),
            "parts_in_set": len(manifest["parts"]),
            "parts_rebuilt_per_round": self.rebuilt,
            "set_bytes": sizes,
            "full_copy_publish_s": round(self.full_s, 3),
            "full_copy_bytes": self.single.stat().st_size,
            "full_copy_rows_per_s": round(rows / self.full_s),
            "page_latency_set": page_latency(self.last, pages),
            "page_latency_single_file": page_latency(self.single, pages),
        }


def machine() -> dict[str, Any]:
    import duckdb

    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(next(line for line in f if line.startswith("MemTotal")).split()[1]) // 1024
    except (OSError, StopIteration):
        pass
    return {
        "cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(), "duckdb": duckdb.__version__, "mem_mb": mem,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--out")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    report: dict[str, Any] = {"benchmark": "publish_parts", "new_articles": args.new, "rounds": args.rounds,
                              "now": NOW.isoformat(), "machine": machine(), "load_average_at_start": os.getloadavg(),
                              "started": datetime.now().astimezone().isoformat(timespec="seconds"), "sizes": {}}
    work = Path(tempfile.mkdtemp(prefix="cw-publish-parts-"))
    try:
        # The sizes are measured in turns (round 1 of each size, then round 2, ...), so that a change in the
        # machine's load during the run weighs on every size alike.
        runs = [Size(n, work) for n in sizes]
        for r in range(args.rounds):
            for run in runs:
                run.round(r, args.new)
        for run in runs:
            run.full_copy()
        for run in runs:
            report["sizes"][str(run.n)] = run.report(args.pages)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    small, large = report["sizes"][str(sizes[0])], report["sizes"][str(sizes[-1])]
    report["next_set_ratio_largest_to_smallest"] = round(
        large["next_set_publish_median_s"] / small["next_set_publish_median_s"], 3)
    report["full_copy_ratio_largest_to_smallest"] = round(
        large["full_copy_publish_s"] / small["full_copy_publish_s"], 3)
    report["goal_ratio_at_most_1_5"] = report["next_set_ratio_largest_to_smallest"] <= 1.5
    report["load_average_at_end"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
