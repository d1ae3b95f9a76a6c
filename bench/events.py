"""Event derivation speed: articles per CPU second, this tree against a baseline commit, in the same run.

    .venv/bin/python bench/events.py [--baseline 3fbbcc9] [--seconds 3] [--repeats 5]

Derives events (``derive_events``, as the ``prediction_events`` asset calls it) over every labelled article the
project ships (models/eval/events.jsonl and models/eval/events_unseen.jsonl: real headlines and summaries),
tagged once beforehand. The baseline is the same measurement on the tree of ``--baseline`` (checked out with
``git worktree`` into a temporary directory and run in a subprocess), alternating with this tree's runs so that
load on a shared machine hits both alike. Prints JSON: articles/s per repeat, the medians, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def articles() -> list[dict]:
    """(title, summary, published_at, tickers, topics) of every labelled article, tagged with this tree's tagger."""
    sys.path.insert(0, str(ROOT))
    from models.tagging import get_tagger

    tag = get_tagger().tag
    out = []
    for name in ("events.jsonl", "events_unseen.jsonl"):
        path = ROOT / "models" / "eval" / name
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                tags = tag(d["title"], d.get("summary") or "")
                out.append({"id": d["key"], "title": d["title"], "summary": d.get("summary") or "",
                            "published_at": d["published_at"], "source": d.get("source_name") or d.get("publisher", ""),
                            "tickers": list(tags.symbols), "topics": list(tags.topics)})
    return out


WORKER = r"""
import json, sys, time
from datetime import datetime
sys.path.insert(0, sys.argv[1])
from pipeline.events import ArticleIn, derive_events
from models.tagging import load_registry
names = {a.symbol: a.name for a in load_registry()}
rows = json.load(open(sys.argv[2]))
seconds = float(sys.argv[3])
items = [ArticleIn(r["id"], r["title"], r["summary"], None, None, r["source"], datetime.fromisoformat(r["published_at"]),
                   tuple(r["tickers"]), tuple(r["topics"])) for r in rows]
derive_events(items[:50], names)  # warm: regexes compiled, reference table read
done, cpu0 = 0, time.process_time()
while time.process_time() - cpu0 < seconds:
    events = derive_events(items, names)
    done += len(items)
print(json.dumps({"articles_per_s": done / (time.process_time() - cpu0), "events": len(events)}))
"""


def measure(tree: Path, data: Path, seconds: float) -> dict:
    out = subprocess.run([sys.executable, "-c", WORKER, str(tree), str(data), str(seconds)],
                         capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="3fbbcc9", help="commit to compare with (default: before issue #19)")
    parser.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per measurement (default 3)")
    parser.add_argument("--repeats", type=int, default=5, help="alternating repeats per tree (default 5)")
    args = parser.parse_args()
    if args.seconds <= 0 or args.repeats < 1:
        parser.error("--seconds must be > 0 and --repeats >= 1")
    start = time.perf_counter()
    rows = articles()
    with tempfile.TemporaryDirectory(prefix="bench-events-") as tmp:
        data = Path(tmp) / "articles.json"
        data.write_text(json.dumps(rows))
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), args.baseline], cwd=ROOT, check=True)
        try:
            now, then = [], []
            for _ in range(args.repeats):
                then.append(measure(base, data, args.seconds))
                now.append(measure(ROOT, data, args.seconds))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    now_med = statistics.median(r["articles_per_s"] for r in now)
    then_med = statistics.median(r["articles_per_s"] for r in then)
    print(json.dumps({
        "command": "bench/events.py " + " ".join(sys.argv[1:]),
        "when": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_1m": os.getloadavg()[0]},
        "articles": len(rows),
        "baseline": args.baseline,
        "this_tree_articles_per_s": [round(r["articles_per_s"]) for r in now],
        "baseline_articles_per_s": [round(r["articles_per_s"]) for r in then],
        "events_derived": {"this_tree": now[0]["events"], "baseline": then[0]["events"]},
        "median_this_tree": round(now_med), "median_baseline": round(then_med),
        "time_per_article_ratio": round(then_med / now_med, 3),  # > 1: this tree is slower per article
        "goal": "time per article at most 1.5x the baseline's",
        "elapsed_s": round(time.perf_counter() - start, 1),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
