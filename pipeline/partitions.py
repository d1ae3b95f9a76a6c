"""Scoring and tagging `articles` partitioned by publication day, on workers that never open the warehouse.

The flow (``cryptowire backfill``; the workers are ``cryptowire worker``, pipeline/workers.py):

1. **export** (the single writer, under the data home's materialization lock): new and changed raw articles are
   synced into ``articles`` (as the ``articles`` asset does), then, per publication day, the articles lacking a
   score for the current ``model_version`` or tags for the current ``tagger_version`` are written to
   ``partitions/<day>/input-<input_id>.parquet`` (written as ``.partial``, renamed when complete). ``input_id`` is a
   content id: a hash of the versions and of each article's id and ``content_hash``; the same work gets the same id.
2. **score** (a worker, any machine that sees the data home): reads that file, scores and tags every article,
   gives each ticker its own sentiment, and writes ``partitions/<day>/result-<input_id>.parquet`` the same way
   (``.<attempt>.partial``, then an atomic rename). A result that already exists is not computed again, and two
   attempts of the same partition (a redelivered task) write the same content under the same name.
3. **merge** (the single writer again): one transaction per result file updates the articles whose
   ``content_hash`` still matches, and replaces their ``article_tickers`` rows. Every value comes from the file
   (``enriched_at`` / ``tagged_at`` are the worker's), so merging a file twice changes nothing.

The computation of each article is the one of the in-process path (``pipeline.enrich``): the same model input
(``article_text``), tagger call and per-asset input (``asset_text``).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from warehouse.db import transaction, utcnow

TICKER_ROW = pl.Struct({"ticker": pl.String, "salience": pl.Float64, "in_title": pl.Boolean,
                        "sentiment": pl.String, "sentiment_score": pl.Float64})
RESULT_SCHEMA = {
    "id": pl.String, "content_hash": pl.String,
    "sentiment": pl.String, "sentiment_score": pl.Float64,
    "prob_negative": pl.Float64, "prob_neutral": pl.Float64, "prob_positive": pl.Float64,
    "model_version": pl.String, "enriched_at": pl.Datetime("us"),
    "tickers": pl.List(pl.String), "topics": pl.List(pl.String),
    "tagger_version": pl.String, "tagged_at": pl.Datetime("us"),
    "ticker_rows": pl.List(TICKER_ROW),
}


@dataclass(frozen=True)
class Partition:
    day: date
    input_id: str
    articles: int
    input_path: Path

    @property
    def result_path(self) -> Path:
        return result_path_for(self.input_path)


def result_path_for(input_path: Path) -> Path:
    return input_path.with_name(input_path.name.replace("input-", "result-", 1))


def input_id(model_version: str, tagger_version: str, rows: Sequence[tuple[str, str]]) -> str:
    """A content id for one partition's work: the versions and each article's id and content hash."""
    h = hashlib.sha256(f"{model_version}\n{tagger_version}\n".encode())
    for article_id, content_hash in sorted(rows):
        h.update(f"{article_id}\t{content_hash}\n".encode())
    return h.hexdigest()[:16]


def days(since: date, until: date) -> list[date]:
    return [since + timedelta(days=i) for i in range((until - since).days + 1)]


def _replace_atomically(frame: pl.DataFrame, target: Path, attempt: str) -> None:
    tmp = target.with_name(f"{target.name}.{attempt}.partial")
    frame.write_parquet(tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, target)


def attempt_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def export_partitions(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    model_version: str,
    tagger_version: str,
    since: date,
    until: date,
) -> list[Partition]:
    """Sync raw_articles into articles, then write one input file per day in [since, until] that has work.
    The single writer runs this. Days with nothing to do get no file."""
    from pipeline.enrich import SYNC_SQL

    with transaction(con):
        con.execute(SYNC_SQL)
    if root.is_dir():
        prune_markers(root)
    todo = """FROM articles WHERE published_at >= ? AND published_at < ?
              AND (model_version IS DISTINCT FROM ? OR tagger_version IS DISTINCT FROM ?)"""
    day_list = con.execute(
        f"SELECT published_at::DATE AS day FROM (SELECT published_at {todo}) GROUP BY day ORDER BY day",
        [day_start(since), day_start(until + timedelta(days=1)), model_version, tagger_version],
    ).fetchall()
    with_work = {day for (day,) in day_list}
    for day in days(since, until):
        if day not in with_work:
            _remove_leftovers(root / day.isoformat())
    out = []
    for (day,) in day_list:  # one day in memory at a time: a backfill of years does not hold them all
        frame = pl.from_arrow(con.sql(
            f"SELECT id, title, summary, published_at, content_hash {todo} ORDER BY id",
            params=[day_start(day), day_start(day + timedelta(days=1)), model_version, tagger_version],
        ).to_arrow_table())
        assert isinstance(frame, pl.DataFrame)
        pid = input_id(model_version, tagger_version, list(zip(frame["id"], frame["content_hash"], strict=True)))
        folder = root / day.isoformat()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"input-{pid}.parquet"
        if not path.exists():
            meta = {"model_version": model_version, "tagger_version": tagger_version, "day": day.isoformat()}
            _replace_atomically(frame.with_columns(pl.lit(json.dumps(meta)).alias("_meta")), path, attempt_id())
        out.append(Partition(day=day, input_id=pid, articles=frame.height, input_path=path))
    return out


# A merge marker tells a late or redelivered task of its partition that the work is done; no task outlives this
# (Celery's Redis visibility timeout, after which a task is redelivered, is an hour).
MARKER_KEEP = timedelta(days=7)


def prune_markers(root: Path, now: float | None = None, keep: timedelta = MARKER_KEEP) -> int:
    """Remove merge markers older than ``keep`` and the day folders left empty; returns the markers removed.
    The single writer runs it when it exports (so markers do not pile up over years of backfills). ``now``: epoch
    seconds (default: the clock); markers are dated by their modification time."""
    limit = (time.time() if now is None else now) - keep.total_seconds()
    removed = 0
    for marker in root.glob("*/merged-*.json"):
        try:
            if marker.stat().st_mtime < limit:
                marker.unlink()
                removed += 1
        except FileNotFoundError:  # another clean-up got there first
            continue
    for folder in root.glob("*"):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return removed


def _remove_leftovers(folder: Path) -> None:
    """A day with nothing left to score keeps no inputs or results: what a backfill killed between a merge's commit
    and its clean-up leaves behind (its ``merged-*.json`` markers go with ``prune_markers``, a week later)."""
    if folder.is_dir():
        for pattern in ("input-*", "result-*", "running-*"):
            for path in folder.glob(pattern):
                path.unlink(missing_ok=True)


def day_start(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time())


def score_partition_file(input_path: Path, model: Any, tagger: Any, now: datetime | None = None) -> Path:
    """A worker's job: score and tag one partition's input, write its result file. Never opens the warehouse.
    Idempotent: a result already written for this input is returned as it is."""
    target = result_path_for(input_path)
    if target.exists():
        return target
    frame = pl.read_parquet(input_path)
    meta = json.loads(frame["_meta"][0]) if frame.height else {}
    if meta.get("model_version") not in (None, model.version) or meta.get("tagger_version") not in (None, tagger.version):
        raise RuntimeError(
            f"{input_path} was exported for model {meta.get('model_version')} / tagger {meta.get('tagger_version')}, "
            f"this worker runs {model.version} / {tagger.version}: run the same release on every worker"
        )
    result = score_rows(frame.select("id", "title", "summary", "published_at", "content_hash").rows(),
                        model, tagger, now or utcnow())
    _replace_atomically(result, target, attempt_id())
    return target


def score_rows(rows: Sequence[tuple], model: Any, tagger: Any, now: datetime) -> pl.DataFrame:
    """``(id, title, summary, published_at, content_hash)`` rows to result rows: what ``enrich.score``, ``tag`` and
    ``score_tickers`` compute for them."""
    from models.sentiment import article_text
    from models.sentiment.data import asset_text

    name_of = getattr(tagger, "name_of", str)
    texts = [article_text(title, summary) for _, title, summary, _, _ in rows]
    preds = model.predict(texts)
    tags = [tagger.tag(title, summary, published_at) for _, title, summary, published_at, _ in rows]
    several = [(i, h.symbol) for i, t in enumerate(tags) if len(t.tickers) > 1 for h in t.tickers]
    per_asset = dict(zip(several, model.predict([asset_text(name_of(sym), texts[i]) for i, sym in several]),
                         strict=True))
    out: dict[str, list] = {k: [] for k in RESULT_SCHEMA}
    for i, (article_id, _, _, _, content_hash) in enumerate(rows):
        p, t = preds[i], tags[i]
        out["id"].append(article_id)
        out["content_hash"].append(content_hash)
        out["sentiment"].append(p.label)
        out["sentiment_score"].append(float(p.score))
        out["prob_negative"].append(float(p.p_negative))
        out["prob_neutral"].append(float(p.p_neutral))
        out["prob_positive"].append(float(p.p_positive))
        out["model_version"].append(model.version)
        out["enriched_at"].append(now)
        out["tickers"].append([h.symbol for h in t.tickers])
        out["topics"].append(list(t.topics))
        out["tagger_version"].append(tagger.version)
        out["tagged_at"].append(now)
        ticker_rows = []
        for h in t.tickers:
            q = per_asset.get((i, h.symbol))
            label, score = (q.label, float(q.score)) if q is not None else (p.label, float(p.score))
            ticker_rows.append({"ticker": h.symbol, "salience": float(h.salience), "in_title": bool(h.in_title),
                                "sentiment": label, "sentiment_score": score})
        out["ticker_rows"].append(ticker_rows)
    return pl.DataFrame(out, schema=RESULT_SCHEMA)


@dataclass
class MergeReport:
    path: str
    rows: int  # result rows in the file
    applied: int  # articles updated (content unchanged since the export)
    stale: int  # articles changed or gone since the export: left for the next run
    ticker_rows: int


def merge_result(con: duckdb.DuckDBPyConnection, path: Path) -> MergeReport:
    """Merge one result file into the warehouse in one transaction (the single writer). Idempotent. The rows
    are stamped with the merge's time, not the worker's: the stamps say when the warehouse row changed, and a
    publish or the stories' resync since the worker ran must still see the change."""
    now = utcnow()
    with transaction(con):
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _result AS SELECT r.* FROM read_parquet(?) r "
            "JOIN articles a ON a.id = r.id AND a.content_hash = r.content_hash",
            [str(path)],
        )
        total = con.execute("SELECT count(*) FROM read_parquet(?)", [str(path)]).fetchall()[0][0]
        applied = con.execute("SELECT count(*) FROM _result").fetchall()[0][0]
        con.execute(
            """UPDATE articles SET sentiment = u.sentiment, sentiment_score = u.sentiment_score,
                   prob_negative = u.prob_negative, prob_neutral = u.prob_neutral, prob_positive = u.prob_positive,
                   model_version = u.model_version, enriched_at = ?, tickers = u.tickers,
                   topics = u.topics, tagger_version = u.tagger_version, tagged_at = ?
               FROM _result u WHERE articles.id = u.id AND (
                   articles.model_version IS DISTINCT FROM u.model_version OR articles.sentiment IS DISTINCT FROM
                   u.sentiment OR articles.sentiment_score IS DISTINCT FROM u.sentiment_score OR
                   articles.prob_negative IS DISTINCT FROM u.prob_negative OR articles.prob_neutral IS DISTINCT FROM
                   u.prob_neutral OR articles.prob_positive IS DISTINCT FROM u.prob_positive OR articles.tickers IS
                   DISTINCT FROM u.tickers OR articles.topics IS DISTINCT FROM u.topics OR articles.tagger_version IS
                   DISTINCT FROM u.tagger_version)""",  # a file merged again changes nothing, stamps included
            [now, now],
        )
        con.execute("DELETE FROM article_tickers WHERE article_id IN (SELECT id FROM _result)")
        con.execute(
            """INSERT INTO article_tickers (article_id, ticker, salience, in_title, sentiment, sentiment_score)
               SELECT id, t.ticker, t.salience, t.in_title, t.sentiment, t.sentiment_score
               FROM (SELECT id, unnest(ticker_rows) AS t FROM _result)"""
        )
        tickers = con.execute(
            "SELECT count(*) FROM article_tickers WHERE article_id IN (SELECT id FROM _result)"
        ).fetchall()[0][0]
        con.execute("DROP TABLE _result")
    return MergeReport(path=str(path), rows=total, applied=applied, stale=total - applied, ticker_rows=tickers)


def finish_partition(partition: Partition, report: MergeReport) -> None:
    """After a merge: a marker saying what was merged; the input and result files are removed."""
    marker = partition.input_path.with_name(f"merged-{partition.input_id}.json")
    marker.write_text(json.dumps({"day": partition.day.isoformat(), "input_id": partition.input_id,
                                  "rows": report.rows, "applied": report.applied, "stale": report.stale,
                                  "ticker_rows": report.ticker_rows, "merged_at": utcnow().isoformat()}))
    for p in (partition.input_path, partition.result_path):
        p.unlink(missing_ok=True)
    for stale in partition.input_path.parent.glob(f"running-{partition.input_id}.*.json"):  # a killed attempt's
        stale.unlink(missing_ok=True)
