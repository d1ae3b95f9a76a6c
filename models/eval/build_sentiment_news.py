"""Assemble models/eval/sentiment_news_{dev,test}.csv from collected news items and three readers' label files.

    .venv/bin/python models/eval/build_sentiment_news.py --items ITEMS.jsonl [...] --labels DIR [...]

``ITEMS.jsonl``: the collected items (as for pipeline/events/build_unseen.py: key, publisher, domain, published_at,
title, ...). ``DIR``: the readers' files ``<chunk>.r<N>.jsonl``, one line per headline (key, label), each reader
having seen the headline alone under the guideline of models/eval/README.md. The label is the majority of the
three votes (the votes are kept, as soft labels for training); the split is models.splits.split_of. Prints the
agreement (pairwise, Fleiss' kappa) as JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.sentiment.data import LABELS  # noqa: E402
from models.sentiment.metrics import fleiss_kappa  # noqa: E402
from models.splits import split_of  # noqa: E402

OUT = ROOT / "models" / "eval"
COLUMNS = ("id", "text", "label", "votes", "publisher", "domain", "published_at")


def read_votes(folders: list[Path]) -> dict[str, dict[int, str]]:
    """Each headline's labels by reader number, from the readers' files ``<chunk>.r<N>.jsonl`` in ``folders``."""
    votes: dict[str, dict[int, str]] = defaultdict(dict)
    for path in sorted(p for folder in folders for p in folder.glob("*.r*.jsonl")):
        reader = int(re.search(r"\.r(\d+)\.jsonl$", path.name).group(1))  # type: ignore[union-attr]
        for line in path.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            if d["label"] not in LABELS:
                raise SystemExit(f"{path}: bad label {d['label']!r}")
            votes[d["key"]][reader] = d["label"]
    return votes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=Path, nargs="+", required=True)
    parser.add_argument("--labels", type=Path, nargs="+", required=True, help="folders of the readers' files")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    items = {d["key"]: d for f in args.items for d in map(json.loads, f.read_text(encoding="utf-8").splitlines()) if d}
    votes = read_votes(args.labels)
    rows = {"dev": [], "test": []}
    for key, by_reader in votes.items():
        if len(by_reader) != 3:
            continue
        it = items[key]
        three = [by_reader[r] for r in sorted(by_reader)]
        label, n = Counter(three).most_common(1)[0]
        if n < 2:
            continue  # three different labels: no majority (none in the shipped set)
        split = split_of(it["domain"], datetime.fromisoformat(it["published_at"]))
        rows[split].append({"id": key, "text": it["title"], "label": label, "votes": "|".join(three),
                            "publisher": it["publisher"], "domain": it["domain"], "published_at": it["published_at"]})
    report = {}
    for split, part in rows.items():
        part.sort(key=lambda r: (r["domain"], r["published_at"], r["id"]))
        with (args.out / f"sentiment_news_{split}.csv").open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(part)
        three_votes = [r["votes"].split("|") for r in part]
        pairs = sum(sum(v[i] == v[j] for i in range(3) for j in range(i + 1, 3)) / 3 for v in three_votes)
        report[split] = {"headlines": len(part), "publishers": len({r["domain"] for r in part}),
                         "labels": dict(Counter(r["label"] for r in part)),
                         "unanimous": round(sum(len(set(v)) == 1 for v in three_votes) / len(part), 4),
                         "pairwise_agreement": round(pairs / len(part), 4),
                         "fleiss_kappa": round(fleiss_kappa(three_votes, LABELS), 4)}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
