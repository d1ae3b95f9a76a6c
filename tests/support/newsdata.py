"""Curated rows for API tests, written into a real warehouse file and published as a real serving snapshot."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from warehouse.db import connect
from warehouse.parts import open_snapshot, publish_set
from warehouse.publish import publish_snapshot
from warehouse.read import SnapshotReader
from warehouse.sentiment import refresh_asset_sentiment

TICKERS = ["BTC", "ETH", "SOL", "XRP", "DOGE", "ADA"]
TOPICS = ["markets", "regulation", "defi", "etf"]
SOURCES = ["CoinDesk", "Decrypt", "The Block", "Cointelegraph"]
SENTIMENTS = ["positive", "negative", "neutral"]
BURST_AT = datetime(2024, 11, 20, 12, 0, 0)  # hundreds of articles share this publication time
# CRYPTOWIRE_TEST_SNAPSHOTS=parts: build() and republish() publish partitioned sets (warehouse.parts) instead of
# single files, so that the API's tests run against both layouts.
PARTS = os.environ.get("CRYPTOWIRE_TEST_SNAPSHOTS") == "parts"


def open_reader(path: Path) -> tuple[duckdb.DuckDBPyConnection, SnapshotReader]:
    """A reader over a published snapshot (a single file or a set), as the API opens it; close the connection."""
    con, layout = open_snapshot(path)
    tag, articles, events = SnapshotReader.info(con)
    return con, SnapshotReader(con.cursor(), tag, articles, events, None, layout)


def publish(con: duckdb.DuckDBPyConnection, snapshots: Path, keep: int = 3, parts: bool | None = None) -> Path:
    if PARTS if parts is None else parts:
        return publish_set(con, snapshots, keep=keep)
    return publish_snapshot(con, snapshots, keep=keep)


@dataclass
class Data:
    articles: list[dict[str, Any]]
    events: list[dict[str, Any]]

    def news_order(self) -> list[str]:
        """Article ids in serving order (newest first, ties by id descending)."""
        return [a["id"] for a in sorted(self.articles, key=lambda a: (a["published_at"], a["id"]), reverse=True)]

    def event_order(self) -> list[str]:
        return [e["id"] for e in sorted(self.events, key=lambda e: e["created_at"], reverse=True)]


def make_articles(n: int, burst: int, seed: int = 7, start: datetime = datetime(2024, 12, 3, 8, 0)) -> list[dict[str, Any]]:
    """``n`` articles, ``burst`` of them published at the very same second, the rest minutes apart (some tied)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i < burst:
            published = BURST_AT
        else:
            published = start - timedelta(hours=(i - burst) // 3 * 3)  # three at a time share a time
        tickers = sorted(set(rng.sample(TICKERS, rng.randint(0, 2))))
        out.append({
            "id": f"a_{rng.getrandbits(64):016x}",
            "source_name": SOURCES[(i // 3) % len(SOURCES)],
            "url": f"https://news.example/{i}",
            "title": f"Article {i}: {' and '.join(tickers) or 'markets'} in focus",
            "summary": f"Summary {i}. " + ("Prices moved. " * (i % 4)),
            "image_url": f"https://img.example/{i}.jpg" if i % 2 else None,
            "published_at": published,
            "sentiment": SENTIMENTS[i % 3],
            "sentiment_score": round(rng.uniform(-1, 1), 4),
            "tickers": tickers,
            "topics": [TOPICS[i % len(TOPICS)]],
        })
    return out


def make_events(n: int, seed: int = 11, start: datetime = datetime(2024, 12, 2, 9, 0)) -> list[dict[str, Any]]:
    """``n`` events with unique millisecond created_at; half resolve in the past, half far in the future."""
    rng = random.Random(seed)
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    out = []
    for i in range(n):
        created = start - timedelta(milliseconds=i * 12_345_678 + (i % 5))
        asset = TICKERS[i % len(TICKERS)]
        out.append({
            "id": "pevt_" + "".join(rng.choice(letters) for _ in range(20)),
            "event_title": f"Will {asset} close above ${1000 + i} on the date?",
            "event_description": f"Derived from article {i}.",
            "source_url": f"https://news.example/{i}",
            "image_url": None,
            "source_article_id": f"a_{i:016x}",
            "source_published_at": created - timedelta(hours=1),
            "created_at": created,
            "updated_at": created,
            "date": (created + timedelta(days=30)) if i % 2 else datetime(2099, 12, 31),
            "options": ["Yes", "No"],
            "tags": [asset, "pricemovement"],
            "asset": asset,
            "kind": "price_threshold",
            "subject": None,
            "comparator": "above",
            "threshold": 1000.0 + i,
            "currency": "USD",
            "resolution_criteria": f"Yes if {asset} closes above ${1000 + i} (USD) on the date, per CoinGecko.",
            "resolution_source": "CoinGecko",
            "status": "open",
        })
    return out


def write(con: duckdb.DuckDBPyConnection, data: Data) -> None:
    for a in data.articles:
        con.execute(
            """INSERT INTO articles (id, source_name, feed_url, url, title, summary, authors, categories, image_url,
                   published_at, fetched_at, content_hash, sentiment, sentiment_score, tickers, topics)
               VALUES (?, ?, 'https://feeds.example/rss', ?, ?, ?, [], [], ?, ?, ?, 'h', ?, ?, ?, ?)""",
            [a["id"], a["source_name"], a["url"], a["title"], a["summary"], a["image_url"], a["published_at"],
             a["published_at"], a["sentiment"], a["sentiment_score"], a["tickers"], a["topics"]],
        )
        if a.get("date_inferred"):
            con.execute("UPDATE articles SET date_inferred = true WHERE id = ?", [a["id"]])
        for t in a["tickers"]:  # the long table, as tagging writes it (asset_sentiment reads it)
            con.execute("INSERT INTO article_tickers (article_id, ticker, salience, in_title) VALUES (?, ?, 1.0, true)",
                        [a["id"], t])
    for e in data.events:
        cols = list(e)
        con.execute(
            f"INSERT INTO prediction_events ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
            [e[c] for c in cols],
        )


def build(home: Path, data: Data, keep: int = 3, parts: bool | None = None) -> Path:
    """Write ``data`` into ``home/warehouse.duckdb`` (a real, migrated warehouse) and publish a snapshot."""
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("BEGIN")
        write(con, data)
        con.execute("COMMIT")
        refresh_asset_sentiment(con)  # as the pipeline's asset_sentiment does before publishing
        return publish(con, home / "snapshots", keep=keep, parts=parts)
    finally:
        con.close()


def republish(home: Path, keep: int = 3) -> Path:
    con = connect(home / "warehouse.duckdb")
    try:
        return publish(con, home / "snapshots", keep=keep)
    finally:
        con.close()
