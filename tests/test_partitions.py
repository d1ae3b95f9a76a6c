"""The partitioned path (export, score on a worker, merge) in one process: the same rows as the in-process
`articles` enrichment, and a merge applied twice changes nothing."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import pytest

from pipeline.enrich import enrich_articles, load_crypto_assets
from pipeline.partitions import export_partitions, merge_result, score_partition_file
from tests.support.rawgen import generate, insert_raw
from warehouse import db
from warehouse.config import Settings

DAYS = [date(2026, 3, d) for d in (1, 2, 3, 4)]

ARTICLE_COLS = ("id, sentiment, sentiment_score, prob_negative, prob_neutral, prob_positive, model_version, "
                "tickers, topics, tagger_version")


def rows_of(con) -> tuple[list, list]:
    articles = con.execute(f"SELECT {ARTICLE_COLS} FROM articles ORDER BY id").fetchall()
    tickers = con.execute("SELECT article_id, ticker, salience, in_title, sentiment, sentiment_score "
                          "FROM article_tickers ORDER BY ALL").fetchall()
    return articles, tickers


@pytest.fixture(scope="module")
def model(sentiment_cache: Path):
    from models.sentiment import load_model

    return load_model(cache_dir=sentiment_cache)


@pytest.fixture(scope="module")
def tagger():
    from models.tagging import get_tagger

    return get_tagger()


def in_process(path: Path, raw: list[tuple], model, tagger) -> tuple[list, list]:
    from models.sentiment import article_text
    from models.tagging import load_registry

    con = db.connect(path)
    load_crypto_assets(con, load_registry())
    insert_raw(con, raw)
    enrich_articles(con, model, article_text, tagger, now=datetime(2026, 3, 5))
    try:
        return rows_of(con)
    finally:
        con.close()


def test_partitioned_equals_in_process_and_merge_is_idempotent(tmp_path: Path, model, tagger) -> None:
    from models.tagging import load_registry

    raw = generate(DAYS, 20)
    expected = in_process(tmp_path / "inproc.duckdb", raw, model, tagger)

    con = db.connect(tmp_path / "w.duckdb")
    load_crypto_assets(con, load_registry())
    insert_raw(con, raw)
    root = Settings(home=tmp_path).partitions_dir
    parts = export_partitions(con, root, model.version, tagger.version, DAYS[0], DAYS[-1])
    assert [p.day for p in parts] == DAYS and all(p.articles == 20 for p in parts)
    # the same work exported again is the same partition (content id), not a new one
    again = export_partitions(con, root, model.version, tagger.version, DAYS[0], DAYS[-1])
    assert [p.input_id for p in again] == [p.input_id for p in parts]

    results = [score_partition_file(p.input_path, model, tagger) for p in parts]
    assert [score_partition_file(p.input_path, model, tagger) for p in parts] == results  # kept, not recomputed
    scored = db.utcnow()
    for r in results:
        report = merge_result(con, r)
        assert report.applied == report.rows == 20 and report.stale == 0
    # stamped when merged, not when the worker scored: a publish or resync in between must see the change
    assert con.execute("SELECT min(enriched_at) > ?, min(tagged_at) > ? FROM articles", [scored, scored]).fetchall() \
        == [(True, True)]
    merged = rows_of(con)
    assert merged == expected
    assert con.execute("SELECT count(*), count(DISTINCT id) FROM articles").fetchall()[0] == (80, 80)

    for r in results:  # a partition merged twice changes nothing
        merge_result(con, r)
    assert rows_of(con) == merged
    stamps = con.execute("SELECT id, enriched_at, tagged_at FROM articles ORDER BY id").fetchall()
    for r in results:
        merge_result(con, r)
    assert con.execute("SELECT id, enriched_at, tagged_at FROM articles ORDER BY id").fetchall() == stamps
    # nothing left to export
    assert export_partitions(con, root, model.version, tagger.version, DAYS[0], DAYS[-1]) == []
    con.close()


def test_merge_skips_articles_changed_since_export(tmp_path: Path, model, tagger) -> None:
    raw = generate(DAYS[:1], 5)
    con = db.connect(tmp_path / "w.duckdb")
    insert_raw(con, raw)
    [part] = export_partitions(con, Settings(home=tmp_path).partitions_dir, model.version, tagger.version, DAYS[0], DAYS[0])
    result = score_partition_file(part.input_path, model, tagger)
    changed = list(raw[0])
    changed[1], changed[4] = "Bitcoin crashes 20% in an hour", "newhash"
    insert_raw(con, [tuple(changed)])
    export_partitions(con, Settings(home=tmp_path).partitions_dir, model.version, tagger.version, DAYS[1], DAYS[1])  # syncs
    report = merge_result(con, result)
    assert (report.applied, report.stale) == (4, 1)
    assert con.execute("SELECT model_version FROM articles WHERE id = ?", [raw[0][0]]).fetchall() == [(None,)]
    con.close()


def test_old_merge_markers_are_pruned_and_recent_ones_kept(tmp_path: Path) -> None:
    """A marker answers late or redelivered tasks of its partition for a week, then goes (with its empty folder)."""
    import os
    import time

    from pipeline.partitions import MARKER_KEEP, prune_markers

    root = Settings(home=tmp_path).partitions_dir
    old_day, new_day = root / "2024-01-01", root / "2024-01-02"
    for folder in (old_day, new_day):
        folder.mkdir(parents=True)
    old, recent = old_day / "merged-a.json", new_day / "merged-b.json"
    work = new_day / "input-c.parquet"  # not a marker: never touched
    for path in (old, recent, work):
        path.write_text("{}")
    week_ago = time.time() - MARKER_KEEP.total_seconds() - 60
    os.utime(old, (week_ago, week_ago))
    os.utime(work, (week_ago, week_ago))
    assert prune_markers(root) == 1
    assert not old.exists() and not old_day.exists()
    assert recent.exists() and work.exists()
    assert prune_markers(root) == 0
