"""Assemble models/eval/events_unseen.jsonl from collected news items and the blind readers' label files.

    .venv/bin/python -m pipeline.events.build_unseen --items ITEMS.jsonl --labels DIR [--readers 3]

``ITEMS.jsonl``: one collected item per line (key, publisher, domain, published_at, title, summary, link, guid,
provenance {repo, commit, path, licence}). ``DIR``: the readers' files, ``<chunk>.r<N>.jsonl``, one line per
item (key, events, out_of_scope, note), as models/eval/EVENTS_GUIDELINE.md asks. Only items that every one of
``--readers`` readers labelled are kept. The split comes from ``pipeline.events.unseen.split_of``. Also writes
models/eval/events_unseen_SOURCES.md (which repositories, commits and licences the kept items come from).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from models.splits import TEST_FROM, TEST_PUBLISHERS, split_of
from pipeline.events.unseen import UNSEEN_PATH

KINDS = {"price_threshold", "etf_decision", "listing", "upgrade_or_launch", "token_unlock", "governance_vote"}


def clean_label(d: dict) -> dict:
    events = []
    for e in d.get("events") or []:
        kind = e.get("kind")
        if kind not in KINDS or not e.get("asset") or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(e.get("date"))):
            raise ValueError(f"{d.get('key')}: malformed event {e!r}")
        events.append({k: e.get(k) for k in ("asset", "kind", "comparator", "threshold", "date", "subject")})
    return {"events": events, "out_of_scope": bool(d.get("out_of_scope")), "note": d.get("note") or ""}


def _split(item: dict, part: str | None) -> str:
    split = split_of(item["domain"], datetime.fromisoformat(item["published_at"]))
    if part is not None and split != "dev":
        raise SystemExit(f"{item['key']} ({item['domain']}, {item['published_at']}) is a test item, not for --part")
    return part or split


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=Path, required=True)
    parser.add_argument("--labels", type=Path, required=True)
    parser.add_argument("--readers", type=int, default=3)
    parser.add_argument("--out", type=Path, default=UNSEEN_PATH)
    parser.add_argument("--part", default=None,
                        help="name every item's split this (e.g. val: development items read by no one while the "
                        "rules were written); all of them must be development items")
    args = parser.parse_args()
    items = {}
    for line in args.items.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            items[d["key"]] = d
    labels: dict[str, dict[int, dict]] = defaultdict(dict)
    for path in sorted(args.labels.glob("*.r*.jsonl")):
        reader = int(re.search(r"\.r(\d+)\.jsonl$", path.name).group(1))  # type: ignore[union-attr]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{n}: not JSON ({exc})") from exc
            labels[d["key"]][reader] = clean_label(d)
    kept = []
    for key, by_reader in labels.items():
        if key not in items:
            raise SystemExit(f"label for an unknown item {key}")
        if len(by_reader) < args.readers:
            continue
        it = items[key]
        kept.append({
            "key": key, "publisher": it["publisher"], "domain": it["domain"], "published_at": it["published_at"],
            "title": it["title"], "summary": it.get("summary") or "", "link": it.get("link"),
            "provenance": it.get("provenance"),
            "split": _split(it, args.part),
            "readers": [by_reader[r] for r in sorted(by_reader)][: args.readers],
        })
    kept.sort(key=lambda d: (d["split"], d["domain"], d["published_at"], d["key"]))
    args.out.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in kept), encoding="utf-8")
    sources: dict[tuple, Counter] = defaultdict(Counter)
    for d in kept:
        p = d["provenance"] or {}
        sources[(p.get("repo"), p.get("licence"))][d["publisher"]] += 1
    lines = [
        f"# Sources of {args.out.name}", "",
        f"{len(kept)} real news items (headline and summary as the feed gave them; summaries cut to 700 characters),",
        "collected from public GitHub repositories that keep crypto news feed snapshots; each line's `provenance`",
        "names the repository, commit and path it was read from. The content belongs to its publishers. No item of",
        "u.today, decrypt.co or bitcoinmagazine.com is included (held back for outside checks). Most items of",
        "nirholas/cryptocurrency.cv come from its `archive/` back-fill (`\"source\": \"historical-import\"`), not",
        "from a feed read at publication time; `provenance.note` says which. That repository was MIT-licensed at",
        "both commits read here; it was relicensed later (non-commercial from 2026-02-05, all rights reserved from",
        "2026-07-14), which does not change the licence of the commits read. Headlines and summaries are kept as",
        "short quotations for evaluation only.", "",
        f"Split: test = publishers {', '.join(sorted(TEST_PUBLISHERS))}, and every item published on or after "
        f"{TEST_FROM:%Y-%m-%d}; dev = the rest.", "",
        "| repository | licence | items | publishers |", "|---|---|---|---|",
    ]
    for (repo, licence), pubs in sorted(sources.items(), key=lambda kv: -sum(kv[1].values())):
        shown = ", ".join(f"{p} {n}" for p, n in pubs.most_common())
        lines.append(f"| {repo} | {licence or 'none stated'} | {sum(pubs.values())} | {shown} |")
    split_counts = Counter(d["split"] for d in kept)
    lines += ["", "Items per split: " + ", ".join(f"{k} {n}" for k, n in sorted(split_counts.items())) + ".", ""]
    args.out.with_name(f"{args.out.stem}_SOURCES.md").write_text("\n".join(lines), encoding="utf-8")
    print(json.dumps({"kept": len(kept), "split": dict(split_counts),
                      "publishers": dict(Counter(d["domain"] for d in kept).most_common())}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
