"""Partitioned backfill benchmark: prints JSON.

    .venv/bin/python bench/backfill.py [--days 4] [--per-day 150] [--workers 1,2]

Generates ``--days`` x ``--per-day`` raw articles (tests/support/rawgen.py), starts a redis-server, and for each
worker count runs the same backfill (``pipeline.backfill.run_backfill``: export, queue, score on the workers, merge)
on a fresh copy of the same warehouse, with that many `cryptowire worker` processes already started and their
model loaded. The machine's cores are split between the workers (``--threads`` = cores / workers), so every run
uses every core. Also measured in the same run: the in-process path (`enrich_articles`, one process using every
core) on the same articles. Throughput is articles scored, tagged and merged per wall-clock second of the whole
``run_backfill`` call (model version, export, queueing, scoring, merging, polling every 0.25 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.rawgen import generate, insert_raw  # noqa: E402
from tests.support.servers import redis_server  # noqa: E402


def machine() -> dict:
    import duckdb
    import onnxruntime

    return {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "python": platform.python_version(),
            "duckdb": duckdb.__version__, "onnxruntime": onnxruntime.__version__, "load_avg_1m_start": os.getloadavg()[0]}


def start_workers(n: int, threads: int, env: dict[str, str], logs: Path) -> list[subprocess.Popen]:
    procs = []
    for i in range(n):
        log = logs / f"worker-{n}-{i}.log"
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "worker", "--threads", str(threads), "--loglevel", "WARNING"],
            env=env, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
        ))
    return procs


def wait_consuming(app, n: int, timeout: float = 180) -> None:  # noqa: ANN001
    """Until ``n`` workers answer a ping (their model is loaded before they consume)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0) or []
        if len(replies) >= n:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{n} workers did not come up in {timeout} s")


def stop(procs: list[subprocess.Popen]) -> None:
    import signal

    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--per-day", type=int, default=150)
    parser.add_argument("--workers", default="1,2", help="worker counts to measure, comma-separated")
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    cores = os.cpu_count() or 1

    from models.sentiment import article_text, load_model
    from models.tagging import get_tagger
    from pipeline.enrich import enrich_articles
    from warehouse import db
    from warehouse.config import Settings

    report: dict = {"machine": machine(), "days": args.days, "per_day": args.per_day,
                    "articles": args.days * args.per_day, "runs": []}
    days = [date(2026, 3, 1) + timedelta(days=i) for i in range(args.days)]
    raw = generate(days, args.per_day)
    with tempfile.TemporaryDirectory(prefix="bench-backfill-") as tmp:
        base = Path(tmp)
        seed = base / "seed"
        con = db.connect(seed / "warehouse.duckdb")
        insert_raw(con, raw)
        con.close()
        model = load_model(threads=cores, cache_dir=seed / "models")  # builds the int8 graph once, for all
        tagger = get_tagger()

        inproc = base / "inproc.duckdb"
        shutil.copyfile(seed / "warehouse.duckdb", inproc)
        con = db.connect(inproc)
        started = time.perf_counter()
        done = enrich_articles(con, model, article_text, tagger)
        seconds = time.perf_counter() - started
        con.close()
        report["in_process"] = {"threads": cores, "articles": done.scored, "seconds": round(seconds, 3),
                                "articles_per_s": round(done.scored / seconds, 1)}

        with redis_server(base / "redis") as redis_url:
            for n in counts:
                home = base / f"home-{n}"
                home.mkdir()
                shutil.copyfile(seed / "warehouse.duckdb", home / "warehouse.duckdb")
                shutil.copytree(seed / "models", home / "models")
                settings = Settings(home=home, redis_url=redis_url, sentiment_threads=max(1, cores // n))
                env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
                env.update(settings.as_env())
                env["PYTHONPATH"] = str(ROOT)
                env.pop("CRYPTOWIRE_PDF_ALLOW_HOSTS", None)
                from pipeline.backfill import run_backfill
                from pipeline.workers import configure

                app = configure(settings)
                procs = start_workers(n, max(1, cores // n), env, base)
                try:
                    wait_consuming(app, n)
                    load = os.getloadavg()[0]
                    result = run_backfill(settings, days[0], days[-1], timeout=600, say=lambda _line: None)
                finally:
                    stop(procs)
                by_worker: dict[str, int] = {}
                for p in result.partitions:
                    by_worker[p.worker or "?"] = by_worker.get(p.worker or "?", 0) + 1
                assert result.ok and result.merged_articles == len(raw), result
                report["runs"].append({
                    "workers": n, "threads_per_worker": max(1, cores // n), "articles": result.merged_articles,
                    "seconds": result.seconds, "articles_per_s": round(result.merged_articles / result.seconds, 1),
                    "partitions_per_worker": sorted(by_worker.values(), reverse=True), "load_avg_1m_start": load,
                })
    rates = {r["workers"]: r["articles_per_s"] for r in report["runs"]}
    if 1 in rates and 2 in rates:
        report["speedup_2_vs_1"] = round(rates[2] / rates[1], 2)
    report["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
