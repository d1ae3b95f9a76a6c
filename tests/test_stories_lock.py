"""The stories step does not hold the warehouse while the encoder runs: a real warehouse file with a backlog of new
articles, the `stories` asset's own function in a real process with the packaged encoder. While it embeds, another
process opens the file read-only and reads it (as an analyst's duckdb CLI, polars or `cryptowire sql` does); a
kill -9 mid-embedding keeps the batches stored so far, which the next run does not compute again, and the stories
come out as an uninterrupted run's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pytest

from tests.support.newsdata import Data, make_articles, write
from tests.support.procs import wait_for
from warehouse.db import connect

PROJECT = Path(__file__).resolve().parent.parent
ARTICLES = 80  # ~5-20 s of encoder time on a 2-CPU machine (title + lede, title, sentences)
BATCH = 8  # articles per stored batch in the child (the asset's default is larger)
READ_BOUND = 5.0  # seconds an analyst's read-only open may wait, retrying on the lock

# The asset's function run as Dagster runs it (its WarehouseResource), the encoder traced: each call appends
# "start|end <texts> <unix time>" to the progress file, so the test knows when embedding has begun and how far it is.
CHILD = """
import json, sys, time
import dagster as dg
import models.sentiment.evaluate as ev
import pipeline.stories.refresh as refresh
refresh.EMBED_BATCH = int(sys.argv[3])
real = ev.frozen_embeddings
log = open(sys.argv[2], "a", buffering=1)
def traced(texts, *args, **kwargs):
    log.write(f"start {len(texts)} {time.time()}\\n")
    out = real(texts, *args, **kwargs)
    log.write(f"end {len(texts)} {time.time()}\\n")
    return out
ev.frozen_embeddings = traced
from pipeline.assets.stories import stories
from pipeline.resources import WarehouseResource
result = stories(dg.build_asset_context(), warehouse=WarehouseResource(path=sys.argv[1]))
print(json.dumps({k: getattr(v, "value", v) for k, v in result.metadata.items()}))
"""


def _start(db: Path, progress: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "TQDM_DISABLE": "1"}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(progress), str(BATCH)], cwd=PROJECT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _events(progress: Path) -> list[tuple[str, int, float]]:
    if not progress.exists():
        return []
    out = []
    for line in progress.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((parts[0], int(parts[1]), float(parts[2])))
    return out


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, int]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _read_only(db: Path, sql: str, bound: float) -> tuple[list[tuple], float]:
    """``sql`` on a read-only connection, retrying while a writer holds the file; the rows and the seconds waited.
    Raises the lock error when ``bound`` passes."""
    started = time.monotonic()
    while True:
        try:
            con = duckdb.connect(str(db), read_only=True)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() - started > bound:
                raise
            time.sleep(0.05)
            continue
        try:
            return con.execute(sql).fetchall(), time.monotonic() - started
        finally:
            con.close()


def _stories(db: Path) -> tuple[list[tuple], list[tuple]]:
    rows, _ = _read_only(db, "SELECT article_id, story_id FROM story_articles ORDER BY article_id", 30)
    stories, _ = _read_only(db, "SELECT * EXCLUDE (updated_at) FROM stories ORDER BY id", 30)
    return rows, stories


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated warehouse holding ARTICLES articles, none grouped or embedded."""
    db = tmp_path_factory.mktemp("stories_lock") / "template.duckdb"
    con = connect(db)
    try:
        con.execute("BEGIN")
        write(con, Data(make_articles(ARTICLES, burst=12, seed=31), []))
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return db


@dataclass
class Uninterrupted:
    reads: list[tuple[float, float, bool]]  # (began, ended, read or locked out for READ_BOUND s)
    last_embed_end: float
    report: dict[str, int]
    stories: tuple[list[tuple], list[tuple]]


@pytest.fixture(scope="module")
def uninterrupted(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Uninterrupted]:
    """One whole run of the step, an analyst reading the warehouse read-only every second while it embeds."""
    work = tmp_path_factory.mktemp("uninterrupted")
    db, progress = work / "warehouse.duckdb", work / "progress"
    shutil.copy(template, db)
    proc = _start(db, progress)
    try:
        assert wait_for(lambda: _events(progress) or proc.poll() is not None, 60), "the step never began embedding"
        reads: list[tuple[float, float, bool]] = []
        while proc.poll() is None and len(reads) < 4:
            began = time.time()
            try:
                rows, _ = _read_only(db, "SELECT count(*) FROM articles", READ_BOUND)
            except duckdb.IOException:
                reads.append((began, time.time(), False))
            else:
                assert rows == [(ARTICLES,)]
                reads.append((began, time.time(), True))
            time.sleep(1.0)
        report = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ends = [t for kind, _, t in _events(progress) if kind == "end"]
    yield Uninterrupted(reads, max(ends), report, _stories(db))


def test_an_analyst_reads_the_warehouse_while_the_stories_step_embeds(uninterrupted: Uninterrupted) -> None:
    end = uninterrupted.last_embed_end
    during = [r for r in uninterrupted.reads if r[0] < end]
    assert during, f"no read attempt while the encoder ran: {uninterrupted.reads}"
    # Before: the step held the file read-write from its start to its end, and every read-only open failed.
    assert all(ok for _, _, ok in during), f"locked out for {READ_BOUND} s while the step embedded: {during}, {end}"
    assert any(ended < end for _, ended, _ in during), f"no read done before the encoder's end: {during}, {end}"
    assert uninterrupted.report["new"] == ARTICLES and uninterrupted.report["embedded"] == ARTICLES


def test_a_kill_mid_embedding_keeps_the_batches_stored_and_the_next_run_finishes_them(
        template: Path, uninterrupted: Uninterrupted, tmp_path: Path) -> None:
    db, progress = tmp_path / "warehouse.duckdb", tmp_path / "progress"
    shutil.copy(template, db)
    proc = _start(db, progress)
    try:
        # Mid-embedding: when the encoder has finished as many texts as there are articles (a third of the work
        # at most: each article is embedded as title + lede, as title, and sentence by sentence).
        assert wait_for(lambda: sum(n for kind, n, _ in _events(progress) if kind == "end") >= ARTICLES
                        or proc.poll() is not None, 90)
        assert proc.poll() is None, "the step ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    kept, _ = _read_only(db, "SELECT article_id, computed_at FROM article_embeddings ORDER BY article_id", 30)
    grouped, _ = _read_only(db, "SELECT count(*) FROM story_articles", 30)
    assert grouped == [(0,)]
    # Before: the embeddings were stored only once all were computed, and the kill lost every one.
    assert 0 < len(kept) < ARTICLES, f"{len(kept)} embeddings kept after the kill"

    report = _finish(_start(db, tmp_path / "progress2"))
    assert report["new"] == ARTICLES and report["embedded"] == ARTICLES - len(kept)  # only what was left
    after = dict(_read_only(db, "SELECT article_id, computed_at FROM article_embeddings", 30)[0])
    assert len(after) == ARTICLES and all(after[a] == at for a, at in kept)  # those kept were not computed again
    assert _stories(db) == uninterrupted.stories


# ------------------------------------------------------------------ the released path itself, with a fake encoder

def _fake_embed(texts: list[str]) -> np.ndarray:
    """A deterministic bag of words: texts sharing words are close, so the grouping has something to group."""
    out = np.zeros((len(texts), 16), dtype=np.float32)
    for k, text in enumerate(texts):
        for word in text.lower().split():
            out[k] += np.random.default_rng(zlib.crc32(word.encode())).standard_normal(16).astype(np.float32)
        out[k] /= np.linalg.norm(out[k]) or 1.0
    return out


def _session(db: Path) -> Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]:
    @contextmanager
    def session() -> Iterator[duckdb.DuckDBPyConnection]:
        con = connect(db)
        try:
            yield con
        finally:
            con.close()
    return session


def _fresh(template: Path, tmp_path: Path, name: str) -> Path:
    db = tmp_path / name
    shutil.copy(template, db)
    return db


def test_released_and_held_runs_give_the_same_stories(template: Path, tmp_path: Path) -> None:
    from pipeline.stories.refresh import refresh_stories, refresh_stories_released

    held, released = _fresh(template, tmp_path, "held.duckdb"), _fresh(template, tmp_path, "released.duckdb")
    con = connect(held)
    try:
        one = refresh_stories(con, embed_fn=_fake_embed)
    finally:
        con.close()
    other = refresh_stories_released(_session(released), embed_fn=_fake_embed, batch=7)
    assert (other.new, other.embedded, other.touched, other.stories) == (one.new, one.embedded, one.touched,
                                                                          one.stories)
    assert _stories(held) == _stories(released)


def test_an_article_edited_while_its_batch_was_embedded_is_not_stored_under_its_new_text(
        template: Path, tmp_path: Path) -> None:
    """Between the read and the write of a batch (the file closed meanwhile) one article's title is edited (as
    `articles` does when a feed changes it: re-scored in the same transaction) and another's date is corrected."""
    from pipeline.stories.features import story_text
    from pipeline.stories.refresh import refresh_stories_released

    db = _fresh(template, tmp_path, "w.duckdb")
    first, second = _read_only(db, "SELECT id FROM articles ORDER BY published_at, id LIMIT 2", 5)[0]
    edited, redated = first[0], second[0]
    calls: list[int] = []

    def embed_and_edit(texts: list[str]) -> np.ndarray:
        if not calls:  # the first batch is being embedded: the warehouse is not open in this run
            con = connect(db, lock_wait=1)
            try:
                con.execute("UPDATE articles SET title = 'Edited: exchange halts withdrawals', enriched_at = now() "
                            "WHERE id = ?", [edited])
                con.execute("UPDATE articles SET published_at = published_at - INTERVAL 1 HOUR WHERE id = ?",
                            [redated])
            finally:
                con.close()
        calls.append(len(texts))
        return _fake_embed(texts)

    report = refresh_stories_released(_session(db), embed_fn=embed_and_edit, batch=5)
    assert report.new == ARTICLES and report.embedded == ARTICLES  # the edited one once, by its new text
    (vec, summary), = _read_only(db, "SELECT e.text_vec, a.summary FROM article_embeddings e JOIN articles a "
                                     "ON a.id = e.article_id WHERE e.article_id = ?".replace("?", f"'{edited}'"), 5)[0]
    assert np.allclose(vec, _fake_embed([story_text("Edited: exchange halts withdrawals", summary)])[0])
    assert _read_only(db, f"SELECT s.published_at = a.published_at FROM story_articles s JOIN articles a "
                          f"ON a.id = s.article_id WHERE a.id = '{redated}'", 5)[0] == [(True,)]


def test_an_embedding_left_by_a_stopped_run_is_computed_again_when_its_article_changed_since(
        template: Path, tmp_path: Path) -> None:
    """A run killed after storing a batch; before the next, `articles` takes a new title for one of those articles
    (re-scoring it: enriched_at after the embedding's computed_at). The next run embeds it again, by its new text;
    the others stored are used as they are."""
    from pipeline.stories.features import ENCODER_VERSION, story_text
    from pipeline.stories.refresh import _embedded, refresh_stories

    db = _fresh(template, tmp_path, "w.duckdb")
    con = connect(db)
    try:
        rows = con.execute("SELECT id, published_at, title, summary FROM articles ORDER BY id LIMIT 3").fetchall()
        stored_at = datetime(2026, 1, 1)
        con.executemany("INSERT INTO article_embeddings (article_id, encoder, text_vec, title_vec, numbers, "
                        "title_numbers, computed_at, sent_vecs) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [(v[0], ENCODER_VERSION, v[1], v[2], v[3], v[4], stored_at, v[5])
                         for v in _embedded(rows, _fake_embed)])
        changed = rows[0][0]
        con.execute("UPDATE articles SET title = 'A new headline', enriched_at = ? WHERE id = ?",
                    [stored_at + timedelta(minutes=5), changed])
        con.execute("UPDATE articles SET enriched_at = ? WHERE id = ?", [stored_at - timedelta(minutes=5), rows[1][0]])
        report = refresh_stories(con, embed_fn=_fake_embed)
        assert report.embedded == ARTICLES - 2
        got = dict(con.execute("SELECT article_id, computed_at FROM article_embeddings WHERE article_id IN (?, ?, ?)",
                               [r[0] for r in rows]).fetchall())
        assert got[rows[1][0]] == got[rows[2][0]] == stored_at and got[changed] > stored_at
        vec = con.execute("SELECT text_vec FROM article_embeddings WHERE article_id = ?", [changed]).fetchall()[0][0]
        assert np.allclose(vec, _fake_embed([story_text("A new headline", rows[0][3])])[0])
    finally:
        con.close()
