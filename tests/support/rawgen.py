"""Generated raw articles over several publication days, written straight into ``raw_articles`` (what ingestion
would leave), for the partitioned backfill's tests and benchmark."""

from __future__ import annotations

import hashlib
import random
from datetime import date, datetime, timedelta

import duckdb

ASSETS = ["Bitcoin", "Ethereum", "Solana", "XRP", "Dogecoin", "Cardano", "BTC", "ETH"]
PHRASES = [
    "{a} soars to a record high as ETF inflows surge",
    "{a} slides after a major exchange halts withdrawals",
    "Hackers drain $120 million from a {a} bridge",
    "{a} developers publish the agenda for next week's call",
    "{a} and {b} rally as traders bet on rate cuts",
    "{a} rallies while {b} slumps on regulatory fears",
    "Analysts see {a} range-bound ahead of the Fed meeting",
    "SEC sues a {a} lender over unregistered securities",
    "{a} network suffers a five-hour outage, validators scramble",
    "Whales accumulate {a} as funding rates turn negative",
]
SUMMARIES = ["", "Investors pile in.", "Funds were stolen.", "Prices moved sharply on the news.",
             "The market shrugged it off."]


def generate(days: list[date], per_day: int, seed: int = 21) -> list[tuple]:
    """``per_day`` articles per day: (id, title, summary, published_at, content_hash)."""
    rng = random.Random(seed)
    rows = []
    for day in days:
        for i in range(per_day):
            a, b = rng.sample(ASSETS, 2)
            title = rng.choice(PHRASES).format(a=a, b=b) + f" (#{i})"
            summary = rng.choice(SUMMARIES)
            published = datetime.combine(day, datetime.min.time()) + timedelta(minutes=rng.randrange(24 * 60))
            article_id = "a_" + hashlib.sha256(f"{day}-{i}-{seed}".encode()).hexdigest()[:16]
            content_hash = hashlib.md5(f"{title}{summary}".encode()).hexdigest()
            rows.append((article_id, title, summary, published, content_hash))
    return rows


def insert_raw(con: duckdb.DuckDBPyConnection, rows: list[tuple]) -> None:
    for article_id, title, summary, published, content_hash in rows:
        con.execute(
            "INSERT OR REPLACE INTO raw_articles (id, source_name, feed_url, url, guid, title, summary, content_html,"
            " authors, categories, image_url, published_at, date_inferred, fetched_at, updated_at, language,"
            " content_hash) VALUES (?, 'Test', 'http://127.0.0.1/f', ?, NULL, ?, ?, NULL, [], [],"
            " NULL, ?, false, ?, ?, 'en', ?)",
            [article_id, f"https://news.example/{article_id}", title, summary, published,
             published + timedelta(minutes=5), published + timedelta(minutes=5), content_hash],
        )
