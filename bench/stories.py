"""Stories: what an incremental run costs with a long history against an empty one.

Groups 1,000 new articles after 100,000 of history (all in one warehouse file, grouped by earlier runs) and the
same 1,000 on an empty history, through ``refresh_stories`` (the asset's code: reading the window, grouping,
writing). Embeddings are synthetic (random unit vectors, one in five articles a near-copy of a recent one), stored
beforehand as the asset stores them, so the encoder's time (which depends only on the new articles) is left out.
Each case is timed ``--rounds`` times from a copy of the same file (the median counts: the machine is shared).
Prints JSON; the goal is a ratio of at most 2.

    python -m bench.stories [--history 100000] [--new 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from pipeline.stories.features import ENCODER_VERSION
from pipeline.stories.refresh import refresh_stories
from warehouse.db import connect

DIM = 384
START = datetime(2024, 1, 1)
STEP = timedelta(minutes=3)  # ~960 articles in a 48 h window


def _vectors(n: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    for i in range(1, n):  # one in five re-tells a recent article
        if i % 5 == 0:
            v[i] = v[i - 1 - int(rng.integers(0, min(i, 20)))] + 0.1 * v[i]
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _insert(con, first: int, n: int, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    v = _vectors(n, rng)
    ids = [f"b_{first + i:012d}" for i in range(n)]
    times = [START + STEP * (first + i) for i in range(n)]
    con.execute("BEGIN")
    con.executemany(
        "INSERT INTO articles (id, source_name, feed_url, title, summary, authors, categories, published_at, "
        "fetched_at, content_hash, tickers) VALUES (?, ?, 'f', ?, '', [], [], ?, ?, 'h', [])",
        [(ids[i], f"S{i % 7}", f"t{first + i}", times[i], times[i]) for i in range(n)],
    )
    # three "sentences" each (the real ones hold the title and up to four summary sentences)
    con.executemany("INSERT INTO article_embeddings VALUES (?, ?, ?, ?, [], [], ?, ?)",
                    [(ids[i], ENCODER_VERSION, v[i].tolist(), v[i].tolist(), times[i], v[i].tolist() * 3)
                     for i in range(n)])
    con.execute("COMMIT")


def _no_embed(texts: list[str]) -> np.ndarray:
    raise AssertionError("every embedding is stored beforehand")


def run(history: int, new: int, rounds: int) -> dict[str, object]:
    out: dict[str, object] = {"history": history, "new": new, "rounds": rounds}
    with tempfile.TemporaryDirectory() as tmp:
        warm = connect(Path(tmp) / "warm.duckdb")  # first-use costs (Arrow, polars) stay out of both timings
        _insert(warm, 0, 50, np.random.default_rng(1))
        refresh_stories(warm, embed_fn=_no_embed)
        warm.close()
        for name, h in (("empty", 0), ("with_history", history)):
            path = Path(tmp) / f"{name}.duckdb"
            con = connect(path)
            rng = np.random.default_rng(7)
            if h:
                for first in range(0, h, 20_000):
                    _insert(con, first, min(20_000, h - first), rng)
                refresh_stories(con, embed_fn=_no_embed)  # the history, grouped by earlier runs
            _insert(con, h, new, rng)
            con.close()
            start = Path(tmp) / f"{name}.start.duckdb"
            shutil.copyfile(path, start)
            times = []
            for _ in range(rounds):
                shutil.copyfile(start, path)
                con = connect(path)
                started = time.perf_counter()
                report = refresh_stories(con, embed_fn=_no_embed)
                times.append(round(time.perf_counter() - started, 3))
                con.close()
            out[f"{name}_seconds"] = statistics.median(times)
            out[f"{name}_rounds"] = times
            out[f"{name}_seeded"] = report.seeded
    out["ratio"] = round(float(out["with_history_seconds"]) / float(out["empty_seconds"]), 2)  # type: ignore[arg-type]
    out["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                      "load_1m": round(os.getloadavg()[0], 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--history", type=int, default=100_000)
    ap.add_argument("--new", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(json.dumps(run(args.history, args.new, args.rounds), indent=2))


if __name__ == "__main__":
    main()
