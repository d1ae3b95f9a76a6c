"""Build the labelled story pairs (``story_pairs.jsonl``) in two steps; no label is made here.

1. ``candidates``: pairs of items of ``events_unseen.jsonl`` published within 48 h of each other, sampled across
   bands of frozen-encoder similarity (most from the band where same and different stories meet), plus hard
   negatives (a shared ticker, the same day, low similarity). ``--split dev`` draws only pairs whose two items
   are both in the development part (``models/splits.py``), so new pairs never touch the test part. Writes the
   texts readers see (publisher, time, title, start of summary) and nothing about how they were picked.
2. ``merge``: adds the pairs with their three readers' labels (majority = label, votes kept) to ``story_pairs.jsonl``.

    python -m pipeline.stories.build_pairs candidates --split dev --n 900 --seed 11 --out WORKDIR
    python -m pipeline.stories.build_pairs merge --out WORKDIR --batch 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

EVAL = Path(__file__).resolve().parents[2] / "models" / "eval"
PAIRS = EVAL / "story_pairs.jsonl"
# (low, high, share of the sample): the 0.55-0.85 band is where the grouping's errors are.
BANDS = ((0.85, 1.01, 0.15), (0.70, 0.85, 0.30), (0.55, 0.70, 0.25), (0.40, 0.55, 0.12))
HARD_SHARE = 0.18
# Batch 3 on: two generic price pieces within 48 h (cosine >= 0.40), which batches 1-2 barely sampled on dev.
PRICE_SHARE = 0.0


def _items() -> list[dict]:
    # events_unseen.jsonl and events_validation.jsonl (development items only), as the stories evaluation reads them
    from pipeline.stories.evaluate import load_rows

    return load_rows()


def candidates(split: str, n: int, seed: int, out: Path, price_share: float = PRICE_SHARE) -> None:
    import numpy as np

    from models.sentiment.evaluate import frozen_embeddings
    from models.splits import split_of
    from models.tagging import get_tagger
    from pipeline.stories.features import price_piece, story_text

    items = _items()
    when = [datetime.fromisoformat(d["published_at"]) for d in items]
    keep = [i for i, d in enumerate(items) if split == "all" or split_of(d["domain"], when[i]) == split]
    seen = {frozenset((p["a"], p["b"])) for p in map(json.loads, PAIRS.read_text().splitlines())}
    emb = frozen_embeddings([f"{items[i]['title']}. {(items[i].get('summary') or '')[:200]}" for i in keep],
                            max_tokens=96)
    vec = {i: emb[k] for k, i in enumerate(keep)}
    tagger = get_tagger()
    piece = {i: price_piece(items[i]["title"], story_text(items[i]["title"], items[i].get("summary"))) for i in keep}
    tick = {i: set(tagger.tag(items[i]["title"], items[i].get("summary") or "", when[i]).symbols) for i in keep}
    order = sorted(keep, key=lambda i: when[i])
    cands = []
    for x, a in enumerate(order):
        for b in order[x + 1:]:
            if (when[b] - when[a]).total_seconds() > 48 * 3600:
                break
            if items[a]["title"] == items[b]["title"] or frozenset((items[a]["key"], items[b]["key"])) in seen:
                continue
            sim = float(np.dot(vec[a], vec[b]))
            cands.append((sim, a, b, bool(tick[a] & tick[b]), when[a].date() == when[b].date()))
    rng = random.Random(seed)
    picked: list[tuple] = []
    if price_share:
        pool = [c for c in cands if c[0] >= 0.40 and piece[c[1]] and piece[c[2]]]
        rng.shuffle(pool)
        picked += pool[: round(n * price_share)]
    taken = set(picked)
    for lo, hi, share in BANDS:
        pool = [c for c in cands if lo <= c[0] < hi and c not in taken]
        rng.shuffle(pool)
        picked += pool[: round(n * share)]
    chosen = set(picked)
    hard = [c for c in cands if c[3] and c[4] and c[0] < 0.55 and c not in chosen]
    rng.shuffle(hard)
    picked += hard[: round(n * HARD_SHARE)]
    rng.shuffle(picked)
    out.mkdir(parents=True, exist_ok=True)
    meta, lines = [], []
    for sim, a, b, shared, same_day in picked:
        A, B = items[a], items[b]
        key = hashlib.sha256(f"{A['key']}|{B['key']}".encode()).hexdigest()[:16]
        meta.append({"key": key, "a": A["key"], "b": B["key"], "sim": round(sim, 4),
                     "hard_negative_candidate": shared and same_day and sim < 0.55})
        side = [{"publisher": d["publisher"], "published_at": d["published_at"], "title": d["title"],
                 "summary": (d.get("summary") or "")[:400]} for d in (A, B)]
        lines.append(json.dumps({"key": key, "a": side[0], "b": side[1]}, ensure_ascii=False))
    (out / "pairs_meta.json").write_text(json.dumps({"split": split, "pairs": meta}))
    (out / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    print(f"{len(cands)} candidate pairs, {len(picked)} picked "
          f"({sum(m['hard_negative_candidate'] for m in meta)} hard-negative candidates)", file=sys.stderr)


def merge(out: Path, batch: int) -> None:
    meta = json.loads((out / "pairs_meta.json").read_text())
    votes: dict[str, list[str]] = {m["key"]: [] for m in meta["pairs"]}
    for path in sorted((out / "labels").glob("p.r*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            votes[row["key"]].append(row["label"])
    rows = []
    for m in meta["pairs"]:
        v = votes[m["key"]]
        if len(v) != 3 or set(v) - {"same", "not"}:
            raise SystemExit(f"pair {m['key']}: expected three votes same/not, got {v}")
        label = Counter(v).most_common(1)[0][0]
        rows.append({"key": m["key"], "a": m["a"], "b": m["b"], "label": label, "votes": v, "split": meta["split"],
                     "hard_negative_candidate": m["hard_negative_candidate"], "batch": batch})
    existing = PAIRS.read_text()
    with PAIRS.open("a") as f:
        if existing and not existing.endswith("\n"):
            f.write("\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    from models.sentiment.metrics import fleiss_kappa

    all_votes = [r["votes"] for r in rows]
    agree = sum(len(set(v)) == 1 for v in all_votes) / len(rows)
    pairwise = sum((v[0] == v[1]) + (v[0] == v[2]) + (v[1] == v[2]) for v in all_votes) / (3 * len(rows))
    print(f"added {len(rows)} pairs ({sum(r['label'] == 'same' for r in rows)} same); readers: unanimous "
          f"{agree:.1%}, pairwise {pairwise:.3f}, Fleiss' kappa {fleiss_kappa(all_votes, ('same', 'not')):.3f}",
          file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("candidates")
    c.add_argument("--split", choices=["dev", "test", "all"], default="dev")
    c.add_argument("--n", type=int, default=900)
    c.add_argument("--seed", type=int, default=11)
    c.add_argument("--price-share", type=float, default=PRICE_SHARE,
                   help="share of pairs of two generic price pieces (batch 3: 0.15)")
    c.add_argument("--out", type=Path, required=True)
    m = sub.add_parser("merge")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--batch", type=int, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "candidates":
        candidates(args.split, args.n, args.seed, args.out, args.price_share)
    else:
        merge(args.out, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
