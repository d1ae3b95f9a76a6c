"""Assemble the dated ticker sets from three blind readers' files (models/eval/README.md, "Tickers as of the
article's date"): models/eval/tagging_news.jsonl (news of 2024-2026, texts included) and
models/eval/tagging_cryptolin.jsonl (CryptoLin headlines of 2018-2022, by id; the texts stay in ../shared).

    .venv/bin/python models/eval/build_tagging_dated.py --headlines H.jsonl --labels DIR --items ITEMS.jsonl

``H.jsonl``: the headlines given to the readers (key ``news:<key>`` or ``cryptolin:<id>``, date, headline).
``DIR``: ``t.r<N>.jsonl`` (key, tickers). A ticker is gold when at least two readers wrote it; readers' "?name"
entries (an asset whose ticker they did not know) are kept apart as ``unknown``. News rows carry their
publisher's domain and the split of models.splits; CryptoLin rows a split by a hash of the id (a quarter test).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from models.splits import split_of  # noqa: E402

OUT = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--headlines", type=Path, required=True)
    parser.add_argument("--labels", type=Path, required=True)
    parser.add_argument("--items", type=Path, required=True, help="the collected news items (for their publishers)")
    args = parser.parse_args()
    items = {d["key"]: d for d in map(json.loads, args.items.read_text(encoding="utf-8").splitlines()) if d}
    readers = {}
    for path in sorted(args.labels.glob("t.r*.jsonl")):
        n = int(re.search(r"\.r(\d+)\.jsonl$", path.name).group(1))  # type: ignore[union-attr]
        readers[n] = {d["key"]: d["tickers"] for d in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    out: dict[str, list[dict]] = {"news": [], "cryptolin": []}
    same = 0
    total = 0
    for line in args.headlines.read_text(encoding="utf-8").splitlines():
        h = json.loads(line)
        lists = [sorted(set(readers[r][h["key"]])) for r in sorted(readers)]
        votes = Counter(t for lst in lists for t in lst)
        gold = sorted(t for t, n in votes.items() if n >= 2 and not t.startswith("?"))
        unknown = sorted(t for t, n in votes.items() if n >= 2 and t.startswith("?"))
        same += len({tuple(x) for x in lists}) == 1
        total += 1
        part, ident = h["key"].split(":", 1)
        row = {"id": ident, "date": h["date"], "tickers": gold, "unknown": unknown, "readers": lists}
        if part == "news":
            domain = items[ident]["domain"]
            row.update(text=h["headline"], domain=domain,
                       split=split_of(domain, datetime.fromisoformat(items[ident]["published_at"])))
        else:
            row["split"] = "test" if hashlib.sha256(f"tagging:{ident}".encode()).digest()[0] % 4 == 0 else "dev"
        out[part].append(row)
    for part, rows in out.items():
        rows.sort(key=lambda r: (r["date"], r["id"]))
        (OUT / f"tagging_{part}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                                   encoding="utf-8")
    print(json.dumps({"news": len(out["news"]), "cryptolin": len(out["cryptolin"]),
                      "all_three_readers_identical": round(same / total, 4)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
