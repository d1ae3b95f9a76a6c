"""Tagging speed: headlines per second on one core (the tagger is single-threaded pure Python).

    .venv/bin/python bench/tagging.py [--seconds 3] [--repeats 5]

Tags the 482 labelled headlines of models/eval/tagging.jsonl over and over. Throughput is counted against the
process's CPU time (one core), so other work on a shared machine slows it less than wall time would; both are
printed. The goal is 20,000 headlines/s/core. For scale it also tags whole articles (title + summary) of the
bundled sample feeds, as the `articles` asset does. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import feedparser  # noqa: E402

from models.tagging import get_tagger  # noqa: E402
from models.tagging.evaluate import load_examples  # noqa: E402

GOAL = 20_000
SAMPLE_FEEDS = Path(__file__).resolve().parents[1] / "pipeline" / "sample" / "feeds"


def run(items: list[tuple[str, str]], seconds: float) -> tuple[int, float, float]:
    """Tag (title, summary) items in rounds until `seconds` of CPU time have passed: (items, cpu s, wall s)."""
    tag = get_tagger().tag
    done = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.process_time() - cpu0 < seconds:
        for title, summary in items:
            tag(title, summary)
        done += len(items)
    return done, time.process_time() - cpu0, time.perf_counter() - wall0


def sample_articles() -> list[tuple[str, str]]:
    return [
        (entry.get("title", ""), entry.get("summary", ""))
        for path in sorted(SAMPLE_FEEDS.glob("*.xml"))
        for entry in feedparser.parse(str(path)).entries
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per repeat (default 3)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats; the best and the median are reported")
    args = parser.parse_args()
    if args.seconds <= 0 or args.repeats < 1:
        parser.error("--seconds must be > 0 and --repeats >= 1")

    headlines = [(ex.text, "") for ex in load_examples()]
    articles = sample_articles()
    tagger = get_tagger()
    start = time.perf_counter()
    for title, summary in headlines:  # warm-up, and a check that every headline tags
        tagger.tag(title, summary)
    warm = time.perf_counter() - start

    per_cpu, per_wall = [], []
    for _ in range(args.repeats):
        done, cpu, wall = run(headlines, args.seconds)
        per_cpu.append(done / cpu)
        per_wall.append(done / wall)
    best = max(per_cpu)
    done, cpu, _ = run(articles, args.seconds)
    summary_chars = sum(len(s) for _, s in articles) // max(1, len(articles))
    print(json.dumps({
        "benchmark": "tagging",
        "corpus": f"models/eval/tagging.jsonl ({len(headlines)} headlines, title only)",
        "tagger_version": tagger.version,
        "headlines_per_s_per_core": {"best": round(best), "median": round(statistics.median(per_cpu))},
        "headlines_per_s_wall": {"best": round(max(per_wall)), "median": round(statistics.median(per_wall))},
        "us_per_headline_best": round(1e6 / best, 1),
        "goal_per_core": GOAL,
        "meets_goal": best >= GOAL,
        "first_pass_s": round(warm, 4),
        "articles_per_s_per_core": {
            "corpus": f"pipeline/sample/feeds ({len(articles)} items, title + summary, {summary_chars} chars mean)",
            "value": round(done / cpu),
        },
        "repeats": args.repeats,
        "seconds_per_repeat": args.seconds,
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        },
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
