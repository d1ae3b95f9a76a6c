"""Assemble models/eval/sentiment_assets.jsonl: headlines naming several assets, each asset's sentiment read by
three blind readers (models/eval/README.md, "Per-asset sentiment").

    .venv/bin/python models/eval/build_sentiment_assets.py --items ITEMS.jsonl --headlines H.jsonl --labels DIR

``H.jsonl``: the headlines given to the readers (key, headline, tickers: the tagger's tickers of the headline).
``DIR``: the readers' files ``m.r<N>.jsonl`` (key, labels {ticker: positive|neutral|negative|not_named}).
A ticker's gold label is the majority of the three; tickers most readers call not_named, or with three different
answers, are dropped (and counted). The split is models.splits.split_of. Prints agreement as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from models.sentiment.metrics import fleiss_kappa  # noqa: E402
from models.splits import split_of  # noqa: E402

OUT = ROOT / "models" / "eval" / "sentiment_assets.jsonl"
VALUES = ("negative", "neutral", "positive", "not_named")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=Path, required=True)
    parser.add_argument("--headlines", type=Path, required=True)
    parser.add_argument("--labels", type=Path, required=True)
    args = parser.parse_args()
    items = {d["key"]: d for d in map(json.loads, args.items.read_text(encoding="utf-8").splitlines()) if d}
    readers = {}
    for path in sorted(args.labels.glob("m.r*.jsonl")):
        n = int(re.search(r"\.r(\d+)\.jsonl$", path.name).group(1))  # type: ignore[union-attr]
        readers[n] = {d["key"]: d["labels"] for d in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    rows, votes_all, dropped = [], [], Counter()
    for line in args.headlines.read_text(encoding="utf-8").splitlines():
        h = json.loads(line)
        it = items[h["key"]]
        tickers = {}
        for t in h["tickers"]:
            three = [readers[r][h["key"]][t] for r in sorted(readers)]
            if any(v not in VALUES for v in three):
                raise SystemExit(f"{h['key']}: bad label in {three}")
            votes_all.append(three)
            label, n = Counter(three).most_common(1)[0]
            if n < 2 or label == "not_named":
                dropped["no majority" if n < 2 else "not_named"] += 1
                continue
            tickers[t] = {"label": label, "votes": three}
        if len(tickers) < 2:
            dropped["fewer than two assets left"] += 1
            continue
        published = datetime.fromisoformat(it["published_at"])
        rows.append({"key": h["key"], "text": h["headline"], "publisher": it["publisher"], "domain": it["domain"],
                     "published_at": it["published_at"], "split": split_of(it["domain"], published),
                     "tickers": tickers})
    rows.sort(key=lambda r: (r["split"], r["domain"], r["published_at"], r["key"]))
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    pairs = sum(sum(v[i] == v[j] for i in range(3) for j in range(i + 1, 3)) / 3 for v in votes_all)
    print(json.dumps({
        "headlines": len(rows), "asset_labels": sum(len(r["tickers"]) for r in rows),
        "split": dict(Counter(r["split"] for r in rows)),
        "pairwise_agreement": round(pairs / len(votes_all), 4),
        "fleiss_kappa": round(fleiss_kappa(votes_all, VALUES), 4), "dropped": dict(dropped),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
